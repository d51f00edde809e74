"""The online tuner inside a sim daemon (subprocess, loopback, real time, short windows): it makes real
decisions, rolls back an injected bad setting within one window, freezes when an operator writes the
params, logs every decision, exposes its metrics, and comes back after a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from superinfer.core import PARAM_DEFAULTS
from superinfer.sim.workload import load_workload
from superinfer.tuner.arms import Arm, Arms, save_arms
from superinfer.tuner.offline.evaluate import workload_features
from superinfer.tuner.space import DEFAULT_KNOBS
from tests.daemon.conftest import start_daemon
from tests.daemon.profiles import profile_toml

pytestmark = pytest.mark.timeout(240)

def profile(arms: Path | None = None) -> str:
    """A twin that keeps up (64 sequences) with a 10 req/s chat replay, and a tuner with 12 s windows: a
    switchback of 8 slots of 3.5 s (3 s counted, about 30 requests a slot; the slot-level guard needs two
    slots a side that agree, which the 1-s slots of 4-s windows, 10 requests each, never gave). One tenant,
    the default (TTFT SLO 2 s). ``arms``: the tuner's arms file, if any."""
    return profile_toml(
        engine={"max_num_seqs": 64, "drain_timeout_s": 10.0},
        slo={"ttft_s": 2.0, "unknown_tenant": None, "default_tenant": None},
        sim={"rps": 10.0, "workload": "chat"},
        tuner={"mode": "auto", "window_s": 12.0, "warmup_s": 1.0, "min_requests": 20, "cooldown_s": 1.0,
               "arms_file": arms},
        tenants=None)


CONTRACT = {"mode", "state", "frozen", "frozen_reason", "incumbent", "candidate", "phase", "last_decisions",
            "rollbacks_last_hour"}


def _arms(tmp: Path, **params: float) -> Path:
    """An arms file whose one phase is the replay's traffic (so the tuner names it and jumps to it)."""
    feats = workload_features(load_workload("chat", rps=10.0, duration_s=300, seed=1, tenants={"default": 1.0}))
    path = tmp / "arms.json"
    save_arms(Arms(None, {"chat": Arm("chat", {k: float(v) for k, v in params.items()}, 0.95, feats)}), path)
    return path


def test_a_jump_the_live_traffic_contradicts_is_tried_back(tmp_path: Path) -> None:
    # The "study" claims step_slo_share 0.01 gains 0.35 over the start in this traffic (it starves prefill):
    # the tuner jumps without a trial, its first window falls below the study's 0.60 for the start, and a
    # revert:chat trial puts the start back
    feats = workload_features(load_workload("chat", rps=10.0, duration_s=300, seed=1, tenants={"default": 1.0}))
    path = tmp_path / "arms.json"
    start = {k: float(PARAM_DEFAULTS[k]) for k in DEFAULT_KNOBS if k != "b_xfer"}  # b_xfer: the host's
    save_arms(Arms(None, {"chat": Arm("chat", {"step_slo_share": 0.01}, 0.95, feats, {"start": 0.60})},
                   start=Arm("start", start)), path)
    d = start_daemon(tmp_path, profile_text=profile(arms=path))
    try:
        t = _wait(d, lambda t: any(x["action"] in ("accept", "reject", "rollback") for x in t["last_decisions"]),
                  timeout=90.0)
        acts = [x["action"] for x in t["last_decisions"]]
        assert "jump" in acts and t["jumps"] == 1, acts
        jump = next(x for x in t["last_decisions"] if x["action"] == "jump")
        assert jump["params"]["step_slo_share"] == 0.01 and "gain +0.3500" in jump["reason"]  # the arm's value
        trial = next(x for x in t["last_decisions"] if x["action"] == "trial")
        assert trial["reason"].startswith("revert:chat") and trial["params"]["step_slo_share"] == 0.8
        verdict = next(x for x in t["last_decisions"] if x["action"] in ("accept", "reject", "rollback"))
        assert verdict["action"] == "accept", verdict
        assert t["incumbent"]["step_slo_share"] == 0.8 and d.get("/v1/params").json()["step_slo_share"] == 0.8
        assert "jump" in [x["action"] for x in _log(d)]
        assert 'superinfer_tuner_decisions_total{action="jump"} 1.0' in d.get("/metrics").text
    finally:
        assert d.terminate() == 0, d.output()[-3000:]


