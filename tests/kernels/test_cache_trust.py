"""Caches are trusted only when this user owns them and nobody else can write them (kernels/cache_trust.py):
a chmod'ed or chown'ed plan is re-measured, a chmod'ed native build directory is removed and rebuilt."""
import logging
import os

import pytest

from haltwise.kernels import plan, plan_cache
from haltwise.kernels.cache_trust import distrust
from haltwise.kernels.formats import get
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.native import build
from haltwise.models.tiny import tiny_llama

OTHER_UID = 65534   # nobody


@pytest.fixture(autouse=True)
def quiet_timings(monkeypatch):
    monkeypatch.setattr(plan, "implausible_cells", lambda group, last: [])   # as in test_plan_cache.py


def test_distrust_names_the_owner_or_the_mode(tmp_path):
    f = tmp_path / "x"
    f.write_text("x")
    f.chmod(0o644)
    assert distrust(f) is None
    f.chmod(0o664)
    assert "writable by its group" in distrust(f)
    f.chmod(0o646)
    assert "0646" in distrust(f)
    if os.geteuid() == 0:
        f.chmod(0o644)
        os.chown(f, OTHER_UID, -1)
        assert f"uid {OTHER_UID}" in distrust(f)


@pytest.mark.parametrize("tamper", ["file_world_writable", "dir_world_writable", "file_of_another_user"])
def test_an_untrusted_plan_is_measured_again_with_a_warning(tamper, caplog):
    if tamper == "file_of_another_user" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    formats = [get("float32")]
    first, _ = plan_model(tiny_llama(300), None, formats)
    (path,) = plan_cache.cache_dir().glob("*.json")
    if tamper == "file_world_writable":
        path.chmod(0o666)
    elif tamper == "dir_world_writable":
        path.parent.chmod(0o777)
    else:
        os.chown(path, OTHER_UID, -1)
    with caplog.at_level(logging.WARNING, logger="haltwise.kernels"):
        second, _ = plan_model(tiny_llama(300), None, formats)
    assert not second.from_cache, f"a plan was read from an untrusted cache ({tamper})"
    assert "measuring again" in caplog.text
    assert distrust(path) is None and distrust(path.parent) is None   # re-stored safely
    third, _ = plan_model(tiny_llama(300), None, formats)
    assert third.from_cache


def _fake_build_dir(root, key):
    directory = root / key
    directory.mkdir(parents=True)
    (directory / f"haltwise_native_{key}.so").write_bytes(b"\x7fELF not really")
    return directory


@pytest.mark.parametrize("tamper", ["dir_world_writable", "module_group_writable", "module_of_another_user"])
def test_an_untrusted_native_build_directory_is_removed_before_loading(tamper, tmp_path, caplog):
    if tamper == "module_of_another_user" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    directory = _fake_build_dir(tmp_path, "k1")
    module = directory / "haltwise_native_k1.so"
    if tamper == "dir_world_writable":
        directory.chmod(0o777)
    elif tamper == "module_group_writable":
        module.chmod(0o664)
    else:
        os.chown(module, OTHER_UID, -1)
    with caplog.at_level(logging.WARNING, logger="haltwise.kernels"):
        build._drop_if_untrusted(directory, "k1")
    assert not directory.exists(), "an untrusted build would have been loaded"
    assert "rebuilding" in caplog.text


def test_a_trusted_native_build_directory_is_kept(tmp_path):
    directory = _fake_build_dir(tmp_path, "k2")
    directory.chmod(0o755)
    build._drop_if_untrusted(directory, "k2")
    assert (directory / "haltwise_native_k2.so").is_file()
