"""A daemon for a benchmark script: started as a process of its own and waited for (:func:`launch`), and
polled from another process (:func:`poll_state`), as ``superinferd top`` would poll: the poll's latencies are
the daemon's, not those of a load generator sharing an event loop (and a garbage collector) with it.

    proc, url = launch(cmd, state_dir, log_path, env)
    stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
    p = ctx.Process(target=poll_state, args=(url, 0.2, stop, out, ready)); p.start()
    ready.wait(60)  # its interpreter has started and polled once: the start's CPU is not the load's
    ...; stop.set(); polls = out.get(timeout=60); p.join()

Each entry of the list put on ``out`` is ``(status, seconds, live)``: a transport error is status -1; ``live``
is the daemon's waiting + running + rotary requests in that answer (-1 when it had none). The first poll
(made before ``ready`` is set) is not in it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any


def launch(cmd: list[str], state_dir: Path, log_path: Path, env: dict[str, str], *, cwd: Path | None = None,
           ready_path: str = "/healthz", timeout_s: float = 600.0) -> tuple[subprocess.Popen, str]:
    """Start ``cmd`` (a ``superinferd start`` with ``--state-dir state_dir --port 0``), its output to
    ``log_path``, in a session of its own as under systemd (the kernel's autogroup shares CPU between sessions
    first: the load generator's session is not the daemon's); return it and its URL once ``ready_path``
    answers 200 (``/healthz``: serving, not starting). Raises SystemExit when it exits or is not ready within ``timeout_s`` (then it is killed)."""
    import httpx

    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited with {proc.returncode}; see {log_path}")
        try:
            url = json.loads((state_dir / "runtime.json").read_text())["url"]
            if httpx.get(url + ready_path, timeout=2).status_code == 200:
                return proc, url
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"daemon did not become ready in {timeout_s:g} s; see {log_path}")


def poll_state(url: str, every_s: float, stop: Any, out: Any, ready: Any = None) -> None:
    """GET ``url``/v1/state every ``every_s`` until ``stop`` is set; then put the list of (status, seconds,
    live). ``ready`` (an Event, optional) is set after a first poll, which is not counted."""
    import httpx

    polls: list[tuple[int, float, int]] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        with contextlib.suppress(httpx.HTTPError):
            client.get("/v1/state")
        if ready is not None:
            ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            live = -1
            try:
                r = client.get("/v1/state")
                status = r.status_code
                seconds = time.perf_counter() - t0
                if status == 200:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        q = r.json()["queues"]
                        live = int(q["waiting"] + q["running"] + q["rotary"])
            except httpx.HTTPError:
                status, seconds = -1, time.perf_counter() - t0
            polls.append((status, seconds, live))
            time.sleep(every_s)
    out.put(polls)
