"""``bench vllm --max-queue-s`` on the real engine: a client's first-token deadline, every policy alike. A
burst far past capacity: what has no token by its deadline is aborted through vLLM's abort path and counted
shed; nothing is lost (arrived = finished + shed), what was served started within the deadline plus a step,
and the engine ends empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

DEADLINE_S = 0.3  # a cold first step on a loaded 2-core host once took longer than 0.1 s: all shed


def test_deadline_sheds_the_burst_and_loses_nothing(tiny_model: Path, vllm_ok: None, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from superinfer.bench.engine.replay import ENGINE_ENV
    from superinfer.bench.engine.run import bench_vllm

    for k, v in ENGINE_ENV.items():  # open_engine sets them for good; restored after this test
        monkeypatch.setenv(k, v)
    out = tmp_path / "out.json"
    # 120 short requests a second for 3 s (lmsys in 64 tokens), at most 2 running: more than the engine serves
    # even on a quiet host (a 1 s burst with 4 running once all made the deadline), so the queue grows past the
    # deadline and sheds, while the requests it still starts in time finish
    r = CliRunner().invoke(bench_vllm, [
        "--model", str(tiny_model), "--workload", "lmsys", "--rps", "120", "--duration", "3", "--drain", "60",
        "--policies", "vllm,lvf", "--seeds", "1", "--num-blocks", "64", "--max-model-len", "64",
        "--max-num-seqs", "2", "--max-num-batched-tokens", "64",
        "--ttft-slo", "5", "--tbt-slo", "1", "--max-queue-s", str(DEADLINE_S), "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["config"]["max_queue_s"] == DEADLINE_S
    for run in data["runs"]:
        assert run["shed"] > 0 and run["finished"] > 0, run
        assert run["arrived"] == run["finished"] + run["shed"] and run["unfinished"] == 0, run
        assert run["shed_share"] == pytest.approx(run["shed"] / run["arrived"])
        assert 0 <= run["shed_with_kv"] <= run["shed"]
        # the deadline is checked between steps: a served request's first token came within a step of it
        assert run["served_ttft_p99_s"] <= DEADLINE_S + 2.0, run["served_ttft_p99_s"]
        assert run["slo_attainment"] <= 1 - run["shed_share"] + 1e-9  # a shed request misses both SLOs
    assert "shed %" in r.output
