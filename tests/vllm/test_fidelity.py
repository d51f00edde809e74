"""``superinferd bench fidelity`` on the real CPU engine (tiny Llama built at test time): one short run of
stock vLLM and its twin on the same requests must agree within a stated bound, and the JSON must carry what
docs/fidelity.md promises. The bound is loose on purpose (a shared 2-core CI host runs this): it catches a
twin that is wired wrong (blocks, SLOs, requests, host terms), not the last few percent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from superinfer.bench.fidelity.twin import LEFT_OUT, TERMS, errors

pytest.importorskip("vllm")

pytestmark = pytest.mark.timeout(900)

#: the twin's mean percent error of TTFT/TBT P50/P90 (mape_pct) on this short run (about a dozen requests), and
#: its attainment errors. The TTFT SLO is 50 ms, well above this engine's TTFT at 3 req/s (about 5-15 ms), so
#: that attainment measures queueing (a twin with the wrong blocks or requests queues differently), not
#: which side of a tight SLO a few requests of a dozen happen to fall on (a 12.5 ms SLO failed at 25 pp once). The TBT
#: SLO is 20 ms for the same reason: this host's step time moved 2.8x between 2026-12-01 and 12-03, and a 6.8 ms TBT
#: SLO then sat on the engine's own TBT (the twin's TBT attainment 40 pp off with its TBT P50/P90 12 / 2 % off).
#: Measured 2026-12-01: 8-23 % for stock vLLM over 3 seeds of 10 s (docs/fidelity.md), 72 % once with the 2-core
#: host at load average 20; a twin wired wrong (blocks, SLOs, requests) is off by far more, in the hundreds of percent.
MAX_MAPE_PCT = 60.0
#: ... or this many times the engine's own error against itself on the same requests (``--repeat 2``'s noise
#: floor), where that is larger: at TTFTs of a few milliseconds the twin was 85 and 117 % off in two CI runs, and
#: 40 % on a quiet host on 2026-12-06, where the engine was 26 % off itself (stock vLLM; lvf 48 and 40 %)
NOISE_FLOOR_X = 2.0
MAX_ATTAINMENT_PP = 25.0


def _bench(out: Path, tiny_model: Path) -> dict:
    plots = out.parent / "plots"
    cmd = [sys.executable, "-m", "superinfer.cli", "bench", "fidelity", "--model", str(tiny_model),
           "--workload", "sharegpt", "--rates", "3", "--duration", "4", "--drain", "10", "--seeds", "1",
           "--policies", "vllm,lvf", "--num-blocks", "32", "--block-size", "32", "--max-model-len", "512",
           "--threads", "1", "--ttft-slo", "0.05", "--tbt-slo", "0.02", "--repeat", "2", "--json", str(out),
           "--plot-dir", str(plots)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    data["_plots"] = sorted(p.name for p in plots.glob("*.png"))
    data["_stdout"] = proc.stdout
    data["_path"] = out
    return data


def _stock_run(fidelity: dict) -> tuple[dict, float]:
    """Stock vLLM's run and its noise floor (the engine's error against itself)."""
    (run,) = [r for r in fidelity["runs"] if r["policy"] == "vllm"]
    (point,) = [p for p in fidelity["summary"]["points"] if p["policy"] == "vllm"]
    return run, point["noise_floor"]["mape_pct"]


def _why(fidelity: dict, run: dict, floor: float) -> str:
    """What a failure needs to be told apart (a twin wired wrong, or a host term measured in a stall): both
    sides' percentiles, the repeat, and stock vLLM's measured host terms."""
    keys = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tbt_p50_s", "tbt_p90_s")
    sides = {s: {k: round(run[s][k] * 1e3, 2) for k in keys} for s in ("real", "twin")}
    sides["repeat"] = {k: round(run["real_repeats"][0][k] * 1e3, 2) for k in keys}
    host = {k: v for k, v in fidelity["host_terms"]["vllm"].items() if not isinstance(v, dict)}
    return f"error {run['error']}, noise floor {floor:.1f} %, ms {sides}, host terms {host}, " \
           f"calibration {fidelity['calibration']['coefficients']}"


def _within_bound(fidelity: dict) -> bool:
    run, floor = _stock_run(fidelity)
    return run["error"]["mape_pct"] <= max(MAX_MAPE_PCT, NOISE_FLOOR_X * floor)


@pytest.fixture(scope="module")
def fidelity(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict:
    """One ``bench fidelity`` run; a second, on fresh engines, only when stock vLLM's twin is outside the bound.
    Twice in CI (2026-12-07) the twin was 4-7x off while the engine agreed with itself within 17 % and the whole
    file passed alone (four times, 13-38 %): a stall on the shared host measured into a host term does not
    repeat, a twin wired wrong is off both times. The first try's figures go into the failure message."""
    data = _bench(tmp_path_factory.mktemp("fidelity") / "fidelity.json", tiny_model)
    if not _within_bound(data):
        first = _why(data, *_stock_run(data))
        data = _bench(tmp_path_factory.mktemp("fidelity-again") / "fidelity.json", tiny_model)
        data["_first_try"] = first
    return data


