"""Host terms measured on the plugin's per-step record (``StepLog``): ``host_resume``, what a resumed request
costs the engine's step beyond what the twin prices (charged by the twin per swap-in it starts), and
``host_waiting``, what a step with requests waiting costs beyond the same step without."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from superinfer.bench.fidelity.steps import (MIN_CELL, MIN_SPEED_STEPS, MIN_STEPS, predicted_s, quiet_cells,
                                             resume_line, run_speed, waiting_line)
from superinfer.core import Params, Tenant, TenantTable
from superinfer.sim.calibration import Coefficients
from superinfer.sim.host import HostCosts
from superinfer.vllm.steplog import COLUMNS, StepLog, attach_stock

COEF = Coefficients(overhead_s=1.5e-3, per_decode_seq_s=1e-4, per_kv_token_s=1e-7)
HOST = HostCosts(step_s=3e-4, output_s=1e-4, output_per_seq_s=1e-5, plan_s=3e-4, waiting_s=5e-5, arrival_s=2e-4,
                 park_call_s=2.4e-4, park_block_s=2.5e-5, load_s=1.4e-4, load_block_s=2e-5)


def steps(n: int, *, resumes: int = 0, tokens_per_seq: int = 1, extra_s: float = 0.0, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` logged steps of 3 requests each; a resume comes with a park and a 9-block load, as in a rotation;
    the engine took the twin's price plus ``extra_s`` per resume, with 0.1 ms of noise."""
    rng = np.random.default_rng(seed)
    cols = {c: np.zeros(n) for c in COLUMNS}
    cols["seqs"][:] = 3
    cols["tokens"][:] = 3 * tokens_per_seq
    cols["kv_tokens"][:] = rng.integers(600, 1200, n)
    cols["resumes"][:] = resumes
    cols["parks"][:] = cols["park_blocks"][:] = resumes
    cols["loads"][:] = resumes
    cols["load_blocks"][:] = 9 * resumes
    cols["planned"][:] = resumes > 0
    cols["live"][:] = 6
    cols["waiting"][:] = 2
    cols["arrivals"][:] = rng.integers(0, 2, n)
    cols["dt_s"] = predicted_s(cols, COEF, HOST) + extra_s * resumes + rng.normal(0, 1e-4, n)
    return cols


def joined(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}


def test_the_cost_per_resume_is_what_the_twin_leaves_unexplained():
    log = joined(steps(400), steps(120, resumes=1, extra_s=4e-4, seed=1), steps(60, resumes=2, extra_s=4e-4, seed=2))
    line = resume_line(log, COEF, HOST)
    assert line["resume_s"] == pytest.approx(4e-4, abs=4e-5)
    assert line["by_resumes"]["1"]["steps"] == 120 and line["by_resumes"]["2"]["steps"] == 60
    assert abs(line["without_resume"]["left_ms"]) < 0.05, "the twin prices a step without resumes in full"


def test_what_the_twin_already_prices_is_not_counted_again():
    """Resumes whose steps cost exactly the twin's price (its park, load and plan terms) cost nothing more."""
    line = resume_line(joined(steps(400), steps(120, resumes=1, seed=1)), COEF, HOST)
    assert line["resume_s"] == pytest.approx(0.0, abs=4e-5)


def test_prefill_steps_and_rare_resume_counts_do_not_enter():
    slow_prefill = steps(80, resumes=1, tokens_per_seq=40, extra_s=0.05, seed=3)
    few = steps(MIN_STEPS - 1, resumes=3, extra_s=0.05, seed=4)
    line = resume_line(joined(steps(400), steps(120, resumes=1, extra_s=4e-4, seed=1), slow_prefill, few), COEF, HOST)
    assert line["resume_s"] == pytest.approx(4e-4, abs=4e-5)
    assert set(line["by_resumes"]) == {"1"}
    assert resume_line(steps(400), COEF, HOST)["resume_s"] == 0.0, "no resumes: nothing to estimate, not NaN"


