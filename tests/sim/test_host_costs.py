"""The twin's host terms (:class:`superinfer.sim.engine.HostCosts`, docs/fidelity.md): each adds exactly the
time it says on exactly the iterations it says, and the fidelity helpers that measure and scale them."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.bench.fidelity.host import plan_line
from superinfer.bench.fidelity.twin import probe_reference, scaled, speed_factor
from superinfer.core import Params, Phase, Tenant, TenantTable
from superinfer.sim.calibration import Calibration, Coefficients, TransferCalibration
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import HostCosts, SimConfig, Simulator
from superinfer.sim.hardware import get_hardware
from superinfer.sim.models import get_model
from superinfer.sim.workload import Workload

COEF = Coefficients(overhead_s=2e-3, per_prefill_token_s=1e-5, per_prefill_attn_pair_s=1e-8, per_decode_seq_s=3e-5,
                    per_kv_token_s=6e-8)


def calibration() -> Calibration:
    return Calibration(engine="vllm", model="tiny", hardware="test", date="", coefficients=COEF, block_size=32,
                       transfer=TransferCalibration(h2d_gb_s=4.0, d2h_gb_s=4.0, duplex_factor=1.0))


def twin(policy: str, arrivals: list[float], prompts: list[int], outputs: list[int], host: HostCosts,
         hbm_blocks: int = 31, shapes_run: tuple[int, ...] | frozenset[int] = ()) -> Simulator:
    """The fidelity twin's setting: the tiny engine's calibration, 32-token blocks, a loose SLO."""
    w = Workload.from_arrays(np.array(arrivals), np.array(prompts), np.array(outputs), duration_s=max(arrivals) + 1,
                             source="test")
    cm = CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 32, calibration())
    cfg = SimConfig(policy=policy, max_num_seqs=64, max_num_batched_tokens=2048, b_xfer=64,
                    params=Params(step_slo_share=0.0), tenants=TenantTable([Tenant("default", 1.0, 0.1)]),
                    hbm_blocks=hbm_blocks, dram_blocks=4096, drain_s=120.0, host=host, shapes_run=shapes_run)
    return Simulator(w, cm, cfg)


def end_and_iterations(sim: Simulator) -> tuple[float, int]:
    tr = sim.run()
    return float(np.nanmax(tr.t_end)), tr.iterations


TIMES = [f.name for f in fields(HostCosts) if not f.name.startswith("wake_") and f.name != "shape_capacity"]


@pytest.mark.parametrize("bad", [-1e-3, math.nan, math.inf, "1"])
@pytest.mark.parametrize("name", TIMES)
def test_every_term_is_a_finite_non_negative_time(name, bad):
    with pytest.raises(ValueError, match=name):
        HostCosts(**{name: bad})


@pytest.mark.parametrize("idle, extra", [((0.1,), ()), ((0.1, 0.05), (1e-3, 2e-3)), ((0.0,), (1e-3,)),
                                         ((0.1,), (-1e-3,)), ((0.1,), (math.nan,)), (0.1, 1e-3)])
def test_the_wake_curve_is_increasing_idle_times_with_one_non_negative_time_each(idle, extra):
    with pytest.raises(ValueError, match="wake_idle_s"):
        HostCosts(wake_idle_s=idle, wake_extra_s=extra)


def test_the_wake_curve_interpolates_in_log_idle_time_and_is_flat_past_its_last_point():
    h = HostCosts(wake_idle_s=[0.01, 0.1, 1.0], wake_extra_s=[1e-3, 2e-3, 3e-3])
    assert h.wake_idle_s == (0.01, 0.1, 1.0), "lists become tuples (the dataclass is frozen and hashable)"
    assert h.wake_s(0.005) == 0.0 and h.wake_s(0.01) == pytest.approx(1e-3)
    assert h.wake_s(10 ** -1.5) == pytest.approx(1.5e-3)
    assert h.wake_s(0.1) == pytest.approx(2e-3) and h.wake_s(60.0) == pytest.approx(3e-3)
    assert HostCosts().wake_s(60.0) == 0.0


def test_the_first_iteration_after_an_idle_gap_pays_the_wake_cost_once():
    """Two requests 1 s apart, each done in well under a second: the engine idles before each (from 0 until
    the first arrival too), so two iterations pay, each after about a second of idle time."""
    args = ("vllm", [1.0, 2.0], [64, 64], [10, 10])
    base_end, n = end_and_iterations(twin(*args, HostCosts()))
    end, n2 = end_and_iterations(twin(*args, HostCosts(wake_idle_s=(0.5,), wake_extra_s=(4e-3,))))
    assert n2 == n
    assert end - base_end == pytest.approx(4e-3, rel=1e-9), "the last request's end moves by its own wake only"
    trace = twin(*args, HostCosts(wake_idle_s=(0.5,), wake_extra_s=(4e-3,))).run()
    base = twin(*args, HostCosts()).run()
    assert np.allclose(trace.t_first - base.t_first, 4e-3)


def test_output_processing_costs_a_plus_b_per_scheduled_sequence_on_every_iteration():
    """Two requests that always run together: every iteration schedules two sequences."""
    args = ("vllm", [0.0, 0.0], [64, 64], [40, 40])
    base_end, n = end_and_iterations(twin(*args, HostCosts()))
    end, n2 = end_and_iterations(twin(*args, HostCosts(output_s=1e-4, output_per_seq_s=2e-5)))
    assert n2 == n
    assert end - base_end == pytest.approx(n * (1e-4 + 2 * 2e-5), rel=1e-9)


def test_a_step_term_costs_the_same_on_every_iteration():
    args = ("lvf", [0.0, 0.0], [100, 30], [30, 50])
    base_end, n = end_and_iterations(twin(*args, HostCosts()))
    end, n2 = end_and_iterations(twin(*args, HostCosts(step_s=3e-4)))
    assert n2 == n
    assert end - base_end == pytest.approx(n * 3e-4, rel=1e-9, abs=1e-9)


def test_the_plan_term_costs_nothing_where_the_plugin_skips_the_plan():
    """Two requests that fit: the plugin plans on the arrival step (two wait) and on the next (each holds two
    full blocks that eager sync copies), then never again (no block fills before they finish: 64 + 20 < 96
    tokens), so the term is charged exactly twice, for two live requests each time."""
    args = ("lvf", [0.0, 0.0], [64, 64], [20, 20])
    quiet, n = end_and_iterations(twin(*args, HostCosts()))
    planned, n2 = end_and_iterations(twin(*args, HostCosts(plan_s=5e-3, plan_per_live_s=1e-3)))
    assert n2 == n > 2
    assert planned - quiet == pytest.approx(2 * (5e-3 + 2 * 1e-3), rel=1e-9)


def test_under_kv_pressure_the_plan_term_is_charged_on_the_steps_that_plan():
    """Six requests that cannot all fit in 12 blocks: requests wait for most of the run, and plans cost."""
    args = ("lvf", [0.0] * 6, [100] * 6, [60] * 6)
    quiet_end, _ = end_and_iterations(twin(*args, HostCosts(), hbm_blocks=12))
    planned_end, _ = end_and_iterations(twin(*args, HostCosts(plan_s=1e-3), hbm_blocks=12))
    assert planned_end > quiet_end + 1e-3


def test_the_waiting_term_is_charged_on_the_iterations_after_which_requests_still_wait():
    """Both fit: admitted together in the first iteration, nobody ever waits after it. Six requests in 12
    blocks: some wait after most iterations, and the term is charged on those only."""
    for policy in ("vllm", "lvf"):
        fit = (policy, [0.0, 0.0], [64, 64], [20, 20])
        assert end_and_iterations(twin(*fit, HostCosts(waiting_s=1e-3))) == end_and_iterations(twin(*fit, HostCosts()))
        tight = (policy, [0.0] * 6, [100] * 6, [60] * 6)
        sim = twin(*tight, HostCosts(waiting_s=1e-3), hbm_blocks=12)
        waited = []
        step = sim.step

        def watched(now, step=step, sim=sim):
            res = step(now)
            st = sim.state
            waited.append(bool(np.any(st.phase[st.live_rows()] != Phase.RUNNING)))  # finishing moves nobody
            return res

        sim.step = watched
        end = float(np.nanmax(sim.run().t_end))
        base_end, n = end_and_iterations(twin(*tight, HostCosts(), hbm_blocks=12))
        assert len(waited) == n and 0 < sum(waited) < n
        assert end - base_end == pytest.approx(sum(waited) * 1e-3, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(a=st.integers(0, 10**6), b=st.integers(0, 10**5), live=st.lists(st.integers(1, 64), min_size=2, max_size=50))
def test_plan_line_recovers_an_exact_line_from_the_plugins_sums(a, b, live):
    ns = [a + b * n for n in live]  # nanoseconds, as the plugin counts
    sums = {"plan_timed": len(live), "plan_ns": sum(ns), "plan_live": sum(live),
            "plan_live_sq": sum(n * n for n in live), "plan_ns_x_live": sum(y * n for y, n in zip(ns, live))}
    got_a, got_b = plan_line(sums)
    if len(set(live)) > 1:
        assert got_b == pytest.approx(b * 1e-9, rel=1e-6, abs=1e-12)
        assert got_a == pytest.approx(a * 1e-9, rel=1e-6, abs=2e-9)
    else:  # one live count: no slope to see, the mean
        assert got_b == 0.0 and got_a == pytest.approx(np.mean(ns) * 1e-9, rel=1e-9, abs=1e-15)


def test_plan_line_without_plans_is_zero_and_a_falling_line_is_clipped_to_its_mean():
    assert plan_line({}) == (0.0, 0.0)
    live, ns = [1, 2, 3], [300, 200, 100]
    sums = {"plan_timed": 3, "plan_ns": 600, "plan_live": 6, "plan_live_sq": 14,
            "plan_ns_x_live": sum(y * n for y, n in zip(ns, live))}
    assert plan_line(sums) == (pytest.approx(200e-9), 0.0)


def test_scaling_for_the_hosts_speed_multiplies_every_time_and_divides_every_rate():
    host = HostCosts(step_s=1e-4, plan_s=2e-4, arrival_s=3e-4, new_shape_s=4e-4, plan_per_live_s=5e-6,
                     output_s=6e-5, output_per_seq_s=7e-6)
    cal2, host2 = scaled(calibration(), host, 1.25)
    for name in TIMES:
        assert getattr(host2, name) == pytest.approx(1.25 * getattr(host, name))
    waking = HostCosts(wake_idle_s=(0.01, 1.0), wake_extra_s=(1e-3, 3e-3))
    assert scaled(calibration(), waking, 2.0)[1].wake_extra_s == pytest.approx((2e-3, 6e-3))
    assert scaled(calibration(), waking, 2.0)[1].wake_idle_s == (0.01, 1.0), "idle times are not durations of work"
    for f in fields(Coefficients):
        assert getattr(cal2.coefficients, f.name) == pytest.approx(1.25 * getattr(COEF, f.name))
    assert cal2.transfer.h2d_gb_s == pytest.approx(4.0 / 1.25) and cal2.transfer.d2h_gb_s == pytest.approx(4.0 / 1.25)
    assert scaled(calibration(), host, 1.0)[1] is host


def test_the_speed_factor_is_the_probes_over_what_the_terms_predict_for_the_probes_step():
    host = HostCosts(step_s=1e-4, output_s=5e-5, output_per_seq_s=1e-5)
    ref = probe_reference(calibration(), host, 400)
    assert ref == pytest.approx(COEF.iteration_s(0, 0.0, 2, 800) + 1e-4 + 5e-5 + 2e-5)
    assert speed_factor([1.1 * ref, 1.3 * ref], ref) == pytest.approx(1.2)
    assert speed_factor([], ref) == 1.0


KV = HostCosts(park_call_s=2e-4, park_block_s=2e-5, load_s=1e-4, load_block_s=1.5e-5, sync_call_s=1.6e-4,
               sync_block_s=1e-5)


def test_the_kv_term_charges_each_operation_that_copies_a_fixed_and_a_per_block_cost():
    none = np.zeros(0, np.int64)
    assert not HostCosts().prices_kv and KV.prices_kv
    assert KV.kv_s(none, none, 0) == 0.0
    assert KV.kv_s(np.array([0, 0]), np.array([0]), 0) == 0.0, "operations that copy nothing cost nothing"
    assert KV.kv_s(np.array([1, 2]), none, 0) == pytest.approx(2e-4 + 3 * 2e-5), "one park for all victims"
    assert KV.kv_s(none, np.array([4, 0, 2]), 0) == pytest.approx(2 * 1e-4 + 6 * 1.5e-5), "one load per request"
    assert KV.kv_s(none, none, 5) == pytest.approx(1.6e-4 + 5 * 1e-5)


def test_with_measured_kv_lines_every_step_costs_its_compute_plus_the_connectors_time():
    """``lvf-paper`` time-slicing six requests through 12 blocks parks, loads and syncs: each iteration's
    wall time is its compute plus the connector's lines for what it copied, not the cost model's copies."""
    sim = twin("lvf-paper", [0.0] * 6, [100] * 6, [60] * 6, KV, hbm_blocks=12)
    rows = []
    step = sim.step

    def watched(now):
        res = step(now)
        p = res.plan
        parks = p.victim_d2h[p.victim_d2h > 0]
        kv = KV.kv_s(parks, p.swap_blocks, len(res.moves.sync))
        rows.append((res.t_end - res.t_start, res.price.compute_s + kv, res.price.step_s - res.price.compute_s,
                     parks.sum(), p.swap_blocks.sum(), len(res.moves.sync)))
        return res

    sim.step = watched
    sim.run()
    wall, expected, copies, parked, loaded, synced = np.array(rows).T
    assert wall == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert (parked > 0).any() and (loaded > 0).any() and (synced > 0).any(), "the run copies all three ways"
    assert (copies > 0).any(), "the cost model would have priced copies these steps"


def batch_sizes(sim: Simulator) -> list[int]:
    """Run ``sim``; every iteration's batch size in tokens."""
    sizes = []
    step = sim.step

    def watched(now):
        res = step(now)
        sizes.append(int(res.plan.sched_tokens.sum()))
        return res

    sim.step = watched
    sim.run()
    return sizes


