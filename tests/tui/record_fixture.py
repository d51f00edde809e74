"""Re-record ``tests/tui/fixtures/demo.jsonl.gz``, the states the snapshot tests replay.

A real daemon on the bundled ``demo`` profile (sim backend, loopback, free port) is polled by
``superinferd top --json --record`` once a second: ~50 s of traffic, a param change through the API at
~40 s, the daemon stopped and started again on the same state dir (so the recording holds a disconnect,
a restart and a reconnect). About 75 s. Then regenerate the expected screens:

    .venv/bin/python -m tests.tui.record_fixture
    SUPERINFER_UPDATE_SNAPSHOTS=1 .venv/bin/pytest -q tests/tui/test_snapshots.py
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.daemon.conftest import REPO, SUPERINFERD, base_env, start_daemon

FIXTURE = Path(__file__).parent / "fixtures" / "demo.jsonl.gz"


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tui-fixture-"))
    d = start_daemon(tmp, "--profile", "demo", profile_text=None)
    rec = tmp / "demo.jsonl"
    top = subprocess.Popen([*SUPERINFERD, "top", "--json", "--interval", "1", "--state-dir", str(d.state_dir),
                            "--record", str(rec)], stdout=subprocess.DEVNULL, env=base_env(tmp), cwd=REPO)
    try:
        time.sleep(40)
        r = httpx.put(d.url + "/v1/params", json={"alpha": 4.0}, headers=d.headers(), timeout=10)
        r.raise_for_status()
        time.sleep(10)
        d.terminate()
        time.sleep(4)
        d = start_daemon(tmp, "--profile", "demo", profile_text=None, state_dir=d.state_dir)
        time.sleep(10)
    finally:
        top.terminate()
        top.wait(10)
        d.terminate()
    with open(rec, "rb") as src, gzip.open(FIXTURE, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    print(f"{FIXTURE}: {sum(1 for _ in open(rec))} polls, {FIXTURE.stat().st_size} bytes", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
