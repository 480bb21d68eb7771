"""The native extension builds wherever a C++ compiler exists, and runs the ISA path the CPU reports.

No silent skips: on a machine with a compiler, a failed build fails here (and `make test`), instead of
every native test skipping and the plan quietly falling back to torch's formats.
"""
import os
import shutil
import subprocess
import sys

import pytest

from haltwise.kernels.host import probe
from haltwise.kernels.native import build


def test_the_extension_builds_where_a_compiler_exists():
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler on this machine: the plan falls back to torch's formats, and says so")
    assert build.load() is not None, build.failure()


def test_the_isa_path_in_use_matches_proc_cpuinfo():
    module = build.load()
    assert module is not None, build.failure()
    host = probe()
    x86 = host.machine == "x86_64"
    expected = ["scalar"]
    if x86 and host.has("avx2", "fma", "f16c"):
        expected.append("avx2")
        if host.has("avx_vnni"):                               # /proc/cpuinfo's spellings
            expected.append("avxvnni")
        if host.has("avx512f", "avx512vl", "avx512_vnni"):
            expected.append("avx512vnni")
    assert module.isas() == expected
    assert module.best_isa() == expected[-1]


@pytest.mark.parametrize("chosen", [None, "scalar", "haltwise_test_isa"])
def test_auto_runs_the_widest_path_or_the_one_haltwise_native_isa_names(chosen):
    """isa="auto" (every linear and the decode stack) runs the widest path, or the one the environment
    names for an A/B run; a name this CPU cannot run fails the first call, naming the paths it can."""
    module = build.load()
    assert module is not None, build.failure()
    env = {k: v for k, v in os.environ.items() if k != "HALTWISE_NATIVE_ISA"} | ({"HALTWISE_NATIVE_ISA": chosen} if chosen else {})
    code = ("import torch; from haltwise.kernels.native import build; m = build.load(); print(m.auto_isa());"
            "m.dense(torch.ones(1, 32), torch.ones(2, 32)); print('ran')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if chosen == "haltwise_test_isa":
        assert out.returncode != 0 and f"unknown ISA path {chosen} (this CPU runs: {module.best_isa()}" in out.stderr
    else:
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [chosen or module.best_isa(), "ran"]


def test_setup_fails_when_the_build_fails_with_a_compiler_present(monkeypatch):
    monkeypatch.setattr(build, "_state", {"failure": "native kernels failed to build (a test)"})
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/" + name)
    assert build.main() == 1
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    assert build.main() == 0


def test_a_finished_build_loads_without_torchs_build_machinery():
    """A cached build is imported from its .so: no torch.utils.cpp_extension, no setuptools, no ninja
    run (~0.15 s of every start)."""
    assert build.load() is not None, build.failure()       # the cache holds this tree's build from here on
    code = ("import sys, torch; from haltwise.kernels.native import build; m = build.load(); "
            "print(m is not None and m.best_isa() in m.isas(), 'torch.utils.cpp_extension' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"], out.stderr


def test_a_build_that_does_not_load_is_removed_to_be_linked_again(tmp_path):
    broken = tmp_path / "haltwise_native_0123.so"
    broken.write_bytes(b"\x7fELF cut short")              # what a link killed half way leaves
    assert build._import_built(broken) is None and not broken.exists()
    assert build._import_built(tmp_path / "absent.so") is None
