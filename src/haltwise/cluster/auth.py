"""Ray cluster authentication: decided, checked and stated before Ray starts.

    RAY_AUTH_MODE (inherited)   the cluster                             what haltwise does
    unset or "token"            any                                     token auth (the mode is set to "token");
                                                                        the token file made 0600 (below)
    "disabled"                  a local one (always 127.0.0.1 only),    allowed (tests, one machine), with a
                                or joined at a loopback address          warning
    "disabled"                  joined at any other address ("auto"     refused (ClusterAuthError, exit 2):
                                included: where it listens is unknown)  anyone who reaches it could run code in it

Token file: $RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token (Ray's own lookup; a token in $RAY_AUTH_TOKEN
needs no file). A local cluster without one gets a new 256-bit token written with mode 0600 (Ray's own
writer uses the umask: 0644 typically); an existing file of ours that others can read is tightened to
0600, with a warning. Joining a cluster never creates a token: it must be the cluster's.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

log = logging.getLogger("haltwise.cluster")
MODE_VAR, TOKEN_VAR, TOKEN_PATH_VAR = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


class ClusterAuthError(Exception):
    """The cluster's authentication settings are refused; the message says why and what to set."""


@dataclass(frozen=True, slots=True)
class ClusterAuth:
    mode: str                  # "token" or "disabled": what RAY_AUTH_MODE is set to before ray.init
    token_path: Path | None    # the token file in token mode (None: the token is in $RAY_AUTH_TOKEN)
    loopback_only: bool        # the cluster is reachable from this machine only

    def describe(self) -> str:
        if self.mode == "disabled":
            return "ray auth: DISABLED (RAY_AUTH_MODE=disabled; allowed because the cluster is loopback-only)"
        where = f"token file {self.token_path} (mode 0600)" if self.token_path else f"token from ${TOKEN_VAR}"
        return f"ray auth: token ({where})"


def is_loopback_address(address: str | None) -> bool:
    """None (a local cluster, pinned to 127.0.0.1) or HOST[:PORT] whose host is a loopback name or IP."""
    if address is None:
        return True
    host = address.split("://", 1)[-1]
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_auth(address: str | None, env: Mapping[str, str] = os.environ) -> ClusterAuth:
    """The authentication a cluster at `address` (None: a new local one) runs with; ClusterAuthError if refused."""
    mode = (env.get(MODE_VAR) or "token").strip().lower()
    loopback = is_loopback_address(address)
    if mode == "disabled":
        if not loopback:
            raise ClusterAuthError(
                f"{MODE_VAR}=disabled (inherited from the environment) turns Ray's authentication off, and the "
                f"cluster at {address!r} is not loopback-only: anyone who can reach it could run code in it. "
                f"Unset {MODE_VAR} (token auth) or join at a loopback address.")
        return ClusterAuth("disabled", None, True)
    if mode != "token":
        raise ClusterAuthError(f"{MODE_VAR}={env.get(MODE_VAR)!r}: expected 'token' or 'disabled'")
    if env.get(TOKEN_VAR):
        return ClusterAuth("token", None, loopback)
    path = Path(env.get(TOKEN_PATH_VAR) or Path.home() / ".ray" / "auth_token")
    return ClusterAuth("token", path, loopback)


def secure_token_file(path: Path, create: bool) -> None:
    """Make `path` a 0600 token file: created (when `create` and missing) or tightened when others can read it."""
    if not path.exists():
        if not create:
            return   # joining: Ray reports the missing token itself
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # created 0600 (a umask only removes bits): never readable by others, not even for a moment
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        return
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        if st.st_uid != os.geteuid():
            raise ClusterAuthError(f"the Ray token file {path} is readable by others and not ours to fix "
                                   f"(mode {stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid})")
        log.warning("haltwise: the Ray token file %s was readable by others (mode %04o); now 0600",
                    path, stat.S_IMODE(st.st_mode))
        os.chmod(path, 0o600)


def apply(auth: ClusterAuth, local: bool, env: dict[str, str] | os._Environ = os.environ) -> None:
    """Set RAY_AUTH_MODE for ray.init and this process's children; prepare the token file; state the mode."""
    env[MODE_VAR] = auth.mode
    if auth.token_path is not None:
        secure_token_file(auth.token_path, create=local)
    (log.warning if auth.mode == "disabled" else log.info)("%s", auth.describe())
    print(f"haltwise: {auth.describe()}", flush=True)
