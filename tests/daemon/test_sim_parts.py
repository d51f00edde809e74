"""The sim backend's parts, in-process: the workload replay, the step recorder (fed by a real twin, into
real metrics and SLO windows), and the OpenAI endpoint's parsing, events and answers."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import numpy as np
import pytest

from superinfer.core import Tenant, TenantTable
from superinfer.daemon.backends.recorder import StepRecorder, phase_counts
from superinfer.daemon.backends.replay import Replay
from superinfer.daemon.backends.sim import ranking
from superinfer.daemon.backends.sim_http import (
    SIM_HEADER,
    SimRequest,
    collect,
    dispatch,
    parse_completion,
    refusal,
    stream,
    synthetic_text,
    waiter_events,
)
from superinfer.daemon.backends.twin import LiveTwin
from superinfer.daemon.httputil import HttpError
from superinfer.daemon.metrics import DaemonMetrics
from superinfer.daemon.stats import SloWindow
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Trace
from superinfer.sim.hardware import get_hardware
from superinfer.sim.metrics import run_metrics
from superinfer.sim.models import get_model

TENANTS = [Tenant("chat", 2.0, 0.08), Tenant("voice", 1.0, 0.05, 4.0)]
NAMES = [t.name for t in TENANTS]
INDEX = {n: i for i, n in enumerate(NAMES)}
MAX_LEN = 4096


def make_replay(seed: int = 3, chunk_s: float = 2.0, rps: float = 20.0) -> Replay:
    return Replay("chat", "poisson", rps, chunk_s, seed, {"chat": 0.5, "voice": 0.5}, INDEX, MAX_LEN)


# ---- replay ---------------------------------------------------------------------------------------


def test_replay_is_deterministic_and_monotonic_across_chunks():
    a, b = make_replay(), make_replay()
    got = [a.pop() for _ in range(200)]
    assert got == [b.pop() for _ in range(200)], "same seed, same stream"
    assert a.k >= 3, "the stream crossed several chunks"
    times = np.array([t for t, _, _, _ in got])
    assert np.all(np.diff(times) >= 0), "arrival times never decrease, also across chunk boundaries"
    # chunk k lies in [k * chunk_s, (k + 1) * chunk_s): every chunk up to the current one contributed
    chunks = np.floor(times / a.chunk_s).astype(int)
    assert set(chunks.tolist()) == set(range(chunks.max() + 1))
    assert all(p >= 1 and o >= 1 and p + o <= MAX_LEN for _, p, o, _ in got)
    assert Counter(ti for *_, ti in got).keys() == {0, 1}, "both tenants of the mix arrive"
    assert a.next_time() == a.pop()[0], "next_time peeks at what pop takes"


def test_replay_seed_changes_the_stream_and_chunk_is_validated():
    assert [make_replay(seed=3).pop() for _ in range(5)] != [make_replay(seed=4).pop() for _ in range(5)]
    r = make_replay(seed=3)
    first_chunk = [r.pop() for _ in range(3)]
    assert make_replay(seed=3, chunk_s=2.0).pop() == first_chunk[0]
    with pytest.raises(ValueError, match="chunk_s"):
        make_replay(chunk_s=0.0)


# ---- recorder -------------------------------------------------------------------------------------


def _metrics() -> DaemonMetrics:
    return DaemonMetrics(NAMES, backend="sim", profile="test", model="m", simulation=True)


def _value(m: DaemonMetrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def _twin(policy: str, hbm_blocks: int = 200, tenants: list[Tenant] = TENANTS) -> tuple[CostModel, LiveTwin]:
    cm = CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 16)
    cfg = SimConfig(policy=policy, max_num_seqs=32, hbm_blocks=hbm_blocks, b_xfer=64, tenants=TenantTable(tenants))
    return cm, LiveTwin(cm, cfg)


def _run(twin: LiveTwin, rec: StepRecorder | None, m: DaemonMetrics, slo: SloWindow, n: int = 30,
         max_steps: int | None = None, results: list | None = None) -> list:
    """Replay ``n`` requests into the twin and step it until everything finished (or ``max_steps``);
    record each step when ``rec`` is given, append each StepResult to ``results`` when given. Returns
    the Finished records."""
    rp, t, admitted, steps, finished = make_replay(), 0.0, 0, 0, []
    while max_steps is None or steps < max_steps:
        while admitted < n and rp.next_time() <= t:
            a, p, o, ti = rp.pop()
            rid, reason = twin.admit(a, p, o, ti, 0, MAX_LEN)
            assert rid is not None, reason
            admitted += 1
        if not len(twin.state):
            if admitted >= n:
                break
            t = rp.next_time()
            continue
        res = twin.step(t)
        steps += 1
        if rec is not None:
            rec.record(res, twin.state, m, slo, 0.125)
        finished.extend(res.sampled.finished)
        if results is not None:
            results.append(res)
        t = res.t_end
    return finished


@pytest.mark.parametrize("policy", ["lvf", "vllm"])
def test_recorder_counts_what_the_twin_counts(policy):
    cm, twin = _twin(policy)
    m, slo = _metrics(), SloWindow(NAMES, 1e6)
    rec = StepRecorder(cm, TENANTS, twin.state.counters, max_events=1 << 20)
    finished = _run(twin, rec, m, slo)
    c = twin.state.counters
    assert c.finished == len(finished) == 30 and len(twin.state) == 0
    assert c.preemptions > 0, "the workload is loaded enough to preempt"
    if policy == "lvf":
        assert c.rotations > 0 and c.h2d_blocks > 0
    # counters
    assert _value(m, "superinfer_iterations_total") == rec.iterations > 0
    assert _value(m, "superinfer_rotations_total") == c.rotations
    assert _value(m, "superinfer_preemptions_total") == c.preemptions
    assert _value(m, "superinfer_recompute_fallbacks_total") == c.recompute_fallbacks
    bb = cm.block_bytes
    assert _value(m, "superinfer_kv_transfer_bytes_total", direction="h2d") == c.h2d_blocks * bb == rec.xfer["h2d_bytes"]
    assert _value(m, "superinfer_kv_transfer_bytes_total", direction="d2h") == c.d2h_blocks * bb == rec.xfer["d2h_bytes"]
    assert _value(m, "superinfer_kv_transfer_seconds_total", direction="h2d") == pytest.approx(rec.xfer["h2d_s"])
    assert (rec.xfer["h2d_s"] > 0) == (c.h2d_blocks > 0)
    assert _value(m, "superinfer_planner_seconds_count") == rec.iterations
    # rotation events: one per victim (swap_out / recompute), plus swap-ins
    kinds = Counter(e["kind"] for e in rec.events)
    assert kinds["swap_out"] == c.rotations
    assert kinds["swap_out"] + kinds["recompute"] == c.preemptions
    assert {e["tenant"] for e in rec.events} <= set(NAMES)
    # per tenant: tokens, first tokens, finished, SLO outcomes (computed here from the Finished records)
    window = slo.summary()
    for ti, name in enumerate(NAMES):
        mine = [f for f in finished if f.tenant == ti]
        assert mine, f"tenant {name} has finished requests"
        tokens = sum(f.outputs for f in mine)
        assert _value(m, "superinfer_generation_tokens_total", tenant=name) == tokens
        assert _value(m, "superinfer_time_to_first_token_seconds_count", tenant=name) == len(mine)
        assert _value(m, "superinfer_inter_token_seconds_count", tenant=name) == tokens - len(mine)
        assert _value(m, "superinfer_requests_finished_total", tenant=name) == len(mine)
        ttft_ok = sum(f.t_first - f.t_arr <= TENANTS[ti].ttft_slo for f in mine)
        tbt_ok = sum((f.t_end - f.t_first) / max(f.outputs - 1, 1) <= TENANTS[ti].tbt_slo for f in mine)
        assert _value(m, "superinfer_slo_attained_total", tenant=name, slo="ttft") == ttft_ok
        assert _value(m, "superinfer_slo_violations_total", tenant=name, slo="ttft") == len(mine) - ttft_ok
        assert _value(m, "superinfer_slo_attained_total", tenant=name, slo="tbt") == tbt_ok
        w = window[name]
        assert w["requests"] == w["finished"] == len(mine)
        assert w["ttft_attainment"] == round(ttft_ok / len(mine), 6)
        assert w["tbt_attainment"] == round(tbt_ok / len(mine), 6)
    # gauges after the drain
    assert phase_counts(twin.state) == [0, 0, 0]
    assert [_value(m, "superinfer_queue_requests", phase=p) for p in ("waiting", "rotary", "running")] == [0, 0, 0]
    assert _value(m, "superinfer_kv_blocks_capacity", tier="hbm") == twin.hbm_blocks == 200
    assert _value(m, "superinfer_kv_blocks_used", tier="hbm") == twin.state.ledger.hbm.used
    assert _value(m, "superinfer_sim_lag_seconds") == 0.125


#: SLOs under which, on this workload, TTFT and TBT fail different requests (chat: a lax TTFT and a tight
#: TBT; voice: the reverse), so "both" differs from each
SPLIT_TENANTS = [Tenant("chat", 30.0, 0.015), Tenant("voice", 1.0, 0.05, 4.0)]


@pytest.mark.parametrize("policy", ["lvf", "vllm-offload", "vllm"])
def test_recorder_reports_both_slos_pooled_gaps_and_rotations_as_the_simulator(policy):
    """The new SLO measures, computed here from the twin's Finished records and StepResults, in the
    counters and the window; on a drained run the window equals the simulator's own run metrics."""
    tenants = SPLIT_TENANTS
    cm, twin = _twin(policy, tenants=tenants)
    m, slo = _metrics(), SloWindow(NAMES, 1e6)
    rec = StepRecorder(cm, tenants, twin.state.counters, max_events=1 << 20)
    results: list = []
    finished = _run(twin, rec, m, slo, results=results)
    c = twin.state.counters
    assert len(finished) == 30 and c.preemptions > 0, "a loaded run that drained"
    gaps = np.concatenate([r.sampled.gaps for r in results])
    gap_tenant = np.concatenate([r.sampled.gap_tenant for r in results])
    window = slo.summary()
    # a victim rotates when it keeps KV in DRAM: min(host blocks + copied, synced + syncing + copied) > 0,
    # read from the plan and the snapshot it was made from (the recorder reads the state after the step)
    rotated: Counter = Counter()
    for r in results:
        snap, plan = r.snapshot, r.plan
        row = {rid: i for i, rid in enumerate(snap.req_id.tolist())}
        for rid, d2h in zip(plan.victim_ids.tolist(), plan.victim_d2h.tolist()):
            i = row[rid]
            if min(snap.blocks_dram[i] + d2h, snap.synced[i] + snap.syncing[i] + d2h) > 0:
                rotated[NAMES[int(snap.tenant[i])]] += 1
    assert sum(rotated.values()) == c.rotations
    if policy == "vllm":
        assert c.rotations == 0
    else:
        assert c.rotations > 0
    ttft_not_tbt = tbt_not_ttft = 0
    for ti, name in enumerate(NAMES):
        t = tenants[ti]
        mine = [f for f in finished if f.tenant == ti]
        ttft_ok = [f.t_first - f.t_arr <= t.ttft_slo for f in mine]
        tbt_ok = [(f.t_end - f.t_first) / max(f.outputs - 1, 1) <= t.tbt_slo for f in mine]
        both = sum(a and b for a, b in zip(ttft_ok, tbt_ok))
        ttft_not_tbt += sum(a and not b for a, b in zip(ttft_ok, tbt_ok))
        tbt_not_ttft += sum(b and not a for a, b in zip(ttft_ok, tbt_ok))
        g = gaps[gap_tenant == ti]
        g_ok = int((g <= t.tbt_slo).sum())
        # /metrics: every request decided once (all finished): TTFT misses at their first token, the rest at finish
        assert _value(m, "superinfer_slo_attained_total", tenant=name, slo="both") == both
        assert _value(m, "superinfer_slo_violations_total", tenant=name, slo="both") == len(mine) - both
        assert _value(m, "superinfer_inter_token_slo_attained_total", tenant=name) == g_ok
        assert _value(m, "superinfer_inter_token_slo_violations_total", tenant=name) == g.size - g_ok
        assert _value(m, "superinfer_inter_token_seconds_count", tenant=name) == g.size
        assert _value(m, "superinfer_tenant_rotations_total", tenant=name) == rotated[name]
        # /v1/state window
        w = window[name]
        assert w["finished"] == len(mine) and w["slo_attainment"] == round(both / len(mine), 6)
        assert w["tbt_gaps"] == g.size and w["tbt_gap_attainment"] == round(g_ok / g.size, 6)
        assert w["rotations"] == rotated[name]
        assert w["rotations_per_finished"] == round(rotated[name] / len(mine), 6)
    assert _value(m, "superinfer_rotations_total") == sum(
        _value(m, "superinfer_tenant_rotations_total", tenant=n) for n in NAMES)
    assert ttft_not_tbt > 0 and tbt_not_ttft > 0, "'both' differs from 'ttft' and from 'tbt' here"
    assert any(window[n]["tbt_gap_attainment"] != window[n]["tbt_attainment"] for n in NAMES)
    # the simulator's metrics of the same run (superinfer.sim.metrics), from the Finished records
    f_arr = {k: np.array([getattr(f, k) for f in finished]) for k in ("t_arr", "t_first", "t_end", "outputs",
                                                                         "rotations", "tenant")}
    tr = Trace(f_arr["t_arr"], f_arr["t_first"], f_arr["t_end"], f_arr["outputs"], f_arr["t_end"],
               f_arr["rotations"], f_arr["tenant"], gaps, gap_tenant, counters=dict(vars(c)),
               sim_s=float(results[-1].t_end), wall_s=1.0)
    ref = run_metrics(tr, TenantTable(tenants), float(results[-1].t_end))
    for name in NAMES:
        for key in ("slo_attainment", "tbt_gap_attainment", "tbt_attainment", "ttft_attainment"):
            assert window[name][key] == pytest.approx(ref["tenants"][name][key], abs=1e-6), (name, key)
    total_rot = sum(window[n]["rotations"] for n in NAMES)
    assert total_rot / sum(window[n]["finished"] for n in NAMES) == pytest.approx(ref["rotations_per_finished"])


