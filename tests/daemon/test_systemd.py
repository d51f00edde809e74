"""The systemd unit passes `systemd-analyze verify` with no warning; sd_notify speaks the protocol."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from superinfer.daemon.notify import Notifier, watchdog_interval_s

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "superinferd@.service"
INSTALLED_BIN = "/usr/local/bin/superinferd"


def _unit_for(tmp_path: Path, text: str) -> Path:
    # verify needs ExecStart's binary to exist: point it at this venv's superinferd
    exe = Path(sys.executable).with_name("superinferd")
    assert exe.exists(), exe
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / UNIT.name).write_text(text.replace(INSTALLED_BIN, str(exe)))
    return unit_dir / "superinferd@chat.service"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze not installed (Debian: apt-get install -y systemd)")
def test_unit_verifies_without_warnings(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert INSTALLED_BIN in text
    r = subprocess.run(["systemd-analyze", "verify", str(_unit_for(tmp_path, text))], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    """The check above means something: a typo in a key is reported."""
    text = UNIT.read_text().replace("RestartSec=5s", "RestartSec=5s\nRestartSecs=5s")
    r = subprocess.run(["systemd-analyze", "verify", str(_unit_for(tmp_path, text))], capture_output=True,
                       text=True, timeout=60)
    assert "RestartSecs" in r.stdout + r.stderr


def test_unit_contract() -> None:
    text = UNIT.read_text()
    lines = {line.strip() for line in text.splitlines()}
    for needed in ("Type=notify", "Restart=on-failure", "StateDirectory=superinfer",
                   "EnvironmentFile=-/etc/superinfer/superinferd.env", "ProtectSystem=strict", "ProtectHome=yes",
                   "PrivateTmp=yes", "NoNewPrivileges=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                   "DeviceAllow=/dev/nvidiactl rw", "DeviceAllow=/dev/nvidia-uvm rw", "KillMode=mixed"):
        assert needed in lines, needed
    assert not any(line.startswith("MemoryDenyWriteExecute") for line in lines)
    assert any(line.startswith("WatchdogSec=") for line in lines)
    assert "ExecStart=/usr/local/bin/superinferd start --profile %i" in lines
    timeout = next(line for line in lines if line.startswith("TimeoutStartSec="))
    assert timeout.endswith("min")


def test_notifier_path_and_abstract_sockets(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    for address, bind in ((str(path), str(path)), ("@superinfer-unit-test-%d" % id(path), None)):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(bind if bind else "\0" + address[1:])
        sock.settimeout(2)
        n = Notifier(address)
        assert n.ready("serving") and n.watchdog() and n.status("x=1") and n.stopping("bye")
        got = [sock.recv(1024).decode() for _ in range(4)]
        assert got[0].startswith("READY=1\nSTATUS=serving\nMAINPID=")
        assert got[1:] == ["WATCHDOG=1", "STATUS=x=1", "STOPPING=1\nSTATUS=bye"]
        n.close()
        sock.close()


def test_notifier_is_a_noop_without_socket(tmp_path: Path) -> None:
    n = Notifier("")
    assert not n.enabled and not n.ready("x") and not n.watchdog()
    # a vanished socket is logged, never raised
    gone = Notifier(str(tmp_path / "missing.sock"))
    assert gone.enabled and not gone.watchdog()


def test_watchdog_interval() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "60000000"}) == 30.0
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}) is None
