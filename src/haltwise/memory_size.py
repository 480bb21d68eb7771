"""Memory sizes as the command line writes them: bytes, binary or decimal units, or a fraction of RAM."""
from __future__ import annotations

import os


def parse_memory(text: str | int | float, total_ram: int | None = None) -> int | str:
    """'512MiB', '2GB', '1000000' (bytes) or '0.1' (a fraction of RAM) -> bytes; 'auto' stays 'auto'."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    s = str(text).strip()
    if s.lower() == "auto":
        return "auto"
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "k": 2**10,
             "m": 2**20, "g": 2**30, "b": 1}
    for unit in sorted(units, key=len, reverse=True):
        if s.lower().endswith(unit):
            return int(float(s[: -len(unit)]) * units[unit])
    value = float(s)
    if 0 < value < 1:
        if total_ram is None:
            total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(value * total_ram)
    return int(value)
