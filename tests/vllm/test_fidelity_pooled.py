"""Errors with each point's seeds pooled (``bench fidelity``'s ``pooled`` and ``noise_floor_pooled``): the
quantiles of all the point's requests together, the attainments weighted by requests."""

from __future__ import annotations

import numpy as np
import pytest

from superinfer.bench.fidelity.report import pooled_side, real_values, summarise_fidelity
from superinfer.bench.fidelity.twin import errors, percentiles


def _fields(ttft: list[float], tbt: list[float], outputs: int = 5) -> dict[str, np.ndarray]:
    """A real run's per-request outcomes as ``.cdf.npz`` keeps them: request i arrives at i seconds."""
    t_arr = np.arange(len(ttft), dtype=float)
    t_first = t_arr + np.asarray(ttft)
    last = t_first + (outputs - 1) * np.asarray(tbt)
    return {"t_arr": t_arr, "t_first": t_first, "t_end": last, "outputs": np.full(len(ttft), outputs),
            "last_token": last}


def _side(values: dict[str, np.ndarray], slo: float, arrived: int) -> dict[str, float]:
    out = percentiles(values)
    out.update({k: slo for k in ("ttft_attainment", "tbt_attainment", "tbt_gap_attainment", "slo_attainment")})
    out["arrived"] = arrived
    return out


def _run(seed: int, real: dict, twin: dict, real_att: float, twin_att: float, repeat: dict | None = None) -> dict:
    n = len(real["t_arr"])
    row = {"policy": "vllm", "rps": 5.0, "seed": seed, "real": _side(real_values(real), real_att, n),
           "twin": _side(twin, twin_att, n)}
    row["error"] = errors(row["real"], row["twin"])
    if repeat is not None:
        row["real_repeats"] = [_side(real_values(repeat), real_att, n)]
    return row


def test_real_values_give_back_each_requests_ttft_and_mean_tbt() -> None:
    v = real_values(_fields([0.1, 0.2, 0.4], [0.01, 0.02, 0.03]))
    assert v["ttft"] == pytest.approx([0.1, 0.2, 0.4])
    assert v["tbt"] == pytest.approx([0.01, 0.02, 0.03])


def test_a_request_without_a_first_token_counts_until_the_runs_last_event() -> None:
    f = _fields([0.1, 0.2], [0.5, 0.01])  # request 0 ends at 2.1 s, after request 1 arrived (1 s)
    f["t_first"][1] = f["t_end"][1] = f["last_token"][1] = np.nan
    assert real_values(f)["ttft"] == pytest.approx([0.1, 2.1 - 1.0])


def test_pooled_quantiles_are_those_of_all_requests_and_attainments_weigh_by_requests() -> None:
    a, b = {"ttft": np.array([1.0, 2.0]), "tbt": np.array([0.1, 0.1])}, {"ttft": np.array([3.0, 4.0, 5.0, 6.0]),
                                                                          "tbt": np.array([0.3] * 4)}
    side = pooled_side([a, b], [_side(a, 1.0, 2), _side(b, 0.25, 4)])
    assert side["ttft_p50_s"] == pytest.approx(np.percentile([1, 2, 3, 4, 5, 6], 50))
    assert side["tbt_p90_s"] == pytest.approx(np.percentile([0.1, 0.1, 0.3, 0.3, 0.3, 0.3], 90))
    assert side["slo_attainment"] == pytest.approx((2 * 1.0 + 4 * 0.25) / 6)


def test_seeds_pooled_cancel_opposite_errors_that_the_mean_of_runs_adds_up() -> None:
    """Twin late by 10 % on one seed and early by 10 % on the other, on the same requests: each run is 10 %
    off, the pooled point is not; an attainment 5 pp high on one seed and low on the other pools to 0."""
    ttft, tbt = [0.1 * (i + 1) for i in range(20)], [0.01] * 20
    real = _fields(ttft, tbt)
    runs = [_run(0, real, {"ttft": np.array(ttft) * 1.1, "tbt": np.array(tbt) * 1.1}, 0.5, 0.55),
            _run(1, real, {"ttft": np.array(ttft) * 0.9, "tbt": np.array(tbt) * 0.9}, 0.5, 0.45)]
    requests = {("vllm", 5.0, r["seed"]): real for r in runs}
    twins = {("vllm", 5.0, 0): {"ttft": np.array(ttft) * 1.1, "tbt": np.array(tbt) * 1.1},
             ("vllm", 5.0, 1): {"ttft": np.array(ttft) * 0.9, "tbt": np.array(tbt) * 0.9}}
    s = summarise_fidelity(runs, ["all"], requests, twins)
    (point,) = s["points"]
    assert point["all"]["mape_pct"] == pytest.approx(10.0)
    assert point["all"]["slo_attainment_pp"] == pytest.approx(5.0)
    assert point["pooled"]["slo_attainment_pp"] == pytest.approx(0.0, abs=1e-9)
    assert point["pooled"]["mape_pct"] < 5.0
    assert s["pooled"]["mape_pct"] == pytest.approx(point["pooled"]["mape_pct"])


def test_the_pooled_noise_floor_needs_every_seeds_repeat_requests() -> None:
    ttft, tbt = [0.1 * (i + 1) for i in range(10)], [0.01] * 10
    real, again = _fields(ttft, tbt), _fields([t * 1.2 for t in ttft], tbt)
    twin = {"ttft": np.array(ttft), "tbt": np.array(tbt)}
    runs = [_run(0, real, twin, 0.5, 0.5, repeat=again)]
    requests = {("vllm", 5.0, 0): {**real, **{f"rep1.{k}": v for k, v in again.items()}}}
    point = summarise_fidelity(runs, ["all"], requests, {("vllm", 5.0, 0): twin})["points"][0]
    assert point["noise_floor_pooled"]["ttft_p50_pct"] == pytest.approx(20.0)
    assert point["pooled"]["mape_pct"] == pytest.approx(0.0, abs=1e-9)
    without = summarise_fidelity(runs, ["all"], {("vllm", 5.0, 0): real}, {("vllm", 5.0, 0): twin})["points"][0]
    assert "pooled" in without and "noise_floor_pooled" not in without
    assert "pooled" not in summarise_fidelity(runs, ["all"])["points"][0], "no per-request data: per-run only"
