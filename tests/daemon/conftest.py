"""Start ``superinferd`` as a subprocess on loopback (``--port 0``; the port is read from runtime.json)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import httpx
import pytest

from superinfer.core import PARAM_BOUNDS, Params
from tests.daemon.profiles import profile_toml

REPO = Path(__file__).resolve().parents[2]
SUPERINFERD = [sys.executable, "-m", "superinfer.cli"]

#: the common test profile (:data:`tests.daemon.profiles.TWIN`): a small, fast twin with a fixed B_xfer (no
#: probe), few sequences so queues form, no replay, tenants "chat" and "voice"
TEST_PROFILE = profile_toml()

#: the core's defaults of every live knob (``PARAM_BOUNDS``), for tests that cover every knob
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Params) if f.name in PARAM_BOUNDS}


def knob_values(key: str) -> tuple[float | int, float | int]:
    """(a profile value, a PUT value) for knob ``key``: within its bounds, the first not the default, the
    second not the first (and not the default where the range allows)."""
    lo, hi = PARAM_BOUNDS[key]
    is_int = isinstance(DEFAULTS[key], int)
    cands = list(dict.fromkeys(int(c) if is_int else float(c) for c in (lo, hi, lo + (hi - lo) / 4, lo + (hi - lo) / 3)))
    first = next(c for c in cands if c != DEFAULTS[key])
    second = next((c for c in cands if c not in (first, DEFAULTS[key])), None)
    return first, next(c for c in cands if c != first) if second is None else second


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERINFER_")}
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "STATE_DIRECTORY", "INVOCATION_ID"):
        env.pop(k, None)
    env["XDG_CONFIG_HOME"] = str(tmp / "xdg-config")
    env["XDG_STATE_HOME"] = str(tmp / "xdg-state")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class DaemonProc:
    proc: subprocess.Popen
    state_dir: Path
    log: Path
    url: str = ""
    token: str = ""

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10.0, **kw)

    def put(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.put(self.url + path, timeout=10.0, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.post(self.url + path, timeout=60.0, **kw)

    def state(self) -> dict[str, Any]:
        r = self.get("/v1/state")
        assert r.status_code == 200, r.text
        return r.json()

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def terminate(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"daemon did not exit within {timeout} s after SIGTERM:\n{self.output()[-4000:]}")


def start_daemon(tmp: Path, *args: str, profile_text: str | None = TEST_PROFILE, state_dir: Path | None = None,
                 env: dict[str, str] | None = None, wait_ready: bool = True, timeout: float = 60.0,
                 backend: str = "sim") -> DaemonProc:
    state_dir = state_dir or tmp / "state"
    cmd = [*SUPERINFERD, "start", "--backend", backend, "--port", "0", "--state-dir", str(state_dir)]
    if profile_text is not None:
        pfile = tmp / "test-profile.toml"
        pfile.write_text(profile_text)
        cmd += ["--profile-file", str(pfile)]
    cmd += list(args)
    log = tmp / f"daemon-{len(list(tmp.glob('daemon-*.log')))}.log"
    full_env = base_env(tmp)
    full_env.update(env or {})
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=REPO)
    d = DaemonProc(proc, state_dir, log)
    if wait_ready:
        wait_ready_(d, timeout)
    return d


def wait_ready_(d: DaemonProc, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    runtime = d.state_dir / "runtime.json"
    while time.monotonic() < deadline:
        if d.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {d.proc.returncode}:\n{d.output()[-4000:]}")
        if runtime.exists() and not d.url:
            try:
                d.url = json.loads(runtime.read_text())["url"]
            except (ValueError, KeyError):
                pass
        if d.url:
            try:
                if httpx.get(d.url + "/healthz", timeout=2.0).status_code == 200:
                    d.token = (d.state_dir / "api-token").read_text().strip()
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    d.proc.kill()
    raise AssertionError(f"daemon not ready within {timeout} s:\n{d.output()[-4000:]}")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([*SUPERINFERD, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    """One sim daemon shared by a module's read-mostly tests."""
    tmp = tmp_path_factory.mktemp("daemon")
    d = start_daemon(tmp)
    yield d
    code = d.terminate()
    assert code == 0, d.output()[-4000:]


def sim_daemon(cfg: Any, tmp_path: Path, predictor: Any = None) -> tuple[Any, Any, Any]:
    """An in-process daemon on the sim backend for ``cfg`` (not started): (backend, daemon, the FastAPI app
    with the backend's OpenAI routes). ``predictor``: the backend's admission WaitPredictor, if given."""
    from fastapi import FastAPI

    from superinfer.daemon.backends.sim import SimBackend
    from superinfer.daemon.params import ParamStore
    from superinfer.daemon.server import Daemon

    backend = SimBackend(cfg)
    if predictor is not None:
        backend.predictor = predictor
    daemon = Daemon(cfg, backend)
    daemon.store = ParamStore(cfg.params(), 256, cfg.tenants, tmp_path / "params.json", "test")
    app = FastAPI()
    backend.register_routes(app, daemon)
    return backend, daemon, app


def completion(tenant: str, max_tokens: int, stream: bool = False) -> dict:
    """A completion request body of ``tenant`` (a 400-character prompt)."""
    return {"prompt": "x" * 400, "max_tokens": max_tokens, "stream": stream, "vllm_xargs": {"tenant": tenant}}