def test_recorder_counts_from_its_construction():
    """Counters are deltas from the state's counters when the recorder was made, not absolute values."""
    cm, twin = _twin("lvf")
    m, slo = _metrics(), SloWindow(NAMES, 1e6)
    _run(twin, None, m, slo, max_steps=1500)  # unrecorded: the counters move, the metrics do not
    before = dict(vars(twin.state.counters))
    assert before["rotations"] > 0 and len(twin.state) > 0
    rec = StepRecorder(cm, TENANTS, twin.state.counters)
    res = twin.step(twin.last.t_end)
    rec.record(res, twin.state, m, slo, 0.0)
    c = twin.state.counters
    assert _value(m, "superinfer_rotations_total") == c.rotations - before["rotations"]
    assert _value(m, "superinfer_kv_transfer_bytes_total", direction="h2d") == \
        (c.h2d_blocks - before["h2d_blocks"]) * cm.block_bytes
    assert _value(m, "superinfer_iterations_total") == rec.iterations == 1
    assert rec.planner(twin.last) == {"last_s": round(res.plan_s, 9), "mean_s": round(res.plan_s, 9),
                                      "iterations": 1}


def test_recorder_transfer_rates_and_planner_summary():
    cm, twin = _twin("lvf")
    rec = StepRecorder(cm, TENANTS, twin.state.counters)
    assert rec.planner(None) == {"last_s": 0.0, "mean_s": None, "iterations": 0}
    empty = rec.transfer()
    assert empty["window_s"] == 0.0 and empty["h2d"] == {"gbps": 0.0, "busy_share": 0.0, "bytes_total": 0,
                                                         "seconds_total": 0.0}
    rec.sample_rates(10.0)
    rec.xfer.update(h2d_bytes=4e9, d2h_bytes=1e9, h2d_s=0.5, d2h_s=0.25)
    rec.sample_rates(12.0)
    t = rec.transfer()
    assert t["window_s"] == 2.0
    assert t["h2d"] == {"gbps": 2.0, "busy_share": 0.25, "bytes_total": 4_000_000_000, "seconds_total": 0.5}
    assert t["d2h"]["gbps"] == 0.5 and t["d2h"]["busy_share"] == 0.125
    with pytest.raises(ValueError, match="tenant"):
        StepRecorder(cm, [], twin.state.counters)


