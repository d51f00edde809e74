"""``superinferd top`` as scripts and SSH sessions use it: no TTY, ``--once``, ``--json``, exit codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.daemon.conftest import REPO, SUPERINFERD, DaemonProc, base_env

FIXTURE = Path("tests/tui/fixtures/demo.jsonl.gz")  # relative: the url= line names it
GOLDEN = REPO / "tests" / "tui" / "snapshots" / "once_demo.txt"

pytestmark = pytest.mark.timeout(120)


def top(*args: str, tmp: Path, timeout: float = 60.0, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``superinferd top`` with stdin and stdout not a terminal."""
    full = {**base_env(tmp), **(env or {})}
    full.pop("NO_COLOR", None)
    return subprocess.run([*SUPERINFERD, "top", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=full, timeout=timeout, cwd=REPO)


def pairs(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        assert sep and key and " " not in key, f"not a key=value line: {line!r}"
        out[key] = value
    return out


def test_once_without_a_tty_prints_plain_key_value_lines(daemon: DaemonProc, tmp_path: Path) -> None:
    r = top("--once", "--state-dir", str(daemon.state_dir), tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout  # no colour without a TTY
    kv = pairs(r.stdout)
    assert kv["url"] == daemon.url and kv["connected"] == "true" and kv["simulation"] == "true"
    assert kv["backend"] == "sim" and kv["pid"] == str(daemon.proc.pid)
    assert kv["tenant.chat.verdict"] == "unjudged" and kv["tenant.voice.ttft_slo_s"] == "1.0"
    assert kv["tenant.chat.ttft_attainment"] == "null"  # nothing served yet: unknown, not 100 %
    assert daemon.token not in r.stdout + r.stderr  # the token is never printed


def test_once_json_is_the_raw_state_plus_derived_fields(daemon: DaemonProc, tmp_path: Path) -> None:
    r = top("--once", "--json", "--url", daemon.url, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["state"]["pid"] == daemon.proc.pid and obj["state"]["schema_version"] == 1
    assert set(obj["derived"]["tenants"]) == {"chat", "voice"} and obj["connected"] is True
    assert obj["derived"]["target_attainment"] == 0.9


def test_json_streams_one_object_per_poll(daemon: DaemonProc, tmp_path: Path) -> None:
    env = base_env(tmp_path)
    proc = subprocess.Popen([*SUPERINFERD, "top", "--json", "--interval", "0.2", "--url", daemon.url],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env, cwd=REPO)
    try:
        objs = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait(10)
    assert [o["connected"] for o in objs] == [True] * 3
    assert objs[0]["t"] < objs[1]["t"] < objs[2]["t"]
    assert objs[0]["events"][0]["kind"] == "connect" and all(not o["events"] for o in objs[1:])


def test_exit_3_without_a_daemon(tmp_path: Path) -> None:
    r = top("--once", "--state-dir", str(tmp_path / "nothing"), tmp=tmp_path)
    assert r.returncode == 3 and "not running" in r.stderr and str(tmp_path / "nothing") in r.stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = top("--once", "--json", "--url", f"http://127.0.0.1:{port}", tmp=tmp_path)
    assert r.returncode == 3 and "unreachable" in r.stderr and r.stdout == ""


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    r = top(tmp=tmp_path)  # the dashboard itself needs a terminal
    assert r.returncode == 2 and "needs a terminal; use --once or --json" in r.stderr
    assert top("--once", "--interval", "0", tmp=tmp_path).returncode == 2
    r = top("--record", "a.jsonl", "--replay", str(FIXTURE), tmp=tmp_path)
    assert r.returncode == 2 and "exclude each other" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 1}\n')
    r = top("--once", "--replay", str(bad), tmp=tmp_path)
    assert r.returncode == 2 and "bad.jsonl:1" in r.stderr


def test_once_format_is_stable_on_a_recording(tmp_path: Path) -> None:
    """The whole ``--once`` output for the recorded demo (its last poll, derived from the full history)."""
    r = top("--once", "--replay", str(FIXTURE), tmp=tmp_path, env={"TZ": "UTC"})
    assert r.returncode == 0, r.stderr
    if os.environ.get("SUPERINFER_UPDATE_SNAPSHOTS"):
        GOLDEN.write_text(r.stdout)
    assert r.stdout == GOLDEN.read_text()
    kv = pairs(r.stdout)
    assert kv["profile"] == "demo" and kv["tenant.voice.verdict"] in ("OK", "WARN", "BREACH", "unjudged")
