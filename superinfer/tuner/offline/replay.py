"""Replay a workload on the twin in virtual time while something changes the params: a fixed schedule
(the ``oracle`` of ``bench tuner``), the online :class:`~superinfer.tuner.Controller`, or nothing.

The loop is :meth:`superinfer.sim.engine.Simulator.run`'s (arrivals join, one ``step`` per iteration,
jump to the next arrival when idle, drain after the last arrival), driven from outside through the
simulator's public ``arrive``, ``shed``, ``step`` and ``observe_wait``: the controller sees every arrival
(``arrival``), every first token (``first_token``, judged against the tenant's S_F) and every finish (``finished``, mean TBT
against S_B), all on the simulator's clock, and is ticked every ``tick_s`` virtual seconds. Its writes
set ``sim.cfg.params`` and, for ``b_xfer``, the simulator's transfer budget (applied from the next
iteration, as in the daemon's sim backend). The result is
the simulator's :class:`~superinfer.sim.engine.Trace`, recorded by the same
:class:`~superinfer.sim.collect.Collector` as every run of the twin (so ``run_metrics`` judges every
strategy the same way), plus the param trajectory and the controller's decisions.

Like ``Simulator.run`` it sheds: before each iteration the requests still without a first token at their
tenant's ``max_queue_s`` (as the daemon does; the controller heard their arrival and judges them misses
once past S_F), and with ``shed_at_admission`` at arrival a request whose predicted wait passes its
tenant's deadline (as ``Simulator.run`` and the daemon's HTTP front do; the controller never hears of it,
as the daemon's tuner never hears of a 503). Only a request the engine accepts is an ``arrival`` for the
controller (one too large ever to run is not, as in the daemon). Unlike ``Simulator.run`` the replay
charges no host arrival or wake-up costs (its other host costs are the step's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from superinfer.core import INTEGER_PARAMS, Params
from superinfer.sim.collect import Collector, Trace
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator
from superinfer.sim.workload import Workload


@dataclass
class ReplayResult:
    trace: Trace
    trajectory: list[tuple[float, dict[str, float]]]  # (virtual time, tuned knob values) at each change
    decisions: list[dict[str, Any]] = field(default_factory=list)
    controller: Any = None


def _params(base: Params, values: dict[str, float]) -> Params:
    """``base`` with the core knobs of ``values`` (``b_xfer`` is the engine's: not a ``Params`` field)."""
    return base.replace(**{k: int(v) if k in INTEGER_PARAMS else float(v) for k, v in values.items() if k != "b_xfer"})


def replay(w: Workload, cm: CostModel, cfg: SimConfig, *, schedule: Sequence[tuple[float, dict[str, float]]] = (),
           controller_factory: Callable[[Callable[[dict], None]], Any] | None = None,
           tick_s: float = 5.0) -> ReplayResult:
    """Run ``w`` to completion (arrivals, then the drain of ``cfg.drain_s``). ``schedule``: (time,
    knob values) applied when the clock passes each time. ``controller_factory(writer)`` builds the
    controller that may call ``writer(values)``."""
    sim = Simulator(w, cm, cfg)
    table = cfg.tenants
    tix = sim.tenant_index
    tname = [t.name for t in table.tenants]
    s_f, s_b = table.ttft_slo, table.tbt_slo
    trajectory: list[tuple[float, dict[str, float]]] = []
    clock = {"now": 0.0}

    def write(values: dict) -> None:
        sim.cfg.params = _params(sim.cfg.params, values)
        if "b_xfer" in values and sim.budgeted:  # a policy with no transfer budget has none to tune
            sim.b_xfer = int(values["b_xfer"])
        trajectory.append((clock["now"], dict(values)))

    ctl = controller_factory(write) if controller_factory is not None else None
    sched = sorted(schedule, key=lambda x: x[0])
    si = 0
    n = len(w)
    wall0 = time.perf_counter()
    col = Collector(w, cfg.drain_s, sheds=True)
    nxt, now = 0, 0.0
    next_tick = 0.0
    st = sim.state
    while True:
        clock["now"] = now
        while si < len(sched) and sched[si][0] <= now:
            write(sched[si][1])
            si += 1
        if ctl is not None and now >= next_tick:
            ctl.tick(now)
            next_tick = now + tick_s
        in_window = now < col.window_end  # this iteration's tokens count towards window_tokens
        while nxt < n and w.arrival_s[nxt] <= now:
            if sim.arrive(nxt) and ctl is not None:  # accepted by the engine
                ctl.arrival(float(w.arrival_s[nxt]), tname[int(tix[nxt])], int(w.prompt_tokens[nxt]))
            nxt += 1
        col.shed(sim.shed(now), now)
        if len(st) == 0:
            if nxt >= n:
                break
            now = max(float(w.arrival_s[nxt]), now)
            if ctl is not None and next_tick < now:  # idle: tick through the gap
                while next_tick <= now:
                    clock["now"] = next_tick  # a write in this tick is dated when it happens
                    ctl.tick(next_tick)
                    next_tick += tick_s
            continue
        if now >= col.deadline:
            break
        res = sim.step(now)
        sim.observe_wait(res)
        now = res.t_end
        s = res.sampled
        col.add(s, in_window)
        if ctl is not None:
            for ttft, ti in zip(s.first_ttft.tolist(), s.first_tenant.tolist()):
                ctl.first_token(now - ttft, tname[ti], ttft <= s_f[ti])
            for f in s.finished:
                mean = (f.t_end - f.t_first) / (f.outputs - 1) if f.outputs > 1 else 0.0
                ctl.finished(f.t_arr, tname[f.tenant], bool(f.t_first - f.t_arr <= s_f[f.tenant]),
                             bool(mean <= s_b[f.tenant]), f.outputs)
    if ctl is not None:
        ctl.tick(now)
        if hasattr(ctl, "stop"):
            ctl.stop(now)
    trace = col.trace([sim], sim_s=now, wall_s=time.perf_counter() - wall0)
    decisions = [d.as_dict() for d in ctl.decisions] if ctl is not None and hasattr(ctl, "decisions") else []
    return ReplayResult(trace, trajectory, decisions, ctl)
