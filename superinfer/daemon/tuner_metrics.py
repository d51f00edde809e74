"""``superinfer_tuner_*``: the online tuner's Prometheus metrics, on the daemon's registry.

Base units; counters end in ``_total``; labels are bounded (modes, states, outcomes, reasons, knobs,
three param sources). Alert on ``superinfer_tuner_frozen_reason{reason="rollbacks"} == 1`` (the tuner
stopped itself after ``max_rollbacks_per_hour`` rollbacks) or ``superinfer_tuner_rollbacks_last_hour``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from superinfer.tuner.config import MODES
from superinfer.tuner.controller import Controller
from superinfer.tuner.decisions import Decision
from superinfer.tuner.fleet import Fleet
from superinfer.tuner.freeze import REASONS

STATES = ("off", "observe", "trial", "cooldown", "frozen")
OUTCOMES = ("accept", "reject", "rollback", "abort")
SOURCES = ("tuner", "operator", "other")


def source_kind(source: str) -> str:
    """``tuner``; ``operator`` for ``PUT /v1/params`` (``api:<client>``); ``other`` for anything else."""
    if source == "tuner":
        return "tuner"
    return "operator" if source.startswith("api") else "other"


class TunerMetrics:
    def __init__(self, registry: CollectorRegistry, knobs: tuple[str, ...]) -> None:
        p = "superinfer_tuner_"
        r = registry
        self.mode = Gauge(p + "mode", "1 for the tuner's current mode", ["mode"], registry=r)
        self.state = Gauge(p + "state", "1 for the tuner's current state", ["state"], registry=r)
        self.frozen = Gauge(p + "frozen", "1 while the tuner is frozen", registry=r)
        self.frozen_reason = Gauge(p + "frozen_reason", "1 for the reason the tuner is frozen", ["reason"], registry=r)
        self.trials = Counter(p + "trials_total", "Trials ended, by outcome", ["outcome"], registry=r)
        self.rollbacks = Counter(p + "rollbacks_total", "Trials rolled back, by reason", ["reason"], registry=r)
        self.rollbacks_hour = Gauge(p + "rollbacks_last_hour", "Rollbacks in the last 3600 s", registry=r)
        self.explore_loss = Gauge(p + "exploration_loss_seconds", "Attainment-seconds lost to local steps in the "
                                  "last 3600 s (no local step while at or above explore_budget x 3600)", registry=r)
        self.changes = Counter(p + "param_changes_total", "Accepted params changes, by source", ["source"], registry=r)
        self.incumbent = Gauge(p + "incumbent", "The tuner's incumbent value of each tuned knob", ["param"], registry=r)
        self.objective = Gauge(p + "objective_ratio", "Weighted share of requests meeting both SLOs in the last "
                               "evaluated window of the incumbent and of the candidate", ["window"], registry=r)
        self.phase_changes = Counter(p + "phase_changes_total", "Traffic changes detected (Page-Hinkley)", registry=r)
        self.decisions = Counter(p + "decisions_total", "Decisions, by action", ["action"], registry=r)
        self.fleet_connected = Gauge(p + "fleet_connected", "1 while the fleet's shared storage answers, 0 while "
                                     "it does not (the tuner tunes locally and retries); 0 without a fleet",
                                     registry=r)
        self.fleet_trials = Counter(p + "fleet_trials_total", "Live trials published to the fleet's studies and "
                                    "other hosts' trials read from them", ["direction"], registry=r)
        self._fleet_seen = {"published": 0, "imported": 0}
        self.knobs = knobs
        for o in OUTCOMES:
            self.trials.labels(o)
        self.rollbacks.labels("guard")
        for s in SOURCES:
            self.changes.labels(s)

    def param_change(self, source: str) -> None:
        self.changes.labels(source_kind(source)).inc()

    def decision(self, d: Decision) -> None:
        self.decisions.labels(d.action).inc()
        if d.action in OUTCOMES:
            self.trials.labels(d.action).inc()
        if d.action == "rollback":
            self.rollbacks.labels("guard").inc()
        if d.action == "phase" and d.reason.startswith("traffic changed"):
            self.phase_changes.inc()

    def sync(self, c: Controller, now: float, fleet: Fleet | None = None) -> None:
        for m in MODES:
            self.mode.labels(m).set(1 if c.mode == m else 0)
        for s in STATES:
            self.state.labels(s).set(1 if c.state == s else 0)
        reason = c.freeze.reason(now)
        self.frozen.set(0 if reason is None else 1)
        for r in REASONS:
            self.frozen_reason.labels(r).set(1 if reason == r else 0)
        self.rollbacks_hour.set(c.freeze.rollbacks_last_hour(now))
        self.explore_loss.set(c.budget.spent(now))
        for k, v in c.space.values(c.incumbent).items():
            self.incumbent.labels(k).set(v)
        for w, v in c.objective.items():
            if v is not None:
                self.objective.labels(w).set(v)
        if fleet is not None:
            st = fleet.status()
            self.fleet_connected.set(1 if st["connected"] else 0)
            for d in ("published", "imported"):
                self.fleet_trials.labels(d).inc(max(0, st[d] - self._fleet_seen[d]))
                self._fleet_seen[d] = st[d]
