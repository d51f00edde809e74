"""A tiny synthetic world for controller tests: Poisson arrivals whose outcome depends on the params in
force at arrival (and on the traffic phase), decided a fixed delay later. No simulator: milliseconds."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from superinfer.core import PARAM_DEFAULTS
from superinfer.tuner import Controller, TunerConfig
from superinfer.tuner.arms import Arm, Arms

TENANTS = {"chat": (5.0, 1.0), "voice": (1.0, 1.0)}
START = {k: float(v) for k, v in PARAM_DEFAULTS.items()}


def share_world(best: float) -> Callable[[dict, str], float]:
    """Attainment peaks at ``step_slo_share == best`` and falls 0.3 per unit away; ``hopeless_last = 0``
    is a disaster (0.05)."""
    def p(params: dict, phase: str) -> float:
        if params.get("hopeless_last", 1) == 0:
            return 0.05
        return max(0.02, 0.95 - 0.3 * abs(params["step_slo_share"] - best))
    return p


@dataclass
class World:
    attainment: Callable[[dict, str], float]
    rate: float = 20.0
    delay: float = 0.5
    seed: int = 0
    phase: str = "a"
    voice_share: float = 0.0
    drift: Callable[[float], float] | None = None  # added to the attainment at arrival time t (clipped)
    params: dict = field(default_factory=lambda: dict(START))
    #: (t, values written, incumbent then, the running trial's arm or None)
    writes: list[tuple[float, dict, dict, str | None]] = field(default_factory=list)

    def run(self, ctl: Controller, t0: float, t1: float, tick: float = 1.0) -> None:
        """Arrivals in [t0, t1), ticks every ``tick`` s; outcomes ``delay`` s after arrival."""
        rng = random.Random(self.seed + int(t0 * 1000))
        t, pending, next_tick = t0, [], t0
        while t < t1:
            t += rng.expovariate(self.rate)
            while next_tick <= t:
                self._settle(ctl, pending, next_tick)
                ctl.tick(next_tick)
                next_tick += tick
            tenant = "voice" if rng.random() < self.voice_share else "chat"
            ctl.arrival(t, tenant, 1000 if self.phase == "a" else 8000)
            p = self.attainment(self.params, self.phase) + (self.drift(t) if self.drift is not None else 0.0)
            ok = rng.random() < min(max(p, 0.0), 1.0)
            pending.append((t + self.delay, t, tenant, ok))
        self._settle(ctl, pending, t1)
        ctl.tick(t1)

    def _settle(self, ctl: Controller, pending: list, now: float) -> None:
        while pending and pending[0][0] <= now:
            _, ta, tenant, ok = pending.pop(0)
            ctl.first_token(ta, tenant, True)
            ctl.finished(ta, tenant, True, ok, 100)

    def writer(self, ctl_ref: list) -> Callable[[dict], None]:
        def write(values: dict) -> None:
            ctl = ctl_ref[0] if ctl_ref else None
            arm = ctl.trial.arm if ctl is not None and ctl.trial is not None else None
            self.writes.append((ctl._last_tick if ctl else 0.0, dict(values), dict(ctl.incumbent) if ctl else {}, arm))
            self.params.update(values)
        return write


def make(world: World, arms: Arms | None = None, **cfg) -> Controller:
    base = dict(mode="auto", window_s=20.0, warmup_s=2.0, switch_warmup_s=1.0, min_requests=150, settle_s=1.0, max_settle_s=10.0,
                cooldown_s=5.0, slot_s=5.0, seed=1)
    base.update(cfg)
    ref: list = []
    ctl = Controller(TunerConfig(**base), TENANTS, world.params, writer=world.writer(ref), arms=arms, now=0.0)
    ref.append(ctl)
    return ctl


def arm_at(name: str, features: dict, **params: float) -> Arm:
    return Arm(name, dict(params), 0.9, features)


def arms_for(features: dict, robust: dict | None = None, **phase_params: float) -> Arms:
    return Arms(None if robust is None else Arm("robust", robust, 0.9), {"a": arm_at("a", features, **phase_params)})