def test_ranking_lists_the_largest_vlt_first():
    cm, twin = _twin("lvf")
    m, slo = _metrics(), SloWindow(NAMES, 1e6)
    assert ranking(None, NAMES, 10) == []
    _run(twin, None, m, slo, max_steps=400)
    last = twin.ranked  # the last plan that ranked: a step the plan gate held keeps it
    assert last is not None and (twin.last.plan.vlt_ids.shape[0] == 0 or last is twin.last)
    top = ranking(last, NAMES, 10)
    assert len(top) == min(10, last.plan.vlt_ids.shape[0]) and len(top) > 1
    vlts = [r["vlt_s"] for r in top]
    assert vlts == sorted(vlts, reverse=True) and vlts[0] == round(float(last.plan.vlt_values.max()), 6)
    assert all(r["tenant"] in NAMES and r["phase"] in ("waiting", "rotary", "running") and r["age_s"] >= 0
               for r in top)
    assert len({r["req_id"] for r in top}) == len(top)
    assert len(ranking(last, NAMES, 3)) == 3 and ranking(last, NAMES, 3) == top[:3]


# ---- HTTP: parsing --------------------------------------------------------------------------------


def parse(body, unknown: str = "reject", max_len: int = MAX_LEN) -> SimRequest:
    return parse_completion(body, INDEX, "chat", unknown, max_len)


