"""Trust in an on-disk cache: what a cache holds is used only if this user owns it and nobody else can
write it (the native extension is loaded as code; a kernel plan decides which kernels compute).

    trusted:   owner == this process's effective uid, and mode has no group/world write bit (0o022)

A cache entry that fails this is not used: the native build directory is removed and rebuilt, a plan is
re-measured; each with a warning that says why. Symbolic links are judged by what they point to only if
they are ours too (lstat first).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def distrust(path: Path) -> str | None:
    """Why `path` (a file or directory) may not be trusted, or None if it is ours and not writable by others."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if stat.S_ISLNK(st.st_mode):
        return distrust(path.resolve())
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by its group or by everyone (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def first_distrust(*paths: Path) -> str | None:
    """The first reason any of `paths` may not be trusted, or None."""
    for path in paths:
        reason = distrust(path)
        if reason is not None:
            return reason
    return None
