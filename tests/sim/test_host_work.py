"""The grounded twin's host work: vLLM's measured line per step, hidden under the GPU's work by async scheduling
(vLLM's default on a GPU, which the plugin follows) except in an iteration that parks a victim, and added after it
with every engine synchronous (``--host-overlap none``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.sim.build import build_cost_model, schedules_async
from superinfer.sim.costmodel import CostModel
from superinfer.sim.gputerms import CpuTerms
from superinfer.sim.grounded import cpu_for, host_line, shipped_terms
from superinfer.sim.hardware import get_hardware
from superinfer.sim.layout import Layout
from superinfer.sim.models import get_model


def twin(policy: str, *, model: str = "qwen2.5-32b", hardware: str = "gh200", gpu_costs: str = "grounded",
         layout: Layout | None = None, host_overlap: str = "auto") -> CostModel:
    return build_cost_model(model, hardware, 16, gpu_costs=gpu_costs, layout=layout,
                            async_host=schedules_async(policy, host_overlap))


def test_every_engine_schedules_asynchronously_as_vllm_does_on_a_gpu():
    policies = ("lvf", "lvf-paper", "lvf-hbm", "lvf-nooverlap", "vllm", "sarathi", "vllm-offload", "priority", "fcfs")
    assert all(schedules_async(p) for p in policies)
    assert not any(schedules_async(p, "none") for p in policies)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        schedules_async("nope")


def test_an_iteration_that_parks_pays_its_host_after_the_gpu_under_async_scheduling():
    """The DuplexKV worker waits on the host for a park's copy before it launches the iteration."""
    cm = twin("lvf")
    tokens, computed, decode = np.ones(64, np.int64), np.full(64, 900, np.int64), np.ones(64, bool)
    gpu, host = cm._grounded.parts_s(0, 0, 64, 64 * 900)
    plain = cm.price_step(tokens, computed, decode, 0, 0, 0, parks_wait=True)
    parks = cm.price_step(tokens, computed, decode, 0, 3, 0, parks_wait=True)
    offload = cm.price_step(tokens, computed, decode, 0, 3, 0, parks_wait=False)  # vLLM's connector: fenced
    assert plain.compute_s == pytest.approx(max(gpu, host)) and offload.compute_s == plain.compute_s
    assert parks.compute_s == pytest.approx(gpu + host) and cm.async_host
    assert parks.step_s == pytest.approx(parks.compute_s + cm.transfer_s(0, 3))


def test_the_shipped_host_line_is_vllm_s_own_and_grows_with_the_batch():
    line = host_line()
    assert 1e-4 < line.base_s < 5e-3 and 1e-6 < line.per_seq_s < 1e-4  # ~0.7 ms + ~16 us per sequence
    cm = twin("lvf", host_overlap="none")
    gpu, host = cm._grounded.parts_s(0, 0, 256, 256 * 1024)
    assert host == pytest.approx(line.base_s + 256 * line.per_seq_s)
    assert cm.iteration_s(0, 0, 256, 256 * 1024) == pytest.approx(gpu + host)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(0, 8192), d=st.integers(0, 512), kv=st.integers(1, 8000),
       model=st.sampled_from(["qwen2.5-32b", "llama-3-8b"]))
def test_async_scheduling_hides_the_host_under_the_gpu_and_never_costs_more(p, d, kv, model):
    sync, asyn = twin("lvf", model=model, host_overlap="none"), twin("lvf", model=model)
    gpu, host = sync._grounded.parts_s(p, p * (p + 1) / 2, d, d * kv)
    t_sync, t_async = sync.iteration_s(p, p * (p + 1) / 2, d, d * kv), asyn.iteration_s(p, p * (p + 1) / 2, d, d * kv)
    if p + d == 0:
        assert t_sync == t_async == 0.0
    else:
        assert t_sync == pytest.approx(gpu + host) and t_async == pytest.approx(max(gpu, host))
        assert t_async < t_sync


def test_the_datasheet_roofline_adds_its_constant_overhead_whatever_the_scheduling():
    a, b = twin("lvf", gpu_costs="datasheet"), twin("vllm", gpu_costs="datasheet")
    assert a.iteration_s(512, 512 * 513 / 2, 64, 64 * 900) == b.iteration_s(512, 512 * 513 / 2, 64, 64 * 900)