def test_the_json_has_both_sides_and_the_error_for_every_run(fidelity: dict) -> None:
    assert {(r["policy"], r["rps"], r["seed"]) for r in fidelity["runs"]} == {("vllm", 3.0, 0), ("lvf", 3.0, 0)}
    for r in fidelity["runs"]:
        for side in ("real", "twin"):
            assert r[side]["arrived"] == fidelity["runs"][0]["real"]["arrived"] > 5, "the same requests on both sides"
            for k in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tbt_p50_s", "tbt_p90_s", "slo_attainment"):
                assert r[side][k] >= 0
        assert set(r["error"]) >= {"ttft_p50_pct", "ttft_p90_pct", "tbt_p50_pct", "tbt_p90_pct", "mape_pct",
                                   "ttft_attainment_pp", "tbt_attainment_pp", "slo_attainment_pp"}
        assert set(r["ablation"]) == ({f"no_{t}" for t in TERMS if t not in LEFT_OUT} | {f"with_{t}" for t in LEFT_OUT}
                                      | {"none"})
        assert len(r["probe_s"]) == 2 and all(0 < p < 0.1 for p in r["probe_s"]), "a speed probe before and after"
        assert 0.5 < r["speed"] < 2.0
        assert 0.5 < r["run_speed"] < 2.0 and len(r["repeat_run_speed"]) == 1, "its speed from its own quiet steps"
    cal = fidelity["calibration"]
    assert cal["source"].startswith("measured") and cal["samples"] >= 100, "the step-time fit measured first"
    assert fidelity["host_terms"]["lvf"]["new_shape_s"] >= 0
    assert fidelity["host_terms"]["vllm"]["step_s"] == 0.0, "stock vLLM is what the calibration measured"
    assert fidelity["host_terms"]["vllm"]["output_s"] > 0, "output processing measured outside the calibrated step"
    wake = fidelity["host_terms"]["vllm"]
    assert len(wake["wake_idle_s"]) == len(wake["wake_extra_s"]) == 5 and min(wake["wake_extra_s"]) >= 0
    assert wake["arrival_s"] > 0
    shapes = wake["shape_probe"]
    assert wake["shape_capacity"] == shapes["shape_capacity"] >= 0 and len(shapes["extra_s"]) == len(shapes["distances"])
    probe = fidelity["host_terms"]["lvf"]["plan_probe"]
    assert probe["plan_timed"] > 0 and fidelity["host_terms"]["lvf"]["plan_s"] > 0, "the plugin timed its plans"
    kv, lvf = fidelity["host_terms"]["lvf"]["kv_probe"], fidelity["host_terms"]["lvf"]
    assert kv["sync_n"] > 0 and lvf["sync_call_s"] + lvf["sync_block_s"] > 0, "the connector timed its eager syncs"
    resume = lvf["resume_probe"]
    assert resume["decode_steps"] > 100 and resume["without_resume"]["steps"] > 0, "the probe's steps were logged"
    assert lvf["resume_s"] >= 0 and fidelity["host_terms"]["vllm"]["resume_s"] == 0.0, "stock vLLM resumes nothing"
    waiting = lvf["waiting_probe"]
    assert waiting["quiet_steps"] > 100 and waiting["stock_probe_s"] >= 0, "the plugin's quiet steps were logged"
    measured = waiting["waiting_s"]
    assert lvf["waiting_s"] == (waiting["stock_probe_s"] if measured is None else measured), "its own steps decide"
    assert "waiting_probe" not in fidelity["host_terms"]["vllm"], "stock vLLM keeps the stock probe's value"
    assert fidelity["_plots"] == ["fidelity_cdf_lvf_r3.png", "fidelity_cdf_vllm_r3.png"]
    with np.load(fidelity["_path"].with_suffix(".cdf.npz")) as z:
        first, second = (z[f"{p}|3.0|0|shapes_before"] for p in ("vllm", "lvf"))
    assert first.size > 10, "the calibration and the probes ran batch sizes before the first run"
    assert set(first) < set(second), "the second run starts from every size the process ran before it"
    assert "winner real" in fidelity["_stdout"]