def test_a_new_batch_size_costs_the_shape_term_once_unless_the_process_ran_it_before():
    """Three requests that finish apart: one prefill of all three, then decode batches of 3, 2 and 1. The term
    is charged once per size the run has not seen; sizes the engine's process ran before (``shapes_run``) are
    warm."""
    args = ("vllm", [0.0, 0.0, 0.0], [100, 60, 30], [10, 20, 30])
    sizes = batch_sizes(twin(*args, HostCosts()))
    base, n = end_and_iterations(twin(*args, HostCosts()))
    cold, _ = end_and_iterations(twin(*args, HostCosts(new_shape_s=1e-3)))
    assert set(sizes) == {190, 3, 2, 1} and len(sizes) == n
    assert cold - base == pytest.approx(len(set(sizes)) * 1e-3, rel=1e-9)
    some = frozenset(sorted(set(sizes))[:2])
    warm, _ = end_and_iterations(twin(*args, HostCosts(new_shape_s=1e-3), shapes_run=some))
    assert warm - base == pytest.approx((len(set(sizes)) - 2) * 1e-3, rel=1e-9)


def test_the_shape_capacity_is_a_whole_count_and_no_time():
    with pytest.raises(ValueError, match="shape_capacity"):
        HostCosts(shape_capacity=1.5)
    with pytest.raises(ValueError, match="shape_capacity"):
        HostCosts(shape_capacity=-1)
    assert scaled(calibration(), HostCosts(new_shape_s=1e-3, shape_capacity=256), 2.0)[1].shape_capacity == 256


