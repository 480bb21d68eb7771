"""Build (once) and load the native kernel extension; `python -m haltwise.kernels.native` builds it
at setup time so the first start does not wait for the compiler.

The build goes to a persistent cache, ~/.cache/haltwise/kernels/<key> (HALTWISE_KERNEL_CACHE overrides
the root), keyed by the sources (and their directory), the torch and Python versions and the machine architecture, so any
change rebuilds and stale builds are never loaded. The build directory and the built module must be owned
by this user and not group/world-writable (cache_trust.py), else the directory is removed and rebuilt,
with a warning. No -march: one binary serves every CPU of the
architecture, and ISA-specific kernel files are chosen at run time from what the CPU reports.

Nothing here raises: `load()` returns the module or None, and `failure()` says why it is missing
(no compiler, no ninja, a compile error), which the plan prints as the reason the native formats are
excluded.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import platform
import shutil
import sys
from pathlib import Path
from types import ModuleType

import torch

from haltwise.kernels.cache_trust import first_distrust

log = logging.getLogger("haltwise.kernels")
CSRC = Path(__file__).parent / "csrc"
SOURCES = ("ops.cpp", "decode_stack.cpp", "moe_block.cpp", "thread_pool.cpp", "repack.cpp", "kernels_scalar.cpp",
           "kernels_avx2.cpp", "kernels_x8_avx2.cpp", "kernels_kx8_scalar.cpp", "kernels_kx8_avx2.cpp",
           "kernels_x8_avx512vnni.cpp", "kernels_kx8_avx512vnni.cpp", "kernels_x8_avxvnni.cpp", "kernels_kx8_avxvnni.cpp",
           "kernels_attend_avx512.cpp", "spm_bpe.cpp", "test_hooks.cpp")
# -ffp-contract=off: no a * b + c is fused unless the source says so (intrinsics), so an inlined helper
# computes the same bits at every call site: the batch invariance of the kernels depends on it.
CFLAGS = ["-O3", "-fopenmp", "-ffp-contract=off"]
LDFLAGS = ["-fopenmp"]  # libgomp.so.1: the soname torch already loaded, so one OpenMP pool is shared

_state: dict[str, object] = {}


def cache_root() -> Path:
    env = os.environ.get("HALTWISE_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "haltwise" / "kernels"


def build_key() -> str:
    """A digest of everything the binary depends on."""
    digest = hashlib.sha256()
    for name in sorted(p.name for p in CSRC.iterdir() if p.suffix in (".cpp", ".h", ".inc")):
        digest.update(name.encode())
        digest.update((CSRC / name).read_bytes())
    digest.update(" ".join(CFLAGS + LDFLAGS).encode())
    digest.update(f"torch={torch.__version__} py={sys.version_info[:2]} machine={platform.machine()}".encode())
    # torch's build.ninja names the sources by absolute path: two checkouts sharing one key would rebuild
    # over each other at every alternate start (minutes), so each source directory gets its own build.
    digest.update(str(CSRC.resolve()).encode())
    return digest.hexdigest()[:16]


def load(verbose: bool = False, build: bool = True) -> ModuleType | None:
    """The extension module (building it if the cache lacks it), or None with failure() saying why.
    build=False: None when the cache lacks it, and nothing recorded (a later load() builds it).

    A build the cache holds is imported straight from its .so (torch's loader would import
    torch.utils.cpp_extension and setuptools and run ninja first: ~0.15 s of every start)."""
    if "module" in _state or "failure" in _state:
        return _state.get("module")  # type: ignore[return-value]
    try:
        key = build_key()
        directory = cache_root() / key
        if not build and not (directory / f"haltwise_native_{key}.so").is_file():
            return None
        _drop_if_untrusted(directory, key)
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        os.environ.setdefault("MAX_JOBS", str(max(1, min(3, os.cpu_count() or 1))))
        # torch's own build lock is a plain file that a killed build leaves behind, after which every
        # later load waits on it forever. An flock dies with its holder: under it, no other haltwise
        # build runs, so a torch lock file found here is stale and is removed.
        with open(directory / "haltwise.flock", "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            built = _import_built(directory / f"haltwise_native_{key}.so")   # whole: builds hold the flock
            if built is not None:
                _state["module"] = built
                return built
            if not build:   # removed as untrusted, or a build that does not load: never compiled here
                return None
            from torch.utils import cpp_extension

            (directory / "lock").unlink(missing_ok=True)
            _state["module"] = cpp_extension.load(
                name=f"haltwise_native_{key}", sources=[str(CSRC / s) for s in SOURCES],
                extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS), build_directory=str(directory),
                verbose=verbose)
    except Exception as e:  # compiler missing, ninja missing, compile error: every cause is a reason
        _state["failure"] = _describe(e)
        return None
    return _state["module"]  # type: ignore[return-value]


def loaded() -> ModuleType | None:
    """The extension if load() has already returned it; never builds."""
    return _state.get("module")  # type: ignore[return-value]


def _import_built(path: Path) -> ModuleType | None:
    """The extension imported from a finished build, or None (no build yet, or one that does not load,
    say a link a killed build cut short: removed, so the caller's build links it again)."""
    if not path.is_file():
        return None
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (ImportError, OSError) as e:
        log.warning("haltwise: the cached native kernels %s do not load (%s); rebuilding them", path, e)
        path.unlink(missing_ok=True)
        return None


def _drop_if_untrusted(directory: Path, key: str) -> None:
    """Remove a build directory (and what it holds) that another user owns or others can write: rebuilt."""
    built = [directory / f"haltwise_native_{key}.so", directory / "build.ninja"]
    reason = first_distrust(directory, *built) if directory.exists() else None
    if reason is None:
        return
    log.warning("haltwise: not loading the cached native kernels: %s; rebuilding them", reason)
    shutil.rmtree(directory, ignore_errors=True)
    if directory.exists():
        raise RuntimeError(f"untrusted native kernel cache {directory} ({reason}) could not be removed")


def failure() -> str | None:
    """Why the extension is unavailable, or None (call load() first)."""
    return _state.get("failure")  # type: ignore[return-value]


def _describe(e: Exception) -> str:
    text = str(e).strip().splitlines()
    errors = [line for line in text if "error" in line.lower()]
    detail = (errors or text or [type(e).__name__])[0]
    return f"native kernels failed to build ({type(e).__name__}: {detail[:300]})"


def main() -> int:
    """Setup's build step: fails (1) when a C++ compiler exists but the build failed -- a broken build must
    not pass silently; succeeds without a compiler, where the plan falls back to torch's formats."""
    module = load(verbose="-v" in sys.argv)
    if module is None:
        compiler = shutil.which("c++") or shutil.which("g++")
        print(f"haltwise: {failure()}; the kernel plan will use torch's formats", file=sys.stderr)
        return 1 if compiler else 0
    print(f"haltwise: native kernels ready in {cache_root() / build_key()} (ISA paths: {', '.join(module.isas())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