def quiet_steps(n: int, *, waiting: int, kv: tuple[int, int] = (600, 1200), seqs: int = 3, extra_s: float = 0.0,
                per_kv_token_s: float = 0.0, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` logged decode steps that plan, park, load and add nothing, with ``waiting`` requests waiting; the
    engine took the twin's price without any waiting cost, plus ``extra_s`` and ``per_kv_token_s`` x the KV
    context (a cost the calibration misses), with 0.1 ms of noise."""
    rng = np.random.default_rng(seed)
    cols = {c: np.zeros(n) for c in COLUMNS}
    cols["seqs"][:] = seqs
    cols["tokens"][:] = seqs
    cols["kv_tokens"][:] = rng.integers(kv[0], kv[1], n)
    cols["live"][:] = seqs + waiting
    cols["waiting"][:] = waiting
    price = predicted_s(cols, COEF, replace(HOST, waiting_s=0.0))
    cols["dt_s"] = price + extra_s + per_kv_token_s * cols["kv_tokens"] + rng.normal(0, 1e-4, n)
    return cols


def test_the_waiting_cost_is_the_difference_between_quiet_steps_with_and_without_a_queue():
    log = joined(quiet_steps(300, waiting=0), quiet_steps(300, waiting=3, extra_s=1.2e-4, seed=1))
    line = waiting_line(log, COEF, HOST)
    assert line["waiting_s"] == pytest.approx(1.2e-4, abs=3e-5), "HOST's own waiting_s is not part of the price"
    assert line["cells"] and all(c["steps"][0] >= MIN_CELL and c["steps"][1] >= MIN_CELL for c in line["cells"])


def test_long_contexts_that_come_with_a_queue_are_not_taken_for_its_cost():
    """The engine's step grows with the KV context faster than the calibration says, and the steps with a queue
    have the longer contexts: compared within cells of equal context, the queue itself costs nothing."""
    miss = 4e-7  # per KV token the calibration does not price: 0.2-0.4 ms over these contexts
    short = quiet_steps(300, waiting=0, kv=(200, 800), per_kv_token_s=miss)
    long = quiet_steps(300, waiting=2, kv=(600, 1200), per_kv_token_s=miss, seed=1)
    line = waiting_line(joined(short, long), COEF, HOST)
    assert line["waiting_s"] == pytest.approx(0.0, abs=3e-5)
    assert {c["kv_from"] for c in line["cells"]} <= {600}, "only the contexts both sides ran are compared"
    pooled = np.median(long["dt_s"]) - np.median(short["dt_s"])
    assert pooled > 1e-4, "without the cells the queue would be charged the contexts' cost"


def test_no_cell_with_both_sides_leaves_the_waiting_cost_unmeasured():
    only_queue = quiet_steps(300, waiting=2)
    assert waiting_line(only_queue, COEF, HOST)["waiting_s"] is None
    few = joined(quiet_steps(MIN_CELL - 1, waiting=0), quiet_steps(300, waiting=2, seed=1))
    assert waiting_line(few, COEF, HOST)["cells"] == []
    busy = steps(400, resumes=1, extra_s=1e-3)  # planned steps with resumes are not quiet
    assert waiting_line(joined(busy, quiet_steps(200, waiting=0, seed=2)), COEF, HOST)["waiting_s"] is None


def test_the_step_log_records_each_step_with_its_wall_time():
    log = StepLog()
    reqs = {"a": SimpleNamespace(num_computed_tokens=101), "b": SimpleNamespace(num_computed_tokens=51)}
    out = SimpleNamespace(num_scheduled_tokens={"a": 1, "b": 1},
                          scheduled_cached_reqs=SimpleNamespace(resumed_req_ids={"b"}))
    log.begin()
    log.arrivals += 2
    log.end(out, reqs, {"parks": 1, "swap_out_blocks": 1, "loads": 1, "swap_in_blocks": 2, "sync_blocks": 0},
            plans=1, live=3, waiting=1)
    log.begin()  # the next step: the first is complete
    log.end(out, reqs, {"parks": 1, "swap_out_blocks": 1, "loads": 1, "swap_in_blocks": 2, "sync_blocks": 3},
            plans=1, live=3, waiting=0)
    cols = log.array()
    assert cols["dt_s"].shape == (1,) and cols["dt_s"][0] > 0, "a step is complete when the next starts"
    first = {c: cols[c][0] for c in COLUMNS if c != "dt_s"}
    assert first == {"seqs": 2, "tokens": 2, "kv_tokens": 150, "resumes": 1, "parks": 1, "park_blocks": 1,
                     "loads": 1, "load_blocks": 2, "sync_blocks": 0, "planned": 1, "live": 3, "waiting": 1,
                     "arrivals": 2}
    log.begin()
    assert log.array()["sync_blocks"][1] == 3 and log.array()["planned"][1] == 0, "counters as differences"


def at_speed(cols: dict[str, np.ndarray], factor: float, seed: int = 0) -> dict[str, np.ndarray]:
    """The same steps on a host ``factor`` times slower than the twin's prices (the full price, its waiting
    cost included), with 0.1 ms of noise."""
    rng = np.random.default_rng(seed)
    return {**cols, "dt_s": factor * predicted_s(cols, COEF, HOST) + rng.normal(0, 1e-4, cols["seqs"].shape[0])}


@pytest.mark.parametrize("factor", [0.9, 1.0, 1.15])
def test_the_run_speed_is_the_quiet_steps_time_over_the_twins_price(factor: float):
    log = joined(at_speed(quiet_steps(300, waiting=0), factor), at_speed(quiet_steps(300, waiting=2, seqs=5, seed=1),
                                                                        factor, seed=1))
    cells = quiet_cells(log)
    assert cells["steps"].sum() == 600 and set(cells["waiting"].tolist()) == {0, 1}
    assert run_speed(cells, COEF, HOST) == pytest.approx(factor, abs=0.01)


def test_steps_that_plan_park_load_or_add_requests_do_not_move_the_run_speed():
    busy = steps(400, resumes=1, extra_s=2e-3)  # rotations that cost 2 ms more than priced
    arrivals = at_speed(quiet_steps(200, waiting=1, seed=3), 1.0)
    arrivals["arrivals"][:] = 1
    arrivals["dt_s"] += 5e-3  # a slow add_request: not the host's speed
    log = joined(at_speed(quiet_steps(300, waiting=0), 1.1), busy, arrivals)
    assert quiet_cells(log)["steps"].sum() == 300
    assert run_speed(quiet_cells(log), COEF, HOST) == pytest.approx(1.1, abs=0.01)


def test_a_run_with_too_few_quiet_steps_has_no_speed():
    few = at_speed(quiet_steps(MIN_SPEED_STEPS - 1, waiting=0), 1.2)
    assert run_speed(quiet_cells(few), COEF, HOST) is None
    empty = quiet_cells(steps(50, resumes=1))
    assert empty["steps"].shape == (0,) and run_speed(empty, COEF, HOST) is None


def test_a_stock_scheduler_records_its_steps_and_arrivals():
    """``attach_stock`` wraps a stock vLLM scheduler instance: its own ``schedule`` and ``add_request`` still run,
    and each step is logged with the running requests and the queue left after it."""
    out = SimpleNamespace(num_scheduled_tokens={"a": 1}, scheduled_cached_reqs=SimpleNamespace(resumed_req_ids=set()))
    calls = []
    sched = SimpleNamespace(requests={"a": SimpleNamespace(num_computed_tokens=41)}, running=["a"], waiting=["b", "c"],
                            schedule=lambda: calls.append("schedule") or out,
                            add_request=lambda r: calls.append(f"add {r}"))
    log = StepLog()
    attach_stock(sched, log)
    sched.add_request("b")
    assert sched.schedule() is out
    sched.schedule()
    assert calls == ["add b", "schedule", "schedule"]
    row = {c: log.array()[c][0] for c in COLUMNS if c != "dt_s"}
    assert row == {"seqs": 1, "tokens": 1, "kv_tokens": 40, "resumes": 0, "parks": 0, "park_blocks": 0, "loads": 0,
                   "load_blocks": 0, "sync_blocks": 0, "planned": 0, "live": 1, "waiting": 2, "arrivals": 1}


def test_the_twin_charges_each_swap_in_it_starts():
    """The same rotating run with ``resume_s`` takes longer by that time per swap-in, and no longer without
    swap-ins (stock vLLM)."""
    from superinfer.bench.fidelity.twin import cost_model
    from superinfer.sim.engine import SimConfig, Simulator
    from superinfer.sim.workload import Workload

    rng = np.random.default_rng(0)
    n = 40
    w = Workload.from_arrays(np.sort(rng.uniform(0, 4, n)), rng.integers(100, 400, n), rng.integers(20, 120, n),
                             duration_s=4.0, source="test")
    tenants = TenantTable([Tenant("default", 0.02, 0.01)])

    def run(policy: str, resume_s: float):
        cfg = SimConfig(policy=policy, b_xfer=64, params=Params(), tenants=tenants, hbm_blocks=31, dram_blocks=1024,
                        drain_s=60.0, host=HostCosts(resume_s=resume_s))
        return Simulator(w, cost_model(32, None), cfg).run()

    base, charged = run("lvf-paper", 0.0), run("lvf-paper", 1e-3)
    assert base.counters["swap_ins"] > 10
    assert charged.sim_s > base.sim_s
    stock, stock_charged = run("vllm", 0.0), run("vllm", 1e-3)
    assert stock.counters["swap_ins"] == 0 and stock_charged.sim_s == stock.sim_s