def test_the_twin_of_stock_vllm_is_within_the_bound(fidelity: dict) -> None:
    run, floor = _stock_run(fidelity)
    e = run["error"]
    assert _within_bound(fidelity), f"{_why(fidelity, run, floor)}; first try: {fidelity.get('_first_try')}"
    assert abs(e["ttft_attainment_pp"]) <= MAX_ATTAINMENT_PP, e
    assert abs(e["tbt_attainment_pp"]) <= MAX_ATTAINMENT_PP, e


def test_a_repeat_measures_the_engine_against_itself(fidelity: dict) -> None:
    """``--repeat 2``: every point's requests run on the engine twice; the summary's noise floor is the same
    error measures between the engine's two runs (one seed here: one pair per point)."""
    by_point = {(p["policy"], p["rps"]): p for p in fidelity["summary"]["points"]}
    for r in fidelity["runs"]:
        assert len(r["real_repeats"]) == 1
        again = r["real_repeats"][0]
        assert again["arrived"] == r["real"]["arrived"]  # the same requests
        floor = by_point[(r["policy"], r["rps"])]["noise_floor"]
        assert floor["pairs"] == 1
        assert floor["mape_pct"] == pytest.approx(abs(errors(r["real"], again)["mape_pct"]))
        assert floor["slo_attainment_pp"] == pytest.approx(abs(errors(r["real"], again)["slo_attainment_pp"]))
    assert fidelity["summary"]["noise_floor"]["mape_pct"] >= 0
    assert "noise floor vllm" in fidelity["_stdout"]


def test_with_one_seed_the_pooled_errors_are_the_runs_own(fidelity: dict) -> None:
    """The pooled errors (each point's seeds as one run) are computed from the per-request outcomes kept in
    ``.cdf.npz``, the repeats' included: over one seed they must give back each run's own errors exactly."""
    by_point = {(p["policy"], p["rps"]): p for p in fidelity["summary"]["points"]}
    with np.load(fidelity["_path"].with_suffix(".cdf.npz")) as z:
        assert all(f"{p}|3.0|0|rep1.t_first" in z.files for p in ("vllm", "lvf")), "the repeats' requests kept"
        assert all(f"{p}|3.0|0|{rep}steps.dt_s" in z.files for p in ("vllm", "lvf") for rep in ("", "rep1.")), \
            "the quiet steps' cells kept, so that a re-score prices them again"
    for r in fidelity["runs"]:
        point = by_point[(r["policy"], r["rps"])]
        assert point["pooled"] == pytest.approx(r["error"], nan_ok=True)
        floor = errors(r["real"], r["real_repeats"][0])
        assert point["noise_floor_pooled"] == pytest.approx({k: abs(floor[k]) for k in point["noise_floor_pooled"]},
                                                            nan_ok=True)
        assert set(point["noise_floor_pooled"]) == set(point["noise_floor"]) - {"pairs"}
    assert "pooled" in fidelity["summary"] and "pooled_mape_pct" in fidelity["summary"]["noise_floor"]
    assert "rt_throttled_share" in fidelity["config"], "the run records whether real-time throttling applied"


