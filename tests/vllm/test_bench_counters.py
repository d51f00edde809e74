"""`bench vllm` bookkeeping that needs no engine: stock-vLLM resume/recompute counting and host load."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from superinfer.bench.engine.hostload import HostLoad
from superinfer.bench.engine.run import instrument_stock


class FakeScheduler:
    """Just what instrument_stock touches: requests, _preempt_request, schedule's output shape."""

    def __init__(self) -> None:
        self.requests: dict[str, Any] = {}
        self.next_out: Any = None

    def _preempt_request(self, request: Any, timestamp: float) -> None:
        request.num_computed_tokens = 0

    def schedule(self) -> Any:
        out = self.next_out
        for rid, n in out.num_scheduled_tokens.items():  # as vLLM's _update_after_schedule does
            self.requests[rid].num_computed_tokens += n
        return out


def _out(resumed: list[str], tokens: dict[str, int]) -> Any:
    return SimpleNamespace(scheduled_cached_reqs=SimpleNamespace(resumed_req_ids=resumed), num_scheduled_tokens=tokens)


def test_stock_counters_count_recomputed_tokens_net_of_prefix_hits() -> None:
    s = FakeScheduler()
    a, b = SimpleNamespace(request_id="a", num_computed_tokens=300), SimpleNamespace(request_id="b", num_computed_tokens=70)
    s.requests = {"a": a, "b": b}
    stats = instrument_stock(s)
    s._preempt_request(a, 0.0)
    s._preempt_request(b, 0.0)
    assert a.num_computed_tokens == 0 and stats == {"resumed": 0, "recomputed_tokens": 0}
    a.num_computed_tokens = 64  # a prefix-cache hit restored 64 tokens; 236 are computed again
    s.next_out = _out(["a"], {"a": 237})
    s.schedule()
    assert stats == {"resumed": 1, "recomputed_tokens": 236}
    s.next_out = _out([], {"a": 1})  # a plain decode step is not a resume
    s.schedule()
    s.next_out = _out(["b"], {"b": 71})
    s.schedule()
    assert stats == {"resumed": 2, "recomputed_tokens": 236 + 70}


def test_host_load_reports_shares_in_range() -> None:
    h = HostLoad()
    sum(i * i for i in range(20000))
    r = h.result()
    assert r["wall_s"] >= 0 and r["own_cpu_s"] >= 0
    if r["other_cpu_share"] is not None:
        assert 0.0 <= r["other_cpu_share"]


def test_counter_means_take_dict_valued_and_missing_counters_without_failing() -> None:
    from superinfer.bench.engine.run import counters_mean

    runs = [{"policy": "lvf", "engine_counters": {"parks": 10, "refused": {"blocks": 2, "budget": 4}, "note": None}},
            {"policy": "lvf", "engine_counters": {"parks": 20, "refused": {"blocks": 4}}},
            {"policy": "vllm", "engine_counters": {"resumed": 3, "recomputed_tokens": 300}}]
    assert counters_mean(runs, ["lvf", "vllm"]) == {
        "lvf": {"parks": 15.0, "refused.blocks": 3.0, "refused.budget": 4.0},
        "vllm": {"resumed": 3.0, "recomputed_tokens": 300.0}}


def test_bench_vllm_writes_each_run_as_it_finishes_and_keeps_the_runs_when_the_summary_fails(
        tmp_path, monkeypatch) -> None:
    """The engine's part is replaced by canned runs: this checks the command's bookkeeping only."""
    import json

    from click.testing import CliRunner

    from superinfer.bench.engine import run as bench
    from superinfer.sim import metrics

    done = []

    def one_run(policy, seed, o, slo, workdir):
        out = tmp_path / "out.json.runs.jsonl"
        done.append(len(out.read_text().splitlines()))  # what was on disk when this run started
        return {"policy": policy, "seed": seed, "engine_counters": {"parks": seed}}

    def broken_summary(runs):
        raise KeyError("ttft_attainment")

    monkeypatch.setattr(bench, "prepare", lambda o, workdir: (["vllm", "lvf"], (1.0, 0.1), None))
    monkeypatch.setattr(bench, "run_policy", one_run)
    monkeypatch.setattr(metrics, "summarise", broken_summary)
    out = tmp_path / "out.json"
    res = CliRunner().invoke(bench.bench_vllm, ["--build-tiny", str(tmp_path / "m"), "--seeds", "2",
                                                "--json", str(out)])
    assert res.exit_code == 1 and "the summary failed (KeyError" in res.output
    assert done == [0, 1, 2, 3]
    assert len((tmp_path / "out.json.runs.jsonl").read_text().splitlines()) == 4
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 4 and data["summary_error"].startswith("KeyError") and "summary" not in data
