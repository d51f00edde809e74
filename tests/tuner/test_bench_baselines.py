"""``bench tuner``'s baselines (issue 30 item 2): ``static_best`` is the best single setting found with
hindsight by a study that has converged, judged on exactly the traffic and seeds the strategies are judged
on; the ``oracle`` takes each phase's best from the same study; a stored study resumes without re-running.
A short two-phase scenario on the twin."""

from __future__ import annotations

from pathlib import Path

import pytest

from superinfer.bench.tuner.main import BenchSpec, run_bench
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.offline.scenario import CHAT_ONLY, Phase, Scenario, Segment

pytestmark = pytest.mark.timeout(600)

#: a TTFT-bound chat phase at capacity and a voice-led one where the 50 ms TBT SLO binds
SCN = Scenario("short", (Phase("chat", (Segment("chat", 7.0, 45.0, mix=CHAT_ONLY),)),
                         Phase("voice", (Segment("chat", 5.0, 45.0, mix=(("chat", 2.0), ("voice", 6.0))),))))
WARM = Scenario("short-alt", (Phase("chat", (Segment("chat", 6.0, 30.0),)),))
KNOBS = ("delta_f", "step_slo_share")


def bench(storage: str, trials: int = 40) -> dict:
    spec = BenchSpec(scenario=SCN, study_scenario=WARM, control=None, seeds=2, static_trials=trials, warm_trials=2,
                     study_seeds=1, eval_s=30.0, jobs=1, converge_window=6, converge_tol=0.005, study_storage=storage,
                     tuner=TunerConfig(mode="auto", knobs=KNOBS))
    return run_bench(spec)


def pooled(runs: list[dict], strategy: str) -> float:
    """The share of every seed's requests (pooled) meeting both SLOs: what the study's value measures."""
    rs = [r for r in runs if r["strategy"] == strategy]
    return sum(r["weighted_slo_attainment"] * r["arrived"] for r in rs) / sum(r["arrived"] for r in rs)


def test_static_best_is_a_converged_hindsight_optimum_on_the_judged_traffic(tmp_path: Path) -> None:
    storage = str(tmp_path / "studies.journal")
    res = bench(storage)
    conv = res["studies"]["static"]["convergence"]
    curve = [v for v in conv["curve"] if v is not None]
    assert conv["converged"] and conv["trials"] <= 40, conv
    assert conv["moved_last_window"] < 0.005 and curve == sorted(curve)
    assert len(conv["curve_unguarded"]) == conv["trials"] and conv["curve_unguarded"][-1] >= conv["best_feasible"]
    # the study's value of the chosen setting is what the static_best runs score: same traffic, same seeds
    assert pooled(res["runs"], "static_best") == pytest.approx(conv["best_feasible"], abs=1e-6)
    # hindsight over the start (trial 0 of the study, = paper here): never worse on the judged traffic
    assert pooled(res["runs"], "static_best") >= pooled(res["runs"], "paper") - 1e-9
    assert res["studies"]["static"]["whole_start"]["score"] == pytest.approx(pooled(res["runs"], "paper"), abs=1e-6)
    # the oracle's arm in each phase is at least what static_best scored there in the study
    arms, best = res["settings"]["study_arms"], conv["best_feasible"]
    static_trial = next(t for t in res["studies"]["static"]["trials"]
                        if t["value"] is not None and abs(t["value"] - best) < 1e-6 and t["constraint"] <= 0)
    for phase, arm in arms["phases"].items():
        assert arm["score"] >= static_trial["phases"][phase] - 1e-6  # arms keep 6 digits
        assert len(conv["phases"][phase]["curve"]) == conv["trials"]

    again = bench(storage)  # resumes the stored, converged study: no new trial, the same baselines
    assert again["studies"]["static"]["convergence"]["trials"] == conv["trials"]
    assert again["settings"]["static_best"] == res["settings"]["static_best"]
    assert again["settings"]["oracle"] == res["settings"]["oracle"]
