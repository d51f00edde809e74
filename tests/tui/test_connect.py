"""Where the dashboard connects and with which token: flags > environment > state directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superinfer.tui.client import DaemonClient
from superinfer.tui.connect import NotRunning, resolve_target


def state_dir(tmp: Path, url: str | None = "http://127.0.0.1:9999", token: str | None = "t" * 43) -> Path:
    d = tmp / "state"
    d.mkdir(exist_ok=True)
    if url is not None:
        (d / "runtime.json").write_text(json.dumps({"url": url, "pid": 1}))
    if token is not None:
        (d / "api-token").write_text(token + "\n")
    return d


def test_state_dir_gives_url_and_token_and_is_reread(tmp_path: Path) -> None:
    d = state_dir(tmp_path)
    t = resolve_target(state_dir=d, env={})
    assert t.resolve_url() == "http://127.0.0.1:9999" and t.token == "t" * 43 and not t.read_only
    (d / "runtime.json").write_text(json.dumps({"url": "http://127.0.0.1:1234/"}))  # restarted on another port
    assert t.resolve_url() == "http://127.0.0.1:1234"
    (d / "runtime.json").unlink()
    with pytest.raises(NotRunning, match="no runtime.json in state dir") as info:
        t.resolve_url()
    assert info.value.reason == "daemon not running (no runtime.json)"
    assert "t" * 43 not in repr(t)  # the token never shows in a repr


def test_precedence_flag_env_state_dir(tmp_path: Path) -> None:
    d = state_dir(tmp_path)
    tf = tmp_path / "tok"
    tf.write_text("from-the-flag-xxxxxxxx\n")
    env = {"SUPERINFER_URL": "http://10.0.0.1:8780", "SUPERINFER_API_TOKEN": "from-env-yyyyyyyyyy",
           "SUPERINFER_STATE_DIR": str(d)}
    t = resolve_target(url="http://h:1/", token_file=tf, env=env)
    assert (t.resolve_url(), t.token, t.url_source) == ("http://h:1", "from-the-flag-xxxxxxxx", "--url")
    t = resolve_target(env=env)
    assert (t.resolve_url(), t.token) == ("http://10.0.0.1:8780", "from-env-yyyyyyyyyy")
    t = resolve_target(env={"SUPERINFER_STATE_DIR": str(d)})
    assert (t.resolve_url(), t.token) == ("http://127.0.0.1:9999", "t" * 43)


def test_without_a_readable_token_it_is_read_only_and_says_why(tmp_path: Path) -> None:
    d = state_dir(tmp_path, token=None)
    t = resolve_target(state_dir=d, env={})
    assert t.read_only and "api-token does not exist" in t.read_only_reason
    (d / "api-token").write_text("z" * 40)  # the daemon's first start creates it
    t.resolve_url()
    assert not t.read_only and t.token == "z" * 40
    t = resolve_target(state_dir=d, token_file=tmp_path / "missing", env={})
    assert t.read_only and "missing does not exist" in t.read_only_reason
    t = resolve_target(state_dir=d, read_only=True, env={})
    t.resolve_url()
    assert t.read_only_reason == "--read-only"
    t = resolve_target(url="http://h:1", env={"XDG_STATE_HOME": str(tmp_path / "none")})
    assert t.read_only and "pass --token-file" in t.read_only_reason


def test_client_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="http"):
        DaemonClient("ftp://x")
    with pytest.raises(ValueError, match="timeout_s"):
        DaemonClient("http://x", timeout_s=0)


def test_url_of_the_local_default_daemon_takes_its_token(tmp_path: Path) -> None:
    home = tmp_path / "xdg" / "superinfer"
    home.mkdir(parents=True)
    (home / "runtime.json").write_text(json.dumps({"url": "http://127.0.0.1:8780"}))
    (home / "api-token").write_text("k" * 40)
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    assert resolve_target(url="http://127.0.0.1:8780/", env=env).token == "k" * 40
    other = resolve_target(url="http://127.0.0.1:9000", env=env)  # another daemon: not its token
    assert other.token is None and other.read_only
    assert resolve_target(env=env).resolve_url() == "http://127.0.0.1:8780"  # no flag at all: the default
