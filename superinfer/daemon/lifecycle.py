"""The state directory: pid file under an flock, the API token, runtime info and persisted state.

Layout of ``<state-dir>``: ``superinferd.pid`` (the pid; held under ``flock(LOCK_EX)`` while the daemon
runs, so a second start on the same directory fails and ``status`` can tell a stale file from a live
daemon), ``runtime.json`` (where the running daemon listens), ``api-token`` (0600, created at first
start, kept across restarts), ``params.json`` (live scheduler params, replaced atomically: the vLLM
plugin reads it), ``state.json`` (params and counters persisted at shutdown).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PID_FILE = "superinferd.pid"
RUNTIME_FILE = "runtime.json"
TOKEN_FILE = "api-token"
STATE_FILE = "state.json"
PARAMS_FILE = "params.json"


class AlreadyRunning(RuntimeError):
    """Another daemon holds the state directory."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        super().__init__(f"superinferd is already running on state dir {state_dir} (pid {pid or '?'}); "
                         "stop it first (`superinferd stop`) or use another --state-dir")


def ensure_state_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"state dir {path} is not writable")
    return path


class PidLock:
    """The pid file, locked for the life of the daemon. The lock dies with the process."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / PID_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                pid = read_pid(self.path)
                raise AlreadyRunning(self.path.parent, pid) from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


@dataclass
class Running:
    pid: int
    runtime: dict[str, Any]


def running_daemon(state_dir: Path) -> Running | None:
    """The live daemon on ``state_dir``, or None. Live means: its pid file is locked by someone."""
    path = state_dir / PID_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                pid = read_pid(path)
                if pid is None:
                    return None
                return Running(pid, read_json(state_dir / RUNTIME_FILE) or {})
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def api_token(state_dir: Path) -> str:
    """The bearer token for mutating calls; created (0600, O_EXCL) at first start and kept."""
    path = state_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
        if len(token) < 16:
            raise ValueError(f"{path}: token too short ({len(token)} characters); delete it to make a new one")
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
