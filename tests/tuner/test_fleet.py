"""The fleet link (``superinfer.tuner.fleet``) on SQLite: publish and import, passwords never shown, and
a storage that fails leaves the tuner tuning locally, says so once, and retries with backoff."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from superinfer.tuner.fleet import Fleet, check_storage, phase_key, redact
from tests.tuner.world import START, World, make, share_world

SETTING = {**START, "step_slo_share": 2.0}


def _fleet(tmp: Path, host: str, **kw) -> Fleet:
    return Fleet(f"sqlite:///{tmp / 'fleet.db'}", "m", host, refresh_s=0.0, **kw)


def test_an_accepted_setting_of_one_host_is_the_best_another_imports(tmp_path: Path) -> None:
    a, b = _fleet(tmp_path, "a"), _fleet(tmp_path, "b")
    a.publish("chat", SETTING, "accept", 0.9, 0.7, 0.2, "local")
    a.publish("chat", {**SETTING, "step_slo_share": 3.0}, "reject", 0.95, 0.96, -0.01, "local")  # not accepted
    a.publish("chat", {**SETTING, "step_slo_share": 0.1}, "rollback", None, None, -0.3, "local")  # a failed trial
    a.publish("voice", {**SETTING, "alpha": 2.0}, "accept", 0.8, 0.6, 0.2, "local")
    assert a.best("chat") is None and a.status()["pending"] == 4  # nothing before a sync: memory only
    assert a.sync(0.0) and a.status()["published"] == 4 and a.status()["pending"] == 0
    assert b.sync(0.0) and b.status()["connected"] is True
    best = b.best("chat")
    assert best is not None and best.params["step_slo_share"] == 2.0 and best.value == 0.9 and best.host == "a"
    assert best.trials == 3 - 1  # COMPLETE trials of the phase (the rollback is a failed trial)
    assert b.best("voice").params["alpha"] == 2.0 and b.status()["imported"] == 3
    assert a.sync(1.0) and a.best("chat") is None  # a host's own trials are never offered back to it
    import optuna

    study = optuna.load_study(study_name="superinfer-fleet/m/chat", storage=f"sqlite:///{tmp_path / 'fleet.db'}")
    assert sorted(t.user_attrs["verdict"] for t in study.trials) == ["accept", "reject", "rollback"]
    assert {t.user_attrs["host"] for t in study.trials} == {"a"}
    assert study.trials[0].params["hopeless_last"] == 1 and isinstance(study.trials[0].params["hopeless_last"], int)


def test_passwords_are_redacted_and_unknown_schemes_refused() -> None:
    url = "postgresql://fleet:s3cret-pw@db.example:5432/superinfer"
    assert redact(url) == "postgresql://fleet:***@db.example:5432/superinfer"
    assert "s3cret" not in redact("host=x password=s3cret user=y")
    assert redact("postgresql://fleet@db/superinfer") == "postgresql://fleet@db/superinfer"
    for ok in ("", "memory", "sqlite:///x.db", url, "journal:/tmp/j"):
        assert check_storage(ok) == ok
    for bad in ("mysql://u:s3cret@h/db", "ftp://x", "x.db", "journal:"):
        with pytest.raises(ValueError, match="unknown storage") as e:
            check_storage(bad)
        assert "s3cret" not in str(e.value)
    assert phase_key(None) == "unnamed" and phase_key("chat") == "chat"


class Flaky:
    """An opener that fails while ``down`` (as a database that is unreachable does), with a password in
    its error message."""

    def __init__(self, real: str) -> None:
        self.real, self.down, self.calls = real, True, 0

    def __call__(self, spec: str):
        self.calls += 1
        if self.down:
            raise ConnectionError("connection to postgresql://fleet:s3cret-pw@10.0.0.1/db refused")
        from superinfer.tuner.fleet import open_storage

        return open_storage(self.real)


def test_an_unreachable_storage_never_stops_local_tuning_and_is_retried_with_backoff(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    opener = Flaky(f"sqlite:///{tmp_path / 'fleet.db'}")
    fleet = Fleet("postgresql://fleet:s3cret-pw@10.0.0.1/db", "m", "a", retry_s=5.0, max_retry_s=20.0,
                  refresh_s=0.0, opener=opener)
    world = World(share_world(best=2.0), rate=80.0)
    ctl = make(world, explore_threshold=0.05, explore_budget=1.0, knobs=("step_slo_share", "alpha"))
    ctl.chooser.fleet = fleet  # as Controller(fleet=...) wires it
    tries: list[float] = []
    with caplog.at_level(logging.DEBUG, logger="superinfer.tuner.fleet"):
        for t in range(0, 600, 10):
            world.run(ctl, float(t), t + 10.0)
            if fleet.sync(t + 10.0) is False and opener.calls > len(tries):
                tries.append(t + 10.0)
    ended = sum(ctl.counts["trials"].values())
    assert ended >= 3, list(ctl.decisions)[-5:]  # it kept tuning locally
    st = fleet.status()
    assert st["connected"] is False and "refused" in st["last_error"] and st["pending"] == ended - \
        ctl.counts["trials"].get("abort", 0)  # every verdict kept for later
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    assert gaps[:3] == [10.0, 10.0, 20.0] and max(gaps) <= 30.0, tries  # 5, 10, 20, 20 s (on 10-s syncs)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "fleet storage unreachable" in warned[0].getMessage()
    assert "tuning locally, retrying in 5 s" in warned[0].getMessage()
    assert all("s3cret" not in r.getMessage() for r in caplog.records) and "s3cret" not in str(st)
    opener.down = False
    fleet._next_try = 0.0  # the next retry, without waiting for the backoff
    assert fleet.sync(700.0) and fleet.status()["connected"] is True and fleet.status()["pending"] == 0
    assert fleet.status()["published"] == st["pending"] and fleet.status()["last_error"] is None