@pytest.mark.parametrize("body, param", [
    ({"prompt": ""}, "prompt"),
    ({}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, True]}, "prompt"),
    ({"prompt": [1, 2.5]}, "prompt"),  # 2.0 is an integer (JSON Schema), 2.5 is not
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": 7}, "prompt"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 65537}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "8"}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": True}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": MAX_LEN}, "max_tokens"),  # at most max_model_len - 1
    ({"prompt": "hi", "stream": "yes"}, "stream"),
    ({"prompt": [1] * 4000, "max_tokens": 97}, "max_tokens"),
    ({"prompt": "hi", "vllm_xargs": "chat"}, "vllm_xargs"),
    ({"prompt": "hi", "vllm_xargs": {"tenant": 3}}, "vllm_xargs.tenant"),
    ({"prompt": "hi", "vllm_xargs": {"tenant": "nobody"}}, "vllm_xargs.tenant"),
])
def test_parse_rejects_bad_fields_with_400_naming_the_field(body, param):
    with pytest.raises(HttpError) as exc:
        parse(body)
    assert exc.value.status == 400
    assert exc.value.extra.get("param") == param
    assert param.split(".")[-1] in exc.value.message
    assert json.loads(exc.value.response().body)["error"]["param"] == param


def test_parse_rejects_a_body_that_is_not_an_object():
    with pytest.raises(HttpError) as exc:
        parse(["prompt"])
    assert exc.value.status == 400 and exc.value.message == "expected a JSON object"


