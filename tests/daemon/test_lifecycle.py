"""Lifecycle of a sim daemon: SIGTERM drain, second start refused, stop/status exit codes, persisted
params, startup probe, sd_notify."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import httpx
import pytest

from tests.daemon.conftest import TEST_PROFILE, base_env, run_cli, start_daemon

pytestmark = pytest.mark.timeout(240)


def test_sigterm_drains_in_flight_requests_and_loses_nothing(tmp_path) -> None:
    d = start_daemon(tmp_path)
    results: list[tuple[int, int]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        r = httpx.post(d.url + "/v1/completions", json={"prompt": "y" * 30, "max_tokens": 120,
                                                        "vllm_xargs": {"tenant": "voice" if i % 2 else "chat"}},
                       timeout=120)
        with lock:
            results.append((r.status_code, r.json().get("usage", {}).get("completion_tokens", -1)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        s = d.state()
        if s["counters"]["arrived"] == 16 and s["queues"]["waiting"] > 0:
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"requests did not queue: {d.state()['queues']}")
    d.proc.send_signal(15)
    # admission is stopped at once, while the in-flight requests keep being served
    refused = None
    for _ in range(100):
        try:
            r = httpx.post(d.url + "/v1/completions", json={"prompt": "late", "max_tokens": 2}, timeout=10)
        except httpx.HTTPError:
            break
        if r.status_code == 503:
            refused = r.json()["error"]["message"]
            break
        time.sleep(0.02)
    assert refused is not None and "draining" in refused
    assert d.proc.wait(60) == 0, d.output()[-3000:]
    for t in threads:
        t.join(30)
    assert results == [(200, 120)] * 16
    saved = json.loads((d.state_dir / "state.json").read_text())
    c = saved["counters"]
    assert c["arrived"] == c["finished"] == 16, c
    assert c["aborted"] == 0 and c["rejected"] == 0
    assert saved["drain"]["aborted"] == 0
    assert "draining" in d.output() and "state persisted" in d.output()
    assert not (d.state_dir / "runtime.json").exists()


def test_drain_deadline_aborts_and_accounts(tmp_path) -> None:
    d = start_daemon(tmp_path, "--set", "engine.drain_timeout_s=0.3")
    codes: list[int] = []
    threads = [threading.Thread(target=lambda: codes.append(httpx.post(
        d.url + "/v1/completions", json={"prompt": "z", "max_tokens": 2000}, timeout=60).status_code))
        for _ in range(6)]
    for t in threads:
        t.start()
    while d.state()["counters"]["arrived"] < 6:
        time.sleep(0.02)
    assert d.terminate() == 0
    for t in threads:
        t.join(30)
    assert codes == [503] * 6  # told, not left hanging
    c = json.loads((d.state_dir / "state.json").read_text())["counters"]
    assert c["arrived"] == c["finished"] + c["aborted"] and c["aborted"] == 6


def test_second_start_refused_and_stop_status(tmp_path) -> None:
    d = start_daemon(tmp_path)
    env = base_env(tmp_path)
    try:
        second = start_daemon(tmp_path, state_dir=d.state_dir, wait_ready=False)
        assert second.proc.wait(60) == 1
        out = second.output()
        assert "already running" in out and str(d.state_dir) in out and str(d.proc.pid) in out
        assert d.get("/healthz").status_code == 200  # the first one is untouched

        st = run_cli("status", "--json", "--state-dir", str(d.state_dir), env=env)
        assert st.returncode == 0, st.stderr
        info = json.loads(st.stdout)
        assert info["running"] is True and info["pid"] == d.proc.pid and info["backend"] == "sim"
        assert info["simulation"] is True and info["state"]["status"] == "ok"

        r = d.put("/v1/params", json={"alpha": 7.5}, headers=d.headers())
        assert r.status_code == 200
        stop = run_cli("stop", "--state-dir", str(d.state_dir), env=env)
        assert stop.returncode == 0, stop.stderr + stop.stdout
        assert d.proc.wait(30) == 0
    finally:
        if d.proc.poll() is None:
            d.terminate()
    st = run_cli("status", "--state-dir", str(d.state_dir), env=env)
    assert st.returncode == 3 and "not running" in st.stdout
    st = run_cli("status", "--json", "--state-dir", str(d.state_dir), env=env)
    assert st.returncode == 3 and json.loads(st.stdout)["running"] is False
    assert run_cli("stop", "--state-dir", str(d.state_dir), env=env).returncode == 3
    assert run_cli("status", "--state-dir", str(tmp_path / "never"), env=env).returncode == 3

    # restart on the same state dir: the live params changed over the API come back, the token is kept
    token = (d.state_dir / "api-token").read_text()
    again = start_daemon(tmp_path, state_dir=d.state_dir)
    try:
        p = again.get("/v1/params").json()
        assert p["alpha"] == 7.5 and p["source"].startswith("state:")
        assert (d.state_dir / "api-token").read_text() == token
    finally:
        assert again.terminate() == 0


def test_probe_and_sd_notify(tmp_path) -> None:
    """b_xfer = auto runs the startup probe; READY/STATUS/WATCHDOG go to an abstract NOTIFY_SOCKET."""
    name = f"superinfer-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(0.5)
    profile = TEST_PROFILE.replace("b_xfer = 256", 'b_xfer = "auto"\nprobe_size_mb = 4\nprobe_repeats = 1')
    d = start_daemon(tmp_path, profile_text=profile,
                     env={"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "400000"})
    messages: list[str] = []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("WATCHDOG=1" in m for m in messages[1:]):
            try:
                messages.append(sock.recv(4096).decode())
            except socket.timeout:
                pass
        s = d.state()
        assert s["probe"] is not None and s["probe"]["b_xfer_blocks"] >= 0 and s["probe"]["device"] == "cpu"
        assert s["probe"]["bytes_each_way"] == 4 << 20
        assert "superinfer_probe_b_xfer_blocks" in d.get("/metrics").text
        assert "probe: cpu" in d.output() and "GB/s" in d.output()
    finally:
        code = d.terminate()
        sock.settimeout(2)
        try:
            while True:
                messages.append(sock.recv(4096).decode())
        except socket.timeout:
            pass
        sock.close()
    assert code == 0
    ready = [m for m in messages if "READY=1" in m]
    assert len(ready) == 1 and "STATUS=SIMULATION" in ready[0] and f"MAINPID={d.proc.pid}" in ready[0]
    assert sum("WATCHDOG=1" in m for m in messages) >= 2
    assert any("STOPPING=1" in m for m in messages)