def test_with_a_shape_capacity_a_size_run_before_costs_the_set_up_again_once_evicted():
    """Request 0 alone (prefill of 100, then decodes of 1), request 1 joins (51: its prefill and a decode),
    both decode (2), request 1 finishes and request 0 decodes alone again (1). Keeping one size, 1 was evicted
    by 51 and 2 and costs again; keeping every size, it does not. The sizes the process ran before are kept
    too, least recently run first: with room for three of (100, 1, 51, 2), 100 is evicted and each size's
    next run evicts the one that comes after it, so only the last 1 is warm."""
    args = ("vllm", [0.0, 0.05], [100, 50], [40, 5])
    sizes = batch_sizes(twin(*args, HostCosts()))
    assert sizes[0] == 100 and sizes[1] == 1 and sizes.index(51) < sizes.index(2) < len(sizes) - 1
    assert sizes[-1] == 1 and set(sizes) == {100, 1, 51, 2}
    base, _ = end_and_iterations(twin(*args, HostCosts()))

    def charged(capacity, before=()):
        end, _ = end_and_iterations(twin(*args, HostCosts(new_shape_s=1e-3, shape_capacity=capacity), shapes_run=before))
        return round((end - base) / 1e-3, 6)

    assert charged(0) == 4 and charged(1) == 5 and charged(4) == 4
    assert charged(0, (100, 1, 51, 2)) == 0 and charged(4, (100, 1, 51, 2)) == 0
    assert charged(3, (100, 1, 51, 2)) == 4
    assert charged(3, (51, 2, 100, 1)) == 2, "51 ran least recently and is not kept; it evicts 2 before 2 runs"
    # running a kept size makes it the most recent: 100 runs warm, so 1 evicts 51, not 100 (first in, first out
    # would evict 100 and charge once)
    assert charged(3, (1, 100, 51, 2)) == 3