def test_tensor_parallel_hosts_pay_the_measured_growth_of_the_base_and_overlap_collectives_too():
    terms = shipped_terms()
    one, two = cpu_for(terms, 1), cpu_for(terms, 2)
    assert two.per_seq_s == one.per_seq_s
    assert two.base_s - one.base_s == pytest.approx(terms.cpu["a100/tp2"].base_s - terms.cpu["a100/tp1"].base_s)
    assert cpu_for(terms, 8).base_s == cpu_for(terms, 4).base_s  # TP 4 is the largest measured
    sync = twin("lvf", model="llama-3-70b", hardware="h100-sxm", layout=Layout(4, 1), host_overlap="none")
    asyn = twin("vllm", model="llama-3-70b", hardware="h100-sxm", layout=Layout(4, 1))
    gpu, host = sync._grounded.parts_s(0, 0, 32, 32 * 2000)
    comm = sync.comm(32, 32).comm_s
    assert comm > 0 and sync.iteration_s(0, 0, 32, 32 * 2000) == pytest.approx(gpu + comm + host)
    assert asyn.iteration_s(0, 0, 32, 32 * 2000) == pytest.approx(max(gpu + comm, host))


def test_the_constant_overhead_stays_when_the_measured_line_is_left_out():
    cm = twin("lvf", gpu_costs="grounded-gpu")
    gpu, host = cm._grounded.parts_s(0, 0, 200, 200 * 100)
    assert host == get_hardware("gh200").overhead_s


@pytest.mark.parametrize("body, what", [
    ("{}", "fit.base_s and fit.per_seq_s"),
    ('{"fit": {"base_s": 0.0007}}', "fit.base_s and fit.per_seq_s"),
    ('{"fit": {"base_s": 0.7, "per_seq_s": 16}}', "fit.per_seq_s: expected seconds"),
    ('{"fit": {"base_s": -1, "per_seq_s": 1e-5}}', "fit.base_s: expected seconds"),
    ("not json", "not a `bench overhead` result"),
])
def test_a_bad_host_line_file_is_refused_naming_the_file(tmp_path, body, what):
    f = tmp_path / "host.json"
    f.write_text(body)
    with pytest.raises(ValueError, match=what) as err:
        host_line(str(f))
    assert str(f) in str(err.value)


def test_a_host_line_from_a_bench_result_is_read_as_written(tmp_path):
    f = tmp_path / "host.json"
    f.write_text(json.dumps({"fit": {"base_s": 0.001, "per_seq_s": 2e-5, "median_ape_pct": 1.0}, "rows": []}))
    assert host_line(str(f)) == CpuTerms(base_s=0.001, per_seq_s=2e-5, rows=0)
    big = cpu_for(shipped_terms(), 1, host_line(str(f)))
    assert big.overhead_s(100) == pytest.approx(0.003)


def test_what_if_every_policy_or_none_overlapped_its_host():
    assert schedules_async("lvf", "all") and not schedules_async("vllm", "none")
    assert schedules_async("lvf", "auto") is True and schedules_async("sarathi", "auto") is True
    with pytest.raises(ValueError, match="host_overlap: expected one of auto, all, none"):
        schedules_async("lvf", "sometimes")


def test_bench_sim_asks_what_if_only_of_the_grounded_twin():
    from click.testing import CliRunner

    from superinfer.cli import main

    args = ["bench", "sim", "--model", "llama-3-8b", "--workload", "sharegpt", "--rps", "40", "--duration", "10",
            "--seeds", "1", "--policies", "lvf", "--workers", "1", "--json", "-"]
    res = CliRunner().invoke(main, args + ["--host-overlap", "all"])
    assert res.exit_code == 2 and "give --gpu-costs grounded" in res.output
    runs = {}
    for mode in ("auto", "none"):
        res = CliRunner().invoke(main, args + ["--gpu-costs", "grounded", "--host-overlap", mode])
        assert res.exit_code == 0, res.output
        runs[mode] = json.loads(res.output)["runs"][0]
    assert runs["auto"]["throughput_tok_s"] > runs["none"]["throughput_tok_s"]  # the host no longer follows the GPU
