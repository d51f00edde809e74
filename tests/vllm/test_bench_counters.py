"""`bench vllm` bookkeeping that needs no engine: stock-vLLM resume/recompute counting and host load."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from superinfer.vllm.bench import instrument_stock
from superinfer.vllm.hostload import HostLoad


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
