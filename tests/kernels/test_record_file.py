"""The record file's layout (kernels/record_file.py): entries written one by one, the header last; a whole
file reads back every entry at its page-aligned offset, and a file cut anywhere is refused, never half read."""
import mmap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from haltwise.kernels.record_file import RecordWriter, read_entries


def written(tmp_path, shapes):
    writer = RecordWriter(tmp_path / "m.x8", tmp_path)
    rng = np.random.default_rng(len(shapes))
    data = {f"e{i}#0": rng.integers(0, 256, shape, dtype=np.uint8) for i, shape in enumerate(shapes)}
    for name, records in data.items():
        writer.add(name, f"Q8_0:{records.shape}", 1008, records)
    writer.finish()
    return writer.path, data


def mapped(path):
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


shapes = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 5000)), min_size=1, max_size=4)


@settings(max_examples=20, deadline=None)
@given(shapes=shapes)
def test_a_whole_file_gives_every_entry_back(tmp_path_factory, shapes):
    path, data = written(tmp_path_factory.mktemp("f"), shapes)
    whole = mapped(path)
    entries = read_entries(whole)
    assert set(entries) == set(data)
    for name, records in data.items():
        e = entries[name]
        assert e.offset % mmap.PAGESIZE == 0 and e.code == 1008
        got = np.frombuffer(whole, np.uint8, e.rows * e.width, e.offset).reshape(e.rows, e.width)
        assert np.array_equal(got, records)


@settings(max_examples=20, deadline=None)
@given(shapes=shapes, cut=st.floats(0, 1, exclude_max=True))
def test_a_file_cut_anywhere_is_refused(tmp_path_factory, shapes, cut):
    path, _ = written(tmp_path_factory.mktemp("f"), shapes)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(int(cut * size))
    if path.stat().st_size == 0:
        return                                        # an empty file cannot even be mapped
    with pytest.raises(ValueError):
        read_entries(mapped(path))


def test_a_writer_abandoned_leaves_no_file(tmp_path):
    writer = RecordWriter(tmp_path / "m.x8", tmp_path)
    view = writer.reserve("e#0", "Q8_0:x", 1008, (8, 100))
    view[:] = 1
    writer.abandon()
    assert list(tmp_path.iterdir()) == [] and int(view.sum()) == 800   # the map outlives the name
