"""What this host can run: CPU model, ISA flags and the torch build, probed, never assumed.

The ISA label is the widest vector/matrix extension the CPU reports, for printing and for formats
that need one; formats decide availability from `flags` (or by trying), not from the label alone.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class HostInfo:
    cpu_model: str
    flags: frozenset[str]        # lower-case ISA flags as /proc/cpuinfo spells them ("avx2", "amx_tile", "asimd")
    isa: str                     # "amx", "avx512", "avx2", "neon" or "generic"
    torch_version: str
    torch_capability: str        # torch.backends.cpu.get_cpu_capability(): "AVX2", "AVX512", "DEFAULT", ...
    threads: int                 # torch intra-op threads when probed
    machine: str                 # platform.machine(): "x86_64", "aarch64", ...

    def has(self, *flags: str) -> bool:
        """True when the CPU reports every one of `flags`."""
        return all(f in self.flags for f in flags)

    def describe(self) -> str:
        return (f"{self.cpu_model} ({self.machine}, {self.isa}; torch {self.torch_version} "
                f"capability {self.torch_capability}; {self.threads} threads)")


def isa_label(flags: frozenset[str], machine: str) -> str:
    if {"amx_tile", "amx_bf16"} <= flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    if "asimd" in flags or machine in ("aarch64", "arm64"):
        return "neon"
    return "generic"


def read_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """(model name, flags) from /proc/cpuinfo text (x86 'flags' / arm 'Features'); first CPU only."""
    model, flags = "", frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.lower().split())
    return model, flags


def probe() -> HostInfo:
    """The running host. Falls back to platform.processor() where /proc/cpuinfo is absent."""
    try:
        model, flags = read_cpuinfo(CPUINFO.read_text())
    except OSError:
        model, flags = "", frozenset()
    machine = platform.machine()
    return HostInfo(cpu_model=model or platform.processor() or machine or "unknown CPU", flags=flags,
                    isa=isa_label(flags, machine), torch_version=torch.__version__,
                    torch_capability=torch.backends.cpu.get_cpu_capability(),
                    threads=torch.get_num_threads(), machine=machine)
