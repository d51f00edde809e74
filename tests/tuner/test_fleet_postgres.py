"""A fleet learns together, on a real PostgreSQL server on loopback (the fixture of
``test_postgres_study.py``).

* The claim, in virtual time (the clock-agnostic controller in the synthetic world of ``world.py``, the
  same :class:`~superinfer.tuner.fleet.Fleet` the daemon runs): host 1 tunes alone from a poor setting;
  then hosts 2 and 3 start from it too, sharing the storage, and must come within 2 pp of host 1's best
  in at most half the trials host 1 needed; lone hosts (no storage, the same worlds as hosts 2 and 3)
  are the comparison.
* The wiring, in three sim daemons (subprocesses, real time): host 1's accepted trial lands in the
  shared study, hosts 2 and 3 import it and adopt it in one trial, ``GET /v1/tuner`` and ``/metrics``
  say so; a daemon whose storage is unreachable serves and tunes, says so, and never shows the password.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from superinfer.tuner.fleet import Fleet
from tests.daemon.conftest import start_daemon
from tests.daemon.profiles import profile_toml
from tests.tuner.test_postgres_study import postgres  # noqa: F401 - the module's PostgreSQL server
from tests.tuner.world import START, World, make

pytestmark = pytest.mark.timeout(600)
POOR = {**START, "step_slo_share": 0.3}
KNOBS = ("step_slo_share", "alpha")


def steep(params: dict, phase: str) -> float:
    """Attainment 0.95 at ``step_slo_share`` 2.0, 0.4 lower per unit away (0.27 at the poor start)."""
    return max(0.02, 0.95 - 0.4 * abs(params["step_slo_share"] - 2.0))


def _host(storage: str | None, host: str, seed: int, model: str) -> tuple[World, object, Fleet | None]:
    world = World(steep, rate=80.0, seed=seed, params=dict(POOR))
    ctl = make(world, explore_threshold=0.05, explore_budget=1.0, knobs=KNOBS, seed=seed)
    fleet = None if storage is None else Fleet(storage, model, host, refresh_s=20.0)
    ctl.chooser.fleet = fleet
    return world, ctl, fleet


def _tune(hosts: list[tuple[World, object, Fleet | None]], until: float) -> list[list[tuple[int, float]]]:
    """Run the hosts side by side in 10-s chunks of virtual time, each syncing its fleet link after each
    chunk; per host, after each chunk: (trials ended, the incumbent's true attainment)."""
    p = steep
    curves: list[list[tuple[int, float]]] = [[] for _ in hosts]
    t = 0.0
    while t < until:
        for (world, ctl, fleet), curve in zip(hosts, curves):
            world.run(ctl, t, t + 10.0)
            if fleet is not None:
                fleet.sync(t + 10.0)
            curve.append((sum(ctl.counts["trials"].values()), p(ctl.incumbent, "a")))
        t += 10.0
    return curves


def _trials_to(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((n for n, p in curve if p >= target - 0.02), None)


def test_hosts_that_share_a_study_reach_the_first_hosts_best_in_half_its_trials(postgres: str) -> None:  # noqa: F811
    # host 1's seed 4: of seeds 1-6 alone for 1200 s, host 1 came within 2 pp of its best after 11-19
    # trials (seed 2 stalled at 0.49); seed 4 needed the fewest, so it is the hardest bar for the others
    h1 = _host(postgres, "host-1", 4, "world")
    (c1,) = _tune([h1], 1200.0)
    best1 = max(p for _, p in c1)
    n1 = _trials_to(c1, best1)
    assert best1 >= 0.9, c1[-5:]  # host 1 climbed from 0.27 (the poor setting) on its own
    fleet_hosts = [_host(postgres, f"host-{i}", 11 + i, "world") for i in (2, 3)]
    lone_hosts = [_host(None, f"lone-{i}", 11 + i, "world") for i in (2, 3)]
    c2, c3, l2, l3 = _tune(fleet_hosts + lone_hosts, 900.0)
    n2, n3 = _trials_to(c2, best1), _trials_to(c3, best1)
    lone = [_trials_to(c, best1) for c in (l2, l3)]
    report = {"host1_best": round(best1, 4), "host1_trials": n1, "host2_trials": n2, "host3_trials": n3,
              "lone_trials": lone, "host1_total_trials": c1[-1][0]}
    print("fleet:", json.dumps(report))
    assert n1 is not None and n1 >= 2, report
    assert n2 is not None and n3 is not None and max(n2, n3) <= n1 / 2, report
    assert all(n is None or n > max(n2, n3) for n in lone), report  # alone, the same worlds take longer
    assert fleet_hosts[0][2].status()["imported"] >= 1 and fleet_hosts[0][2].status()["connected"] is True


def _profile(storage: str) -> str:
    """The sim daemon of ``test_jump.py`` (a twin that keeps up with a 10 req/s chat replay, 12-s windows)
    with ``storage`` as the fleet's."""
    return profile_toml(engine={"max_num_seqs": 64, "drain_timeout_s": 10.0},
                        slo={"ttft_s": 2.0, "unknown_tenant": None, "default_tenant": None},
                        sim={"rps": 10.0, "workload": "chat"},
                        tuner={"mode": "auto", "window_s": 12.0, "warmup_s": 1.0, "min_requests": 20,
                               "cooldown_s": 1.0, "storage": storage}, tenants=None)


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(1.0)
    raise AssertionError(f"not within {timeout} s: {what}")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_three_daemons_share_the_study_and_a_dead_database_stops_nothing(postgres: str, tmp_path: Path) -> None:  # noqa: F811
    dead = f"postgresql://fleet:s3cret-pw@127.0.0.1:{_closed_port()}/optuna"
    ds = []
    try:
        for i, storage in enumerate([postgres] * 3 + [dead]):
            (tmp_path / f"h{i}").mkdir()
            ds.append(start_daemon(tmp_path / f"h{i}", profile_text=_profile(storage)))
        fleet = lambda d: d.get("/v1/tuner").json()["fleet"]  # noqa: E731
        _wait(lambda: all(fleet(d)["published"] >= 1 for d in ds[:3]), 240.0, "every host published a trial")
        _wait(lambda: all(fleet(d)["imported"] >= 2 for d in ds[:3]), 30.0, "every host read the others' trials")
        hosts = {fleet(d)["host"] for d in ds[:3]}
        assert len(hosts) == 3 and all(fleet(d)["connected"] is True for d in ds[:3])
        import optuna

        from superinfer.tuner.offline.study import open_storage

        names = [s.study_name for s in optuna.get_all_study_summaries(open_storage(postgres))]
        study = next(n for n in names if n.startswith("superinfer-fleet/") and n.endswith("/unnamed")
                     and n != "superinfer-fleet/world/unnamed")  # not the virtual-time test's study
        rows = optuna.load_study(study_name=study, storage=open_storage(postgres)).trials
        assert {t.user_attrs["host"] for t in rows} == hosts  # one study, every host's live trials
        assert all(t.user_attrs["verdict"] in ("accept", "reject", "rollback") for t in rows)
        assert 'superinfer_tuner_fleet_connected 1.0' in ds[0].get("/metrics").text
        assert 'superinfer_tuner_fleet_trials_total{direction="published"}' in ds[0].get("/metrics").text
        # the host whose database is unreachable: it serves, it tunes locally, it says so, it hides the password
        d = ds[3]
        _wait(lambda: fleet(d)["pending"] >= 1, 120.0, "the host without its database ended a trial")
        r = httpx.post(d.url + "/v1/completions", json={"prompt": "x" * 40, "max_tokens": 4}, timeout=30.0)
        assert r.status_code == 200, r.text
        t = d.get("/v1/tuner").json()
        assert t["fleet"]["connected"] is False and t["fleet"]["last_error"], t["fleet"]
        assert t["fleet"]["storage"] == dead.replace("s3cret-pw", "***") and t["fleet"]["pending"] >= 1
        assert any(x["action"] in ("accept", "reject", "rollback") for x in t["last_decisions"])  # tuned locally
        assert 'superinfer_tuner_fleet_connected 0.0' in d.get("/metrics").text
        shown = d.output() + json.dumps(t) + d.get("/v1/config").text + d.get("/v1/state").text + d.get("/metrics").text
        assert "s3cret" not in shown
        assert d.output().count("fleet storage unreachable") == 1, d.output()[-3000:]
    finally:
        for d in ds:
            assert d.terminate() == 0, d.output()[-3000:]
