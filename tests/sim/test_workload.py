"""Workloads: every reader (shared Azure files + fixtures), malformed input, generators, transforms."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from superinfer.sim.workload import Workload, WorkloadError, load_workload
from superinfer.sim.workload import arrivals
from superinfer.sim.workload.lengths import LENGTHS, LogNormal
from superinfer.sim.workload.readers import (detect_format, read_azure, read_burstgpt, read_mooncake,
                                             read_sharegpt, read_trace)
from superinfer.sim.workload.transform import assign_tenants, clip_lengths, rescale, rescale_factor, window

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
CONV = TRACES / "azure_conv_2023.csv"
CODE = TRACES / "azure_code_2023.csv"
needs_traces = pytest.mark.skipif(not CONV.exists() or not CODE.exists(),
                                  reason=f"shared Azure traces not found under {TRACES}")


# ---- the shared Azure files ----------------------------------------------------------------------

@needs_traces
@pytest.mark.parametrize("path, rows, rate, p_med, p_mean, d_med, d_mean", [
    (CONV, 19366, 5.53, 1020, 1155, 129, 211),
    (CODE, 8819, 2.57, 1469, 2048, 13, 28),
])
def test_azure_shared_files_match_readme(path, rows, rate, p_med, p_mean, d_med, d_mean):
    assert detect_format(path) == "azure"
    t = read_azure(path)
    assert len(t) == rows and not t.skipped and not t.dropped
    assert t.arrival_s[0] == 0.0 and np.all(np.diff(t.arrival_s) >= 0)
    assert len(t) / t.arrival_s[-1] == pytest.approx(rate, abs=0.01)
    assert np.median(t.prompt_tokens) == p_med and t.prompt_tokens.mean() == pytest.approx(p_mean, abs=1)
    assert np.median(t.output_tokens) == d_med and t.output_tokens.mean() == pytest.approx(d_mean, abs=1)


@needs_traces
def test_azure_trace_replay_rescaled_keeps_shape():
    w = load_workload(str(CONV), arrival="trace", rps=60, duration_s=120, seed=0)
    assert len(w) == 7200 and w.rate_rps == pytest.approx(60)
    raw = read_azure(CONV)
    factor = rescale_factor(raw.arrival_s, 60, 120)
    # same inter-arrival sequence, times one constant
    np.testing.assert_allclose(np.diff(w.arrival_s), np.diff(raw.arrival_s[:7200]) * factor, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(w.prompt_tokens, raw.prompt_tokens[:7200])
    assert any("rescaled" in n for n in w.notes)


@needs_traces
def test_azure_whole_trace_and_forced_prefix():
    w = load_workload(f"azure:{CODE}", arrival="trace", duration_s=None)
    assert len(w) == 8819 and w.rate_rps == pytest.approx(2.567, abs=0.01)
    w2 = load_workload(str(CODE), arrival="poisson", rps=10, duration_s=60, seed=3)
    assert 450 < len(w2) < 750
    assert set(w2.prompt_tokens.tolist()) <= set(read_azure(CODE).prompt_tokens.tolist())


@needs_traces
def test_azure_skip_bad_on_a_corrupted_copy(tmp_path):
    lines = CONV.read_text().splitlines()[:101]
    lines[10] = "1.0,abc,5"
    lines[50] = "2.0,5"
    bad = tmp_path / "conv_bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(WorkloadError, match=r"conv_bad\.csv:11: num_prefill_tokens"):
        read_azure(bad)
    t = read_azure(bad, skip_bad=True)
    assert len(t) == 98 and [s.line for s in t.skipped] == [11, 51]
    w = load_workload(str(bad), arrival="trace", duration_s=None, skip_bad=True)
    assert w.skipped_count == 2 and w.summary()["skipped_lines"] == 2


# ---- fixture files for each format -----------------------------------------------------------------

def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_raw_header_with_datetimes(tmp_path):
    p = _write(tmp_path, "raw.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
               "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
               "2023-11-16 18:15:51.2224670,879,55\n")
    t = read_trace(p)
    assert t.format == "azure"
    np.testing.assert_allclose(t.arrival_s, [0.0, 4.314579, 4.541877], atol=1e-6)
    bad = _write(tmp_path, "rawbad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1,1\n"
                 "yesterday,374,44\n")
    with pytest.raises(WorkloadError, match=r"rawbad\.csv:3: TIMESTAMP"):
        read_azure(bad)


BURST = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
         "5,ChatGPT,472,18,490,Conversation log\n"
         "45,ChatGPT,1087,0,1087,Conversation log\n"
         "118,GPT-4,417,276,693,API log\n")


def test_burstgpt(tmp_path):
    p = _write(tmp_path, "b.csv", BURST)
    assert detect_format(p) == "burstgpt"
    t = read_burstgpt(p)
    assert len(t) == 2 and t.dropped == {"zero_output_tokens": 1}
    np.testing.assert_allclose(t.arrival_s, [0, 113])
    assert t.prompt_tokens.tolist() == [472, 417]
    bad = _write(tmp_path, "bb.csv", BURST + "130,GPT-4,10,10,25,API log\n140,GPT-4,1,2\n")
    with pytest.raises(WorkloadError, match=r"bb\.csv:5: Total tokens 25"):
        read_burstgpt(bad)
    t = read_burstgpt(bad, skip_bad=True)
    assert [s.line for s in t.skipped] == [5, 6] and "expected 6 fields" in t.skipped[1].reason


def test_mooncake(tmp_path):
    rows = [{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]},
            {"timestamp": 27482, "input_length": 6472, "output_length": 26, "hash_ids": [46]},
            {"timestamp": 30535, "input_length": 100, "output_length": 3}]
    p = _write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect_format(p) == "mooncake"
    t = read_mooncake(p)
    np.testing.assert_allclose(t.arrival_s, [0, 27.482, 30.535])
    bad = _write(tmp_path, "mb.jsonl", json.dumps(rows[0]) + "\n{oops\n" + json.dumps({"timestamp": 1}) + "\n"
                 + json.dumps({**rows[1], "hash_ids": "x"}) + "\n")
    with pytest.raises(WorkloadError, match=r"mb\.jsonl:2: not valid JSON"):
        read_mooncake(bad)
    t = read_mooncake(bad, skip_bad=True)
    assert [s.line for s in t.skipped] == [2, 3, 4]
    assert "missing key(s) input_length, output_length" in t.skipped[1].reason
    assert "hash_ids" in t.skipped[2].reason


def test_sharegpt_json_and_jsonl(tmp_path):
    entries = [{"prompt_len": 100, "output_len": 20}, {"input_length": 50, "output_length": 5, "tenant": "b"},
               {"prompt_tokens": 7, "completion_tokens": 3}]
    p = _write(tmp_path, "s.json", json.dumps(entries, indent=2))
    assert detect_format(p) == "sharegpt"
    t = read_sharegpt(p)
    assert t.prompt_tokens.tolist() == [100, 50, 7] and t.arrival_s is None
    assert t.tenants == ["default", "b", "default"]
    pl = _write(tmp_path, "s.jsonl", "\n".join(json.dumps(e) for e in entries))
    assert detect_format(pl) == "sharegpt" and len(read_sharegpt(pl)) == 3
    # no arrival times: trace replay refused, synthetic arrivals need rps
    with pytest.raises(WorkloadError, match="no arrival times"):
        load_workload(str(p), arrival="trace")
    with pytest.raises(WorkloadError, match="give --rps"):
        load_workload(str(p), arrival="poisson")
    w = load_workload(str(p), arrival="poisson", rps=5, duration_s=10, seed=1)
    assert set(w.tenant_names) == {"default", "b"} and len(w) > 10


def test_sharegpt_with_arrivals_and_errors(tmp_path):
    p = _write(tmp_path, "a.jsonl", '{"arrival_s": 1.5, "prompt_len": 3, "output_len": 2}\n'
               '{"arrival_s": 0.5, "prompt_len": 4, "output_len": 2}\n')
    w = load_workload(str(p), arrival="trace", duration_s=None)
    assert w.arrival_s.tolist() == [0.0, 1.0] and w.prompt_tokens.tolist() == [4, 3]
    conv = _write(tmp_path, "conv.json", json.dumps([{"id": "x", "conversations": [{"from": "human", "value": "hi"}]}]))
    with pytest.raises(WorkloadError, match=r"conv\.json:1: ShareGPT conversation without token lengths"):
        read_sharegpt(conv)
    text = '[\n  {"prompt_len": 1, "output_len": 1},\n  {"prompt_len": -3, "output_len": 1},\n  7\n]'
    bad = _write(tmp_path, "bad.json", text)
    with pytest.raises(WorkloadError, match=r"bad\.json:3: prompt_len: expected a non-negative integer"):
        read_sharegpt(bad)
    t = read_sharegpt(bad, skip_bad=True)
    assert [s.line for s in t.skipped] == [3, 4]
    broken = _write(tmp_path, "broken.json", '[\n{"prompt_len": 1, "output_len": 1},\n{"prompt_len": \n')
    with pytest.raises(WorkloadError, match=r"broken\.json:\d+: not valid JSON"):
        read_sharegpt(broken, skip_bad=True)  # a broken array cannot be resynchronised: always an error


def test_unknown_formats_and_missing_files(tmp_path):
    p = _write(tmp_path, "x.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(WorkloadError, match=r"x\.csv:1: unrecognised CSV header"):
        load_workload(str(p))
    with pytest.raises(WorkloadError, match="no such file, and not a synthetic workload"):
        load_workload(str(tmp_path / "nope.csv"))
    with pytest.raises(WorkloadError, match="no such trace file"):
        load_workload("azure:" + str(tmp_path / "nope.csv"))
    empty = _write(tmp_path, "e.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n")
    with pytest.raises(WorkloadError, match="no usable requests"):
        read_azure(empty)


# ---- synthetic arrivals ----------------------------------------------------------------------------

def _rng(seed=0):
    return np.random.default_rng(seed)


def test_poisson_rate_and_cv():
    t = arrivals.poisson(_rng(1), 50.0, 400.0)
    assert len(t) / 400 == pytest.approx(50, rel=0.03)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert t.min() >= 0 and t.max() < 400


@pytest.mark.parametrize("b", [0.25, 1.0, 4.0])
def test_gamma_cv_is_one_over_sqrt_b(b):
    t = arrivals.gamma(_rng(2), 40.0, 500.0, b)
    gaps = np.diff(t)
    assert len(t) / 500 == pytest.approx(40, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(b), rel=0.08)


def test_hawkes_rate_and_overdispersion():
    t = arrivals.hawkes(_rng(3), 30.0, 600.0, branching=0.5, decay_per_s=2.0)
    assert len(t) / 600 == pytest.approx(30, rel=0.08)
    counts = np.histogram(t, bins=np.arange(0, 601, 1.0))[0]
    assert counts.var() / counts.mean() > 1.5   # Poisson would give ~1
    p = np.histogram(arrivals.poisson(_rng(3), 30.0, 600.0), bins=np.arange(0, 601, 1.0))[0]
    assert p.var() / p.mean() == pytest.approx(1.0, abs=0.25)


def test_parse_arrival():
    assert arrivals.parse_arrival("poisson") == ("poisson", ())
    assert arrivals.parse_arrival("gamma:0.5") == ("gamma", (0.5,))
    assert arrivals.parse_arrival("hawkes") == ("hawkes", (0.5, 2.0))
    assert arrivals.parse_arrival("hawkes:0.8:5") == ("hawkes", (0.8, 5.0))
    for bad in ("gamma", "gamma:-1", "hawkes:1.2", "uniform", "gamma:x", ""):
        with pytest.raises(WorkloadError, match="arrival"):
            arrivals.parse_arrival(bad)


def test_determinism_and_independent_streams():
    a = load_workload("chat", "gamma:0.5", rps=20, duration_s=60, seed=7)
    b = load_workload("chat", "gamma:0.5", rps=20, duration_s=60, seed=7)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    c = load_workload("chat", "gamma:0.5", rps=20, duration_s=60, seed=8)
    assert len(c) != len(a) or not np.array_equal(a.arrival_s, c.arrival_s)
    # adding a tenant mix does not move arrivals or lengths
    d = load_workload("chat", "gamma:0.5", rps=20, duration_s=60, seed=7, tenants={"x": 1, "y": 1})
    np.testing.assert_array_equal(a.arrival_s, d.arrival_s)
    np.testing.assert_array_equal(a.output_tokens, d.output_tokens)


# ---- lengths ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, p_med, p_mean, o_med, o_mean", [
    ("chat", 1020, 1155, 129, 211), ("code", 1469, 2048, 13, 28),
])
def test_length_mixes_reproduce_published_medians_and_means(name, p_med, p_mean, o_med, o_mean):
    p, o = LENGTHS[name].sample(_rng(4), 200_000)
    assert np.median(p) == pytest.approx(p_med, rel=0.02) and p.mean() == pytest.approx(p_mean, rel=0.02)
    assert np.median(o) == pytest.approx(o_med, rel=0.05) and o.mean() == pytest.approx(o_mean, rel=0.04)


def test_long_context_means():
    p, o = LENGTHS["long-context"].sample(_rng(5), 400_000)
    assert p.mean() == pytest.approx(7590, rel=0.03) and o.mean() == pytest.approx(182, rel=0.03)


def test_lognormal_fit():
    d = LogNormal.from_median_mean(100, 150)
    assert d.median == pytest.approx(100) and d.mean == pytest.approx(150)
    with pytest.raises(ValueError):
        LogNormal.from_median_mean(200, 100)


def test_synthetic_errors():
    with pytest.raises(WorkloadError, match="need --rps"):
        load_workload("chat", "poisson", rps=None)
    with pytest.raises(WorkloadError, match="needs a trace file"):
        load_workload("code", "trace", rps=5)
    with pytest.raises(WorkloadError, match="seed"):
        load_workload("chat", rps=1, seed=-1)


# ---- transforms ------------------------------------------------------------------------------------

def _small() -> Workload:
    a = np.array([0.0, 1.0, 1.5, 4.0, 4.1, 10.0])
    return Workload.from_arrays(a, [10, 20, 30, 40, 50, 60], [5, 5, 5, 5, 5, 5], duration_s=10.0, source="t")


def test_rescale_keeps_shape_whole_and_window():
    w = _small()
    r = rescale(w, rps=6.0)  # 6 requests over 10 s = 0.6 rps -> x0.1
    np.testing.assert_allclose(r.arrival_s, w.arrival_s * 0.1)
    ratios = np.diff(r.arrival_s) / np.diff(w.arrival_s)
    assert np.allclose(ratios, ratios[0])
    # window basis: exactly rps * duration arrivals in [0, duration)
    r2 = window(rescale(w, rps=1.0, duration_s=4.0), 4.0)
    assert len(r2) == 4 and r2.rate_rps == pytest.approx(1.0)
    with pytest.raises(WorkloadError, match="holds 6 requests"):
        rescale(w, rps=10.0, duration_s=10.0)


def test_tenants_and_clip():
    w = load_workload("chat", "poisson", rps=100, duration_s=100, seed=1, tenants={"gold": 1, "bronze": 3})
    share = np.mean(w.tenant_ids == 0)
    assert share == pytest.approx(0.25, abs=0.02) and w.tenant_names == ("gold", "bronze")
    assert {r.tenant for r in list(w)[:200]} == {"gold", "bronze"}
    with pytest.raises(WorkloadError, match="weight"):
        assign_tenants(w, {"a": 0}, _rng())
    c = clip_lengths(_small(), 32)
    assert c.prompt_tokens.max() == 31 and np.all(c.prompt_tokens + c.output_tokens <= 32)
    assert "clipped" in c.notes[-1]
    long = load_workload("long-context", "poisson", rps=5, duration_s=100, seed=0, max_len=8192)
    assert np.all(long.prompt_tokens + long.output_tokens <= 8192)


def test_workload_validation():
    with pytest.raises(WorkloadError, match="not sorted"):
        Workload(arrival_s=[1.0, 0.0], prompt_tokens=[1, 1], output_tokens=[1, 1], tenant_ids=[0, 0])
    with pytest.raises(WorkloadError, match=">= 1"):
        Workload(arrival_s=[0.0], prompt_tokens=[0], output_tokens=[1], tenant_ids=[0])


def test_mooncake_detected_whatever_the_extension(tmp_path):
    p = _write(tmp_path, "m.json", '{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
               '{"timestamp": 1500, "input_length": 5, "output_length": 2}\n')
    assert detect_format(p) == "mooncake"
    assert read_trace(p).arrival_s.tolist() == [0.0, 1.5]


def test_trace_holding_exactly_rps_times_duration_requests_is_accepted(tmp_path):
    # 114 requests over ~20 s (what `bench vllm --rps 5.7 --duration 20 --save-trace` writes): 5.7 * 20 is
    # 114.00000000000001 in floating point, and the whole trace is what the window needs.
    rng = np.random.default_rng(3)
    ms = np.sort(rng.integers(0, 19_900, 114))
    ms[0] = 0
    rows = [{"timestamp": int(t), "input_length": 10 + i, "output_length": 5} for i, t in enumerate(ms)]
    p = _write(tmp_path, "exact.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    w = load_workload(f"mooncake:{p}", arrival="trace", rps=5.7, duration_s=20.0)
    assert len(w) == 114
    assert w.arrival_s[-1] < 20.0
    ratios = np.diff(w.arrival_s)[ms[1:] != ms[:-1]] / (np.diff(ms)[ms[1:] != ms[:-1]] / 1000.0)
    np.testing.assert_allclose(ratios, ratios[0])  # one constant scales every gap
    with pytest.raises(WorkloadError, match="holds 114 requests but 5.75 req/s for 20.0 s needs 115"):
        load_workload(f"mooncake:{p}", arrival="trace", rps=5.75, duration_s=20.0)


def test_rescaled_window_holds_exactly_rps_times_duration_despite_rounding():
    # (20 / x) * x < 20 in floating point for x = 0.61: the arrival meant to land on the window's end
    # must not slip inside it.
    a = np.array([0.0, 0.1, 0.2, 0.3, 0.61, 0.7])
    assert (20.0 / 0.61) * 0.61 < 20.0
    w = Workload.from_arrays(a, [10] * 6, [5] * 6, duration_s=1.0, source="t")
    r = window(rescale(w, rps=0.2, duration_s=20.0), 20.0)
    assert len(r) == 4 and r.arrival_s[-1] < 20.0
