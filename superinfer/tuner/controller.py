"""The online tuner: a clock-agnostic controller fed request outcomes and workload features.

It never reads a clock: every method takes ``now`` (seconds on the caller's clock: the daemon's
monotonic time, or the twin's virtual time), and request times are on the same clock. It writes params
only through ``writer`` (the daemon passes the path ``PUT /v1/params`` takes, with source ``tuner``).

State machine (``state``): ``observe`` (the incumbent runs; a window after each change's warm-up
measures it: the *baseline*, which gates proposing) -> propose (the bandit picks an arm or holds) ->
``trial`` (a switchback: candidate and incumbent alternate in slots, ``superinfer.tuner.trials``) ->
accept (it becomes the incumbent) / reject (the incumbent is written back) / roll back (the guard fired
during the trial: written back at once) -> ``cooldown`` -> observe (after a verdict, the trial's own
measurement is the baseline, so the next proposal may follow the cooldown).
``frozen`` while :class:`~superinfer.tuner.freeze.Freeze` says so (a running trial is written back);
``off`` in mode off. Modes: ``shadow`` proposes and logs, writes nothing; ``advise`` also publishes the
candidate as a recommendation; ``auto`` runs trials. A Page-Hinkley alarm on the workload features
(``superinfer.tuner.phase``) aborts a running trial, forgets the baseline, resets the bandit, measures
the incumbent in the new traffic for ``classify_slots`` slots, names the phase from the arms file and, in
``auto``, goes to that phase's arm: at once (a *jump*) when the study measured a gain of at least
``jump_gain`` over the incumbent's setting in that phase, the arm's first window then checked against the
study's score for the replaced setting (below it: a ``revert:<phase>`` trial of that setting); else by a
switchback trial of the arm (adopted unless the trial shows it worse).

Invariants: every setting written is within ``PARAM_BOUNDS``, and is either the incumbent or a candidate
(or jumped-to arm) that moves no tuned knob by more than its step cap from the incumbent
(``arm_step_factor`` caps for an offline study's arm and a revert of one; ``KnobSpace``); at most one trial runs at a time; a rollback writes the incumbent in
the same :meth:`tick` in which the guard fired.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping

from superinfer.tuner.arms import Arms, empty_arms, merge_params
from superinfer.tuner.bandit import DiscountedThompson
from superinfer.tuner.budget import ExplorationBudget
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.controls import OperatorControls
from superinfer.tuner.tracking import TrafficTracking
from superinfer.tuner.decisions import Decision, Trial
from superinfer.tuner.trials import TrialRunner
from superinfer.tuner.freeze import Freeze
from superinfer.tuner.local import LocalSearch
from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Score, Window
from superinfer.tuner.phase import PageHinkley
from superinfer.tuner.space import KnobSpace

Writer = Callable[[dict[str, float | int]], None]
PRIOR_LOCAL, PRIOR_PHASE, PRIOR_ROBUST = (1.0, 1.0), (4.0, 1.0), (2.0, 1.0)


class Controller(OperatorControls, TrafficTracking, TrialRunner):
    """See the module docstring. ``tenants``: name -> (TTFT SLO in s, weight); ``incumbent``: the live
    knob values at start (every tuned knob)."""

    def __init__(self, cfg: TunerConfig, tenants: Mapping[str, tuple[float, float]], incumbent: Mapping[str, float],
                 *, writer: Writer | None = None, arms: Arms | None = None, now: float = 0.0,
                 storage: str | None = None, study_name: str = "superinfer-online",
                 on_decision: Callable[[Decision], None] | None = None) -> None:
        self.cfg = cfg
        self.space = KnobSpace(cfg.knobs, cfg.step_caps)
        self.incumbent = self.space.check(dict(incumbent))
        self.applied = dict(self.incumbent)
        self.writer = writer
        self.arms = arms or empty_arms()
        self.m = Measurements(tenants, cfg.slot_s, cfg.settle_s, cfg.max_settle_s, now)
        self.freeze = Freeze(cfg.max_rollbacks_per_hour)
        self.ph = PageHinkley(cfg.ph_delta, cfg.ph_lambda)
        self.bandit = DiscountedThompson(cfg.gamma, cfg.explore_threshold, cfg.seed)
        self.bandit.ensure("local", PRIOR_LOCAL)
        for name in self.arms.phases:
            self.bandit.ensure(f"arm:{name}", PRIOR_PHASE)
        if self.arms.robust is not None:
            self.bandit.ensure("arm:robust", PRIOR_ROBUST)
        self.budget = ExplorationBudget(cfg.explore_budget)
        self.local = LocalSearch(self.space, cfg.trust_region, cfg.seed, storage, study_name)
        self.on_decision = on_decision
        self.mode = cfg.mode
        self.state = "off" if self.mode == "off" else "observe"
        self.decisions: deque[Decision] = deque(maxlen=200)
        self.decision_count = 0
        self.trial: Trial | None = None
        self.candidate: dict[str, float] | None = None  # the trial's setting, or advise's recommendation
        # after a jump, until its first window is checked: (the replaced setting, the study's score for it
        # in the phase, the epoch, the phase)
        self.jumped: tuple[dict[str, float], float, int, str] | None = None
        self.baseline: Score | None = None  # the incumbent's last measurement in this traffic
        self.baseline_epoch = -1
        self.proposable = False
        self.obs: Window | None = None  # opened at the first arrival (the traffic's start is a change too)
        self.started = False
        self.changed_at = now
        self.cooldown_until = now
        self.epoch = 0
        self.phase: str | None = None
        self.phase_slots: list[dict[str, float]] = []
        self.pending_classify: int | None = cfg.classify_slots  # at start, as after a change: name, jump
        self.classify_tries = 0
        self.recent: deque[dict[str, float]] = deque(maxlen=max(1, int(math.ceil(cfg.window_s / cfg.slot_s))))
        self.counts = {"trials": {}, "rollbacks": {}, "phase_changes": 0, "windows": 0, "jumps": 0}
        self.objective: dict[str, float | None] = {"incumbent": None, "candidate": None}
        self.explore_s = 0.0
        self.observed_s = 0.0
        self._last_tick = now

    # ---- the feed (see superinfer.tuner.objective for what each means) ----------------------------
    def arrival(self, t: float, tenant: str, prompt_tokens: int) -> None:
        if not self.started:
            self.started = True
            self.obs = self.m.open(t, self.cfg.classify_slots * self.cfg.slot_s, "baseline")
        self.m.arrival(t, tenant, prompt_tokens)

    def first_token(self, t_arr: float, tenant: str, ttft_ok: bool) -> None:
        self.m.first_token(t_arr, tenant, ttft_ok)

    def finished(self, t_arr: float, tenant: str, ttft_ok: bool | None, tbt_ok: bool, output_tokens: int) -> None:
        self.m.finished(t_arr, tenant, ttft_ok, tbt_ok, output_tokens)

    # ---- the loop ---------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Decision]:
        """Advance to ``now``; returns the decisions made."""
        first = self.decision_count
        dt = max(now - self._last_tick, 0.0)
        self._last_tick = now
        if self.mode != "off":
            self.observed_s += dt
            if self.trial is not None and not self.space.same(self.applied, self.incumbent):
                self.explore_s += dt  # time the candidate was in force (a switchback runs both)
        self._slots(now)
        self._load_check(now)
        if self.mode == "off":
            self.state = "off"
        elif self.trial is not None:
            self._run_trial(now)
        else:
            self._observe(now)
        n = min(self.decision_count - first, len(self.decisions))
        return list(self.decisions)[len(self.decisions) - n:] if n else []

    def _frozen_now(self, now: float) -> None:
        if self.trial is not None:
            self._end_trial(now, "abort", f"frozen ({self.freeze.reason(now)})", write_back=True, gain=None)

    def _observe(self, now: float) -> None:
        if not self.started:
            self.state = "frozen" if self.freeze.reason(now) else "observe"
            return
        if self.obs is None:
            self.obs = self.m.open(max(now, self.changed_at + self.cfg.warmup_s), self.cfg.window_s, "incumbent")
        if self.m.evaluable(self.obs, now) and self.pending_classify is None:
            w, self.obs = self.obs, None
            self.m.close(w)
            s = self.m.score(w, now)
            self.counts["windows"] += 1
            if s.decided >= self.cfg.min_requests:
                self.baseline, self.baseline_epoch, self.proposable = s, self.epoch, True
                self.objective["incumbent"] = s.value
        reason = self.freeze.reason(now)
        if reason is not None:
            self.state = "frozen"
            return
        if now < self.cooldown_until:
            self.state = "cooldown"
            return
        self.state = "observe"
        if self.proposable and self.baseline is not None and self.baseline_epoch == self.epoch:
            self.proposable = False
            if self.jumped is not None and self._check_jump(now, self.baseline):
                return
            self._choose(now)

    def _choose(self, now: float) -> None:
        # local steps only while their realised losses of the last hour are within the budget
        arms = ["local"] if self.budget.allows(now) else []
        targets: dict[str, dict[str, float]] = {}
        # in a named phase the study's arm for it is never below the robust arm there (the robust trial is
        # feasible in every phase, so it competed for the phase's arm): offering both only re-tests what
        # the study ranked; the robust arm is for traffic the arms file does not name
        candidates = [(self.phase, self.arms.phases[self.phase])] if self.phase in self.arms.phases else \
            [("robust", self.arms.robust)]
        for name, arm in candidates:
            if arm is None:
                continue
            t = self.space.toward(self.incumbent, merge_params(self.incumbent, arm), self.cfg.arm_step_factor)
            if not self.space.same(t, self.incumbent):
                arms.append(f"arm:{name}")
                targets[f"arm:{name}"] = t
        if not arms:
            self._log(now, "hold", f"no local step: {self.budget.describe(now)}; no study arm to try")
            return
        choice, samples = self.bandit.choose(arms)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in samples.items())
        if choice is None:
            self._log(now, "hold", f"no arm likely to help (samples {shown}; threshold {self.cfg.explore_threshold})")
            return
        number = None
        if choice == "local":
            number, target = self.local.ask(self.incumbent)
        else:
            target = targets[choice]
        self._propose(now, choice, target, why=f"bandit drew {shown}", number=number)

    # ---- helpers ----------------------------------------------------------------------------------
    def _apply(self, now: float, setting: Mapping[str, float]) -> None:
        setting = self.space.check(dict(setting))
        if self.space.same(setting, self.applied):
            return
        self.applied = dict(setting)
        self._changed(now)
        if self.writer is not None and self.mode == "auto":
            self.writer(self.space.values(setting))

    def _changed(self, now: float) -> None:
        self.changed_at = now
        self.m.close(self.obs)
        self.obs = None

    def _log(self, now: float, action: str, reason: str, params: Mapping[str, float] | None = None) -> None:
        d = Decision(now, action, reason, self.state, self.mode, self.phase,
                     None if params is None else self.space.values(params))
        self.decisions.append(d)
        self.decision_count += 1
        if self.on_decision is not None:
            self.on_decision(d)
