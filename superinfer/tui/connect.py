"""Where the daemon is and which token to use, from flags, the environment and the state directory.

URL: ``--url``, else ``$SUPERINFER_URL``, else ``url`` in ``<state-dir>/runtime.json`` (re-read at every
reconnect: a restarted daemon on ``--port 0`` listens elsewhere). Token: ``--token-file``, else
``$SUPERINFER_API_TOKEN``, else ``<state-dir>/api-token``. The state directory: ``--state-dir``, else
``$SUPERINFER_STATE_DIR``, else the daemon's default. The token is never printed; without a readable token
the dashboard runs read-only and :attr:`Target.read_only_reason` says why.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from superinfer.daemon.lifecycle import RUNTIME_FILE, TOKEN_FILE

ENV_URL = "SUPERINFER_URL"
ENV_TOKEN = "SUPERINFER_API_TOKEN"
ENV_STATE_DIR = "SUPERINFER_STATE_DIR"


class NotRunning(Exception):
    """No URL could be found: no flag, no environment variable, no ``runtime.json``. ``reason`` is short
    (for the banner); the message names the state directory."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def default_state_dir(env: dict[str, str] | None = None) -> Path:
    """The daemon's default state directory (``superinferd start`` without ``--state-dir``)."""
    from superinfer.daemon.config import default_state_dir as daemon_default

    return Path(daemon_default(env)[0])


@dataclass
class Target:
    """How to reach one daemon. ``url`` may be empty until :meth:`resolve_url` finds one."""

    url: str = ""
    url_source: str = ""
    state_dir: Path | None = None
    token: str | None = field(default=None, repr=False)
    token_source: str = ""
    read_only_reason: str | None = None
    url_fixed: bool = False  # from a flag or the environment: never re-read
    token_from_state_dir: bool = False  # re-read at every reconnect

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def resolve_url(self) -> str:
        """The URL to use now; re-reads ``runtime.json`` unless the URL was given. Raises
        :class:`NotRunning` when there is none."""
        if self.url_fixed:
            return self.url
        if self.state_dir is None:
            raise NotRunning("no --url, no $SUPERINFER_URL and no state directory", "no URL")
        info = _read_runtime(self.state_dir)
        url = info.get("url") if info else None
        if not isinstance(url, str) or not url:
            raise NotRunning(f"superinferd is not running (no {RUNTIME_FILE} in state dir {self.state_dir})",
                             f"daemon not running (no {RUNTIME_FILE})")
        self.url = url.rstrip("/")
        self.url_source = str(self.state_dir / RUNTIME_FILE)
        if self.token_from_state_dir:
            self.token_from_dir(self.state_dir)  # a first start may have created it since
        return self.url

    def token_from_dir(self, state_dir: Path) -> None:
        """Take the token from ``<state_dir>/api-token``; when unreadable, say why (read-only)."""
        path = state_dir / TOKEN_FILE
        self.token_from_state_dir = True
        token, why = read_token(path)
        if token is not None:
            self.token, self.token_source = token, str(path)
            if self.read_only_reason != "--read-only":
                self.read_only_reason = None
        elif self.read_only_reason != "--read-only":
            self.token = None
            self.read_only_reason = f"no API token: {why}; pass --token-file or set ${ENV_TOKEN}"


def _read_runtime(state_dir: Path) -> dict | None:
    try:
        data = json.loads((state_dir / RUNTIME_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_token(path: Path) -> tuple[str | None, str]:
    """(token, "") or (None, why it could not be read)."""
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except PermissionError:
        return None, f"{path} is not readable by this user"
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    if not token:
        return None, f"{path} is empty"
    return token, ""


def resolve_target(url: str | None = None, state_dir: str | os.PathLike[str] | None = None,
                   token_file: str | os.PathLike[str] | None = None, read_only: bool = False,
                   env: dict[str, str] | None = None) -> Target:
    """Build a :class:`Target` from the flags and ``env`` (default ``os.environ``). Does not contact the
    daemon; the URL from a state directory is read by :meth:`Target.resolve_url`."""
    env = dict(os.environ if env is None else env)
    t = Target()
    if state_dir is not None:
        t.state_dir = Path(state_dir).expanduser()
    elif env.get(ENV_STATE_DIR):
        t.state_dir = Path(env[ENV_STATE_DIR]).expanduser()
    elif not (url or env.get(ENV_URL)):
        t.state_dir = default_state_dir(env)
    if url:
        t.url, t.url_source, t.url_fixed = url.rstrip("/"), "--url", True
    elif env.get(ENV_URL):
        t.url, t.url_source, t.url_fixed = env[ENV_URL].rstrip("/"), f"${ENV_URL}", True
    if token_file is not None:
        token, why = read_token(Path(token_file).expanduser())
        t.token, t.token_source = token, f"--token-file {token_file}"
        if token is None:
            t.read_only_reason = f"no API token: {why}"
    elif env.get(ENV_TOKEN, "").strip():
        t.token, t.token_source = env[ENV_TOKEN].strip(), f"${ENV_TOKEN}"
    elif t.state_dir is not None:
        t.token_from_dir(t.state_dir)
    else:
        t.read_only_reason = f"no API token: pass --token-file, set ${ENV_TOKEN} or --state-dir"
        home = default_state_dir(env)
        info = _read_runtime(home)
        if info and str(info.get("url", "")).rstrip("/") == t.url:  # --url names the local default daemon
            t.token_from_dir(home)
    if read_only:
        t.read_only_reason = "--read-only"
    return t