def test_rescoring_the_recorded_runs_reproduces_the_twin_without_an_engine(fidelity: dict, tmp_path: Path) -> None:
    """``--rescore`` scores the twin against an earlier JSON's real runs: with the same twin, the same numbers."""
    out = tmp_path / "again.json"
    cmd = [sys.executable, "-m", "superinfer.cli", "bench", "fidelity", "--rescore", str(fidelity["_path"]),
           "--json", str(out), "--plot-dir", str(tmp_path / "plots")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    again = json.loads(out.read_text())
    for before, after in zip(fidelity["runs"], again["runs"]):
        assert after["real"] == before["real"]
        assert after["twin"] == before["twin"] and after["error"] == before["error"]
        assert after["real_repeats"] == before["real_repeats"]  # the noise floor survives a re-score
        assert after["run_speed"] == before["run_speed"] and after["repeat_run_speed"] == before["repeat_run_speed"]
    assert again["summary"]["noise_floor"] == fidelity["summary"]["noise_floor"]
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.png")) == fidelity["_plots"], "real CDFs kept"
    bad = subprocess.run([sys.executable, "-m", "superinfer.cli", "bench", "fidelity", "--rescore", str(out.parent / "plots" /
                          fidelity["_plots"][0])], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a bench fidelity JSON" in bad.stderr


def test_a_rescore_can_measure_the_arrival_wake_shape_resume_and_waiting_terms_again(fidelity: dict,
                                                                                       tmp_path: Path) -> None:
    """``--remeasure host_arrival,host_wake,shape_capacity,host_resume,host_waiting``: those terms measured now on
    the recorded settings (the first three in every policy's host terms, the last two in the plugin's), the
    recorded values kept beside them; every other term and the real runs as recorded."""
    out = tmp_path / "remeasured.json"
    base = [sys.executable, "-m", "superinfer.cli", "bench", "fidelity", "--rescore", str(fidelity["_path"]), "--no-ablate"]
    proc = subprocess.run([*base, "--remeasure", "host_arrival,host_wake,shape_capacity,host_resume,host_waiting",
                                  "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    again = json.loads(out.read_text())
    new = again["remeasured"]
    assert new["terms"] == ["host_arrival", "host_wake", "shape_capacity", "host_resume", "host_waiting"]
    assert new["recorded"]["arrival_s"] == fidelity["host_terms"]["vllm"]["arrival_s"]
    assert 0 < new["values"]["arrival_s"] < 0.01 and len(new["values"]["wake_extra_s"]) == 5
    assert new["values"]["shape_capacity"] >= 0
    assert new["recorded"]["resume_s"] == {p: h["resume_s"] for p, h in fidelity["host_terms"].items()}
    assert new["values"]["resume_s"]["vllm"] == 0.0 and new["values"]["resume_s"]["lvf"] >= 0
    assert again["host_terms"]["lvf"]["resume_probe"]["decode_steps"] > 100
    assert new["recorded"]["waiting_s"] == {p: h["waiting_s"] for p, h in fidelity["host_terms"].items()}
    assert new["values"]["waiting_s"]["vllm"] == fidelity["host_terms"]["vllm"]["waiting_s"], "stock: as recorded"
    assert again["host_terms"]["lvf"]["waiting_probe"]["quiet_steps"] > 100
    changed = ("arrival_s", "wake_extra_s", "shape_capacity")
    for policy, h in again["host_terms"].items():
        before = fidelity["host_terms"][policy]
        assert all(h[k] == new["values"][k] for k in changed) and h["resume_s"] == new["values"]["resume_s"][policy]
        assert h["waiting_s"] == new["values"]["waiting_s"][policy]
        kept = [k for k in h if k not in (*changed, "resume_s", "resume_probe", "waiting_s", "waiting_probe")]
        assert {k: h[k] for k in kept} == {k: before[k] for k in kept}
    assert [r["real"] for r in again["runs"]] == [r["real"] for r in fidelity["runs"]]
    bad = subprocess.run([*base, "--remeasure", "host_step"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "host_arrival, host_wake, shape_capacity" in bad.stderr