def test_parse_counts_tokens_and_resolves_tenants():
    r = parse({"prompt": "x" * 10})
    assert (r.tenant, r.tenant_idx, r.prompt_tokens, r.max_tokens) == ("chat", 0, 3, 16)
    r = parse({"prompt": [5, 6, 7], "max_tokens": 4, "vllm_xargs": {"tenant": "voice"}})
    assert (r.tenant, r.tenant_idx, r.prompt_tokens, r.max_tokens) == ("voice", 1, 3, 4)
    r = parse({"prompt": "x", "vllm_xargs": {"tenant": "nobody"}}, unknown="default")
    assert (r.tenant, r.tenant_idx, r.prompt_tokens) == ("chat", 0, 1)
    assert parse({"prompt": [1] * 4000, "max_tokens": 96}).prompt_tokens == 4000  # exactly fits


# ---- HTTP: events and answers ---------------------------------------------------------------------


def test_waiters_get_one_token_per_sample_then_done_and_the_answers_match():
    """A real twin serves three HTTP waiters; the events become a JSON answer and an SSE stream."""
    cm, twin = _twin("lvf", hbm_blocks=2000)
    reqs = [SimRequest("chat", 0, 40, 6), SimRequest("voice", 1, 90, 1), SimRequest("voice", 1, 10, 9)]
    http = {}
    for r in reqs:
        r.rid, _ = twin.admit(0.0, r.prompt_tokens, r.max_tokens, r.tenant_idx, 0, MAX_LEN)
        http[r.rid] = r
    events, t = [], 0.0
    while len(twin.state):
        res = twin.step(t)
        events.extend(waiter_events(http, res.sampled, res.t_end))
        t = res.t_end
    assert http == {}, "every waiter that finished left the table"
    assert waiter_events({}, res.sampled, t) == []
    for r in reqs:
        mine = [e for q, e in events if q is r]
        assert [k for k, _ in mine] == ["token"] * (r.max_tokens - 1) + ["done"]
        assert set(mine[-1][1]) == {"t_arr", "t_first", "t_end"} and mine[-1][1]["t_arr"] == 0.0

    async def answers():
        dispatch(events)
        a = await collect(reqs[0], "cmpl-sim-0", "served")
        first = await reqs[2].queue.get()  # the route reads the first event before it answers
        chunks = [c async for c in stream(reqs[2], "cmpl-sim-1", "served", first)]
        single = await collect(reqs[1], "cmpl-sim-2", "served")
        return a, chunks, single

    resp, chunks, single = asyncio.run(answers())
    assert resp.status_code == 200 and resp.headers["x-superinfer-simulation"] == SIM_HEADER["X-Superinfer-Simulation"]
    body = json.loads(resp.body)
    assert body["choices"][0]["text"] == synthetic_text(0, 6) == " sim0 sim1 sim2 sim3 sim4 sim5"
    assert body["choices"][0]["finish_reason"] == "length" and body["model"] == "served"
    assert body["usage"] == {"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}
    sup = body["superinfer"]
    assert sup["simulation"] is True and sup["tenant"] == "chat" and sup["ttft_s"] > 0 and sup["tbt_mean_s"] > 0
    assert json.loads(single.body)["superinfer"]["tbt_mean_s"] is None  # one token: no inter-token time
    assert chunks[-1] == "data: [DONE]\n\n" and len(chunks) == 9 + 1
    parsed = [json.loads(c.removeprefix("data: ")) for c in chunks[:-1]]
    assert "".join(p["choices"][0]["text"] for p in parsed) == synthetic_text(0, 9)
    assert [p["choices"][0]["finish_reason"] for p in parsed] == [None] * 8 + ["length"]
    assert "usage" not in parsed[0] and parsed[-1]["usage"]["completion_tokens"] == 9


def test_errors_reach_both_answer_shapes():
    async def go():
        a, b = SimRequest("chat", 0, 1, 4), SimRequest("chat", 0, 1, 4)
        dispatch([(a, ("token", 1)), (a, ("error", "aborted: x")), (b, ("token", 1)), (b, ("error", "aborted: y"))])
        return await collect(a, "c", "s"), [c async for c in stream(b, "c", "s", await b.queue.get())]

    resp, chunks = asyncio.run(go())
    assert resp.status_code == 503
    assert json.loads(resp.body)["error"] == {"message": "aborted: x", "type": "unavailable", "code": 503}
    assert len(chunks) == 3 and chunks[-1] == "data: [DONE]\n\n"
    assert json.loads(chunks[1].removeprefix("data: "))["error"]["message"] == "aborted: y"


def test_a_shed_request_gets_503_with_retry_after_in_both_answer_shapes():
    """The first event says the request was shed at its deadline: no stream is opened, a plain 503."""
    async def go():
        a, b = SimRequest("chat", 0, 1, 4), SimRequest("chat", 0, 1, 4)
        dispatch([(a, ("shed", 5)), (b, ("shed", 5))])
        return await collect(a, "c", "s"), refusal(await b.queue.get(), b)

    for resp in asyncio.run(go()):
        assert resp.status_code == 503 and resp.headers["retry-after"] == "5"
        assert json.loads(resp.body)["error"]["type"] == "overloaded"
    assert refusal(("token", 1), SimRequest("chat", 0, 1, 4)) is None