def _wait(d, pred, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    t = {}
    while time.monotonic() < deadline:
        t = d.get("/v1/tuner").json()
        if pred(t):
            return t
        time.sleep(0.5)
    raise AssertionError(f"tuner never got there; last status: {json.dumps(t)[:3000]}\n{d.output()[-3000:]}")


def _log(d) -> list[dict]:
    path = d.state_dir / "tuner-decisions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_rollback_of_an_injected_bad_setting_then_restart(tmp_path: Path) -> None:
    # The "study" says this traffic wants step_slo_share 0.01: iterations sized to at most 4 ms (0.01 x 4 x the
    # 100 ms TBT SLO, however much slack the decodes banked) starve prefill.
    arms = _arms(tmp_path, step_slo_share=0.01)
    d = start_daemon(tmp_path, profile_text=profile(arms=arms))
    try:
        t = _wait(d, lambda t: any(x["action"] == "rollback" for x in t["last_decisions"]))
        assert CONTRACT <= set(t)
        trial = next(x for x in t["last_decisions"] if x["action"] == "trial")
        rollback = next(x for x in t["last_decisions"] if x["action"] == "rollback")
        assert "jump to the study's arm for phase chat" in trial["reason"]
        assert rollback["reason"].startswith("arm:chat: guard:")
        # within the trial: a switchback of 8 slots of 3.5 s (warm-up 0.5 s per switch) + S_F 2 s (a request
        # with no first token is a miss once S_F has passed), plus two 2 s ticks of slack on a busy machine
        assert "switchback" in trial["reason"]
        assert rollback["at"] - trial["at"] <= 8 * 3.5 + 2.0 + 4.0
        assert t["incumbent"]["step_slo_share"] == 0.8 and t["rollbacks_last_hour"] == 1
        p = d.get("/v1/params").json()
        assert p["step_slo_share"] == 0.8 and p["source"] == "tuner" and p["version"] >= 3  # out and back
        # the transfer budget is tuned too, bounded by the twin's (lvf has a host tier), and was never moved
        assert t["incumbent"]["b_xfer"] == p["b_xfer"] > 0
        log = _log(d)
        assert [x["action"] for x in log if x["action"] in ("trial", "rollback")][:2] == ["trial", "rollback"]
        assert all(isinstance(x["at"], float) and x["at"] > 1e9 for x in log)  # Unix seconds
        state = d.state()
        assert CONTRACT <= set(state["tuner"]) and state["tuner"]["mode"] == "auto"
        metrics = d.get("/metrics").text
        assert 'superinfer_tuner_rollbacks_total{reason="guard"} 1.0' in metrics
        assert 'superinfer_tuner_mode{mode="auto"} 1.0' in metrics
        assert 'superinfer_tuner_incumbent{param="step_slo_share"} 0.8' in metrics
        assert 'superinfer_tuner_param_changes_total{source="tuner"}' in metrics
    finally:
        assert d.terminate() == 0, d.output()[-3000:]
    saved = json.loads((d.state_dir / "state.json").read_text())
    assert saved["params"]["step_slo_share"] == 0.8  # no trial outlives the daemon
    again = start_daemon(tmp_path, profile_text=profile(arms=arms), state_dir=d.state_dir)
    try:
        t = again.get("/v1/tuner").json()
        assert t["rollbacks_last_hour"] >= 1  # remembered across the restart
        assert any(x["action"] == "rollback" for x in t["last_decisions"])
        assert "tuner state restored" in again.output()
    finally:
        assert again.terminate() == 0


def test_decides_then_freezes_on_an_operator_write(tmp_path: Path) -> None:
    d = start_daemon(tmp_path, profile_text=profile())
    try:
        t = _wait(d, lambda t: any(x["action"] in ("trial", "hold") for x in t["last_decisions"]))
        decided = [x["action"] for x in t["last_decisions"]]
        assert "trial" in decided or "hold" in decided
        # the API: token, shape, values
        assert d.put("/v1/tuner", json={"mode": "shadow"}).status_code == 401
        assert d.put("/v1/tuner", content=b"{nope", headers=d.headers()).status_code == 400
        bad = d.put("/v1/tuner", json={"mode": "turbo"}, headers=d.headers())
        assert bad.status_code == 422 and bad.json()["error"]["param"] == "mode"
        assert d.put("/v1/tuner", json={"speed": 1}, headers=d.headers()).status_code == 422
        # an operator's write freezes an auto tuner, and nothing is written by the tuner while frozen
        r = d.put("/v1/params", json={"alpha": 4.0}, headers=d.headers())
        assert r.status_code == 200
        version = r.json()["version"]
        t = d.get("/v1/tuner").json()
        assert t["frozen"] is True and t["frozen_reason"].startswith("operator: params written by api:")
        assert t["incumbent"]["alpha"] == 4.0 and t["candidate"] is None
        time.sleep(6.0)
        p = d.get("/v1/params").json()
        assert (p["version"], p["source"], p["alpha"]) == (version, r.json()["source"], 4.0)
        assert d.get("/v1/tuner").json()["state"] == "frozen"
        assert 'superinfer_tuner_frozen_reason{reason="operator"} 1.0' in d.get("/metrics").text
        # unfreeze, and a mode change, through PUT /v1/tuner
        t = d.put("/v1/tuner", json={"freeze": False, "mode": "advise"}, headers=d.headers()).json()
        assert t["frozen"] is False and t["mode"] == "advise"
        assert [x["action"] for x in t["last_decisions"]][-2:] == ["mode", "unfreeze"]
    finally:
        assert d.terminate() == 0, d.output()[-3000:]
