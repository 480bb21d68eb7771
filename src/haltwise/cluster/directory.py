"""Where RemoteEngine finds the router of its deployment in this process.

Serve builds the router itself (from the class it was given) inside the process that holds the
deployment handle, and ships router.py by value (cloudpickle), so that module's own globals are a copy:
the directory lives here, in a module imported by reference. Weak values: Serve owns the routers.
"""
from __future__ import annotations

import weakref
from typing import Any

_routers: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def register(deployment: str, router: Any) -> None:
    _routers[deployment] = router


def find(deployment: str) -> Any | None:
    return _routers.get(deployment)
