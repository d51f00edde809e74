"""Traffic scenarios with phases, for ``superinferd tune`` and ``superinferd bench tuner``.

A :class:`Phase` is a run of :class:`Segment` s (a workload, an arrival process, a rate, a tenant mix,
a duration); a burst phase repeats a short segment at 2.5x the rate and a longer one at the base rate.
A :class:`Scenario` is phases back to back over one tenant table. :func:`build` turns one into a single
:class:`~superinfer.sim.workload.Workload` (each segment generated with its own seed from the
scenario's seed, arrival times shifted into place) and the true phase boundaries.

Built in (every tenant weight 1, so the tuner's weighted objective is the plain share of requests meeting
both SLOs; the table always holds ``voice``, whose 50 ms TBT SLO is the tightest: RotaSched v2 sizes
its iterations to it whether or not voice traffic is present, which is what makes the best
``step_slo_share`` depend on the phase):

* ``shifting``: 70 minutes: chat, long prompts, multi-tenant, a voice rush, bursts, a low-load stretch,
  chat again.
* ``shifting-alt``: the same kinds of phase in another order, with other rates, mixes and lengths (the
  trace the tuner's warm-start study is run on: never the one it is judged on).
* ``stationary``: 30 minutes of the first phase of ``shifting`` (the stationary control).
* ``regimes``: 58 minutes where the regimes really trade off (issue 30 item 3): chat at capacity
  (compute-bound), long-output reasoning traffic (the ``reasoning`` lengths, fitted to ServeGen's
  DeepSeek-R1 clients: memory binds and requests rotate), a voice rush, reasoning again, a quiet night,
  bursts; a ``reasoning`` tenant (TTFT 10 s, TBT 100 ms, as ``profiles/reasoning.toml``) joins the table.
  Measured on the twin before it was chosen (one seed, each knob moved alone from the defaults): δ_F −2
  lifts the reasoning phase from 89 to 92 % and drops the voice rush after it from 79 to 68 %, δ_F +5 the
  reverse (87 / 84 %); α 0, ``rotation_margin_s`` 0 and 9 trade the two the same way.
* ``regimes-alt``: the same kinds of phase in another order, with other rates (its warm-start study).

The voice rush (added after a first run showed that no phase of the rest wants a different setting;
docs/tuner.md, "The scenario") is a multi-tenant phase led by the voice tenant at a load the engine
keeps up with: there the 50 ms TBT SLO binds, while in the chat phases (at capacity, TTFT-bound, TBT
SLOs of 100 ms and more) the first-token deadline binds. ``step_slo_share`` (longer iterations: more
prefill per iteration, slower decodes) and ``delta_f`` (waiting requests ahead of running decodes)
trade one against the other, so the best setting should differ between the two kinds of phase.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from superinfer.core import Tenant, TenantTable
from superinfer.sim.workload import Workload, load_workload

TENANTS: tuple[Tenant, ...] = (Tenant("chat", 5.0, 0.1, 1.0), Tenant("voice", 1.0, 0.05, 1.0),
                               Tenant("bulk", 120.0, 0.5, 1.0))
CHAT_ONLY = (("chat", 1.0),)
MIXED = (("chat", 5.0), ("voice", 2.0), ("bulk", 3.0))
VOICE_LED = (("chat", 2.0), ("voice", 6.0), ("bulk", 2.0))
#: ``regimes``: a reasoning tenant's SLOs as ``profiles/reasoning.toml`` sets them (TTFT 10 s, TBT 100 ms)
WITH_REASONING: tuple[Tenant, ...] = TENANTS + (Tenant("reasoning", 10.0, 0.1, 1.0),)
REASONING_ONLY = (("reasoning", 1.0),)


@dataclass(frozen=True)
class Segment:
    workload: str
    rps: float
    duration_s: float
    arrival: str = "poisson"
    mix: tuple[tuple[str, float], ...] = CHAT_ONLY


@dataclass(frozen=True)
class Phase:
    name: str
    segments: tuple[Segment, ...]

    @property
    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.segments)


@dataclass(frozen=True)
class Scenario:
    name: str
    phases: tuple[Phase, ...]
    tenants: tuple[Tenant, ...] = TENANTS
    model: str = "qwen2.5-32b"
    hardware: str = "gh200"
    description: str = ""
    known_phases: bool = True  # False for a recorded trace: one phase, its true boundaries unknown

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    def table(self) -> TenantTable:
        return TenantTable(list(self.tenants))


def _steady(name: str, workload: str, rps: float, duration_s: float, mix=CHAT_ONLY) -> Phase:
    return Phase(name, (Segment(workload, rps, duration_s, mix=mix),))


def _bursts(name: str, rps: float, duration_s: float, factor: float = 2.5, burst_s: float = 30.0,
            cycle_s: float = 120.0) -> Phase:
    segs: list[Segment] = []
    left = duration_s
    while left > 0:
        b = min(burst_s, left)
        segs.append(Segment("chat", rps * factor, b))
        left -= b
        if left > 0:
            q = min(cycle_s - burst_s, left)
            segs.append(Segment("chat", rps, q))
            left -= q
    return Phase(name, tuple(segs))


SCENARIOS: dict[str, Scenario] = {
    "shifting": Scenario("shifting", (
        _steady("chat", "chat", 6.2, 600),
        _steady("long-prompt", "code", 3.5, 600),
        _steady("multi-tenant", "chat", 6.0, 600, MIXED),
        _steady("voice-rush", "chat", 5.0, 600, VOICE_LED),
        _bursts("bursts", 3.5, 600),
        _steady("low-load", "chat", 1.0, 480),
        _steady("chat", "chat", 6.2, 720),
    ), description="70 min: chat 6.2 req/s, long prompts (code) 3.5, multi-tenant 6 (chat/voice/bulk 5:2:3), "
                   "a voice rush 5 (chat/voice/bulk 2:6:2), bursts (30 s at 2.5x every 2 min over 3.5), low load 1, "
                   "chat 6.2"),
    "shifting-alt": Scenario("shifting-alt", (
        _steady("multi-tenant", "chat", 5.5, 480, (("chat", 4.0), ("voice", 3.0), ("bulk", 3.0))),
        _steady("chat", "chat", 6.5, 480),
        _bursts("bursts", 3.0, 480, factor=3.0),
        _steady("voice-rush", "chat", 4.5, 480, (("chat", 3.0), ("voice", 5.0), ("bulk", 2.0))),
        _steady("long-prompt", "code", 4.0, 480),
        _steady("low-load", "chat", 0.8, 360),
        _steady("chat", "chat", 5.8, 480),
    ), description="54 min, other order, rates and mixes: the warm-start study's trace"),
    "regimes": Scenario("regimes", (
        _steady("chat", "chat", 6.2, 600),
        _steady("reasoning", "reasoning", 2.2, 600, REASONING_ONLY),
        _steady("voice-rush", "chat", 5.0, 600, VOICE_LED),
        _steady("reasoning", "reasoning", 2.2, 600, REASONING_ONLY),
        _steady("night", "chat", 0.5, 480),
        _bursts("bursts", 3.5, 600),
    ), tenants=WITH_REASONING, description="58 min: chat 6.2 req/s, reasoning (long outputs) 2.2, a voice rush 5 "
                                            "(chat/voice/bulk 2:6:2), reasoning 2.2, a night at 0.5, bursts over 3.5"),
    "regimes-alt": Scenario("regimes-alt", (
        _steady("reasoning", "reasoning", 2.0, 480, REASONING_ONLY),
        _steady("voice-rush", "chat", 4.5, 480, (("chat", 3.0), ("voice", 5.0), ("bulk", 2.0))),
        _steady("chat", "chat", 6.5, 480),
        _bursts("bursts", 3.0, 480, factor=3.0),
        _steady("reasoning", "reasoning", 2.5, 480, REASONING_ONLY),
        _steady("night", "chat", 0.8, 360),
    ), tenants=WITH_REASONING, description="46 min, other order and rates: the warm-start study's trace for regimes"),
    "stationary": Scenario("stationary", (_steady("chat", "chat", 6.2, 1800),),
                           description="30 min of chat at 6.2 req/s (the stationary control)"),
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; built in: {', '.join(SCENARIOS)}") from None


def trace_scenario(path: str, rps: float | None = None, mix: tuple[tuple[str, float], ...] = CHAT_ONLY) -> Scenario:
    """A recorded trace (any format ``load_workload`` reads, with arrival times) as a scenario of one
    phase, ``trace``, replayed with its own arrivals (inter-arrival times scaled to ``rps`` when given).
    Its phase boundaries are not known, so ``bench tuner`` runs no ``oracle`` on it. Requests keep the
    trace's tenants when every one is in the scenario's table (chat, voice, bulk); otherwise each is
    drawn from ``mix``. The trace is the same for every seed: seeds then vary only the twin's
    randomness (and the tenant draws)."""
    if rps is not None and not rps > 0:
        raise ValueError(f"rps: expected a number > 0 or None (the trace's own rate), got {rps!r}")
    w = load_workload(path, arrival="trace", rps=rps, duration_s=None, seed=0)
    if len(w) == 0:
        raise ValueError(f"trace {path!r}: no requests")
    duration = float(max(w.duration_s or 0.0, float(w.arrival_s[-1]) + 1e-6))
    seg = Segment(path, 0.0 if rps is None else float(rps), duration, arrival="trace", mix=mix)
    return Scenario(f"trace:{os.path.basename(path)}", (Phase("trace", (seg,)),), known_phases=False,
                    description=f"recorded trace {path} ({len(w)} requests, {duration / 60:.1f} min"
                                f"{'' if rps is None else f', scaled to {rps:g} req/s'})")


def _segment(seg: Segment, seed: int, tenants: TenantTable, max_len: int | None, duration_s: float) -> Workload:
    index = {t.name: i for i, t in enumerate(tenants.tenants)}
    trace = seg.arrival == "trace"
    rps = (seg.rps if seg.rps > 0 else None) if trace else seg.rps
    w = load_workload(seg.workload, arrival=seg.arrival, rps=rps, duration_s=duration_s, seed=seed,
                      tenants=None if trace else dict(seg.mix), max_len=max_len)
    if trace and any(n not in index for n in w.tenant_names):
        w = load_workload(seg.workload, arrival=seg.arrival, rps=rps, duration_s=duration_s, seed=seed,
                          tenants=dict(seg.mix), max_len=max_len)
    ids = np.array([index[w.tenant_names[i]] for i in w.tenant_ids.tolist()], np.int32)
    return replace(w, tenant_ids=ids, tenant_names=tuple(t.name for t in tenants.tenants))


def _concat(parts: list[tuple[float, Workload]], duration_s: float, tenants: TenantTable, source: str) -> Workload:
    return Workload(arrival_s=np.concatenate([w.arrival_s + off for off, w in parts]) if parts else np.zeros(0),
                    prompt_tokens=np.concatenate([w.prompt_tokens for _, w in parts]) if parts else np.zeros(0, np.int64),
                    output_tokens=np.concatenate([w.output_tokens for _, w in parts]) if parts else np.zeros(0, np.int64),
                    tenant_ids=np.concatenate([w.tenant_ids for _, w in parts]) if parts else np.zeros(0, np.int32),
                    tenant_names=tuple(t.name for t in tenants.tenants), source=source, arrival="scenario",
                    duration_s=float(duration_s))


def build(scn: Scenario, seed: int, max_len: int | None = None) -> tuple[Workload, list[tuple[str, float, float]]]:
    """The whole scenario as one workload, and ``(phase name, start, end)`` of each phase."""
    table = scn.table()
    parts: list[tuple[float, Workload]] = []
    bounds = []
    t = 0.0
    k = 0
    for ph in scn.phases:
        start = t
        for seg in ph.segments:
            parts.append((t, _segment(seg, seed * 1000 + k, table, max_len, seg.duration_s)))
            t += seg.duration_s
            k += 1
        bounds.append((ph.name, start, t))
    return _concat(parts, t, table, f"scenario:{scn.name}"), bounds


def phase_workload(scn: Scenario, phase: Phase, seed: int, duration_s: float, max_len: int | None = None) -> Workload:
    """``phase`` alone for ``duration_s`` seconds (its segments repeated in order), for a study."""
    table = scn.table()
    parts: list[tuple[float, Workload]] = []
    t, k = 0.0, 0
    while t < duration_s:
        for seg in phase.segments:
            d = min(seg.duration_s, duration_s - t)
            if d <= 0:
                break
            parts.append((t, _segment(seg, seed * 1000 + 500 + k, table, max_len, d)))
            t += d
            k += 1
    return _concat(parts, duration_s, table, f"scenario:{scn.name}/{phase.name}")
