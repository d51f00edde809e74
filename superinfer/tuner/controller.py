"""The online tuner: a clock-agnostic controller fed request outcomes and workload features.

It never reads a clock: every method takes ``now`` (seconds on the caller's clock: the daemon's
monotonic time, or the twin's virtual time), and request times are on the same clock. It writes params
only through ``writer`` (the daemon passes the path ``PUT /v1/params`` takes, with source ``tuner``).

State machine (``state``): ``observe`` (the incumbent runs; a window after each change's warm-up
measures it: the *baseline*) -> propose (the bandit picks an arm or holds) -> ``trial`` (the candidate
runs for a warm-up and a window) -> accept (it becomes the incumbent) / reject (the incumbent is written
back) / roll back (the guard fired during the trial: written back at once) -> ``cooldown`` -> observe.
``frozen`` while :class:`~superinfer.tuner.freeze.Freeze` says so (a running trial is written back);
``off`` in mode off. Modes: ``shadow`` proposes and logs, writes nothing; ``advise`` also publishes the
candidate as a recommendation; ``auto`` runs trials. A Page-Hinkley alarm on the workload features
(``superinfer.tuner.phase``) aborts a running trial, forgets the baseline, resets the bandit, measures
the incumbent in the new traffic for ``classify_slots`` slots, names the phase from the arms file and, in
``auto``, jumps to that phase's arm (a trial of it, tested for non-inferiority against those slots).

Invariants: every setting written is within ``PARAM_BOUNDS`` and moves no tuned knob by more than its
step cap from the incumbent (``KnobSpace``); at most one trial runs at a time; a rollback writes the
incumbent in the same :meth:`tick` in which the guard fired.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping

from superinfer.tuner import stats
from superinfer.tuner.arms import Arms, empty_arms, merge_params
from superinfer.tuner.bandit import DiscountedThompson
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.controls import OperatorControls
from superinfer.tuner.tracking import TrafficTracking
from superinfer.tuner.decisions import Decision, Trial
from superinfer.tuner.freeze import Freeze
from superinfer.tuner.local import LocalSearch
from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Window
from superinfer.tuner.phase import PageHinkley
from superinfer.tuner.space import KnobSpace

Writer = Callable[[dict[str, float | int]], None]
PRIOR_LOCAL, PRIOR_PHASE, PRIOR_ROBUST = (1.0, 1.0), (4.0, 1.0), (2.0, 1.0)


class Controller(OperatorControls, TrafficTracking):
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
        self.local = LocalSearch(self.space, cfg.trust_region, cfg.seed, storage, study_name)
        self.on_decision = on_decision
        self.mode = cfg.mode
        self.state = "off" if self.mode == "off" else "observe"
        self.decisions: deque[Decision] = deque(maxlen=200)
        self.decision_count = 0
        self.trial: Trial | None = None
        self.candidate: dict[str, float] | None = None  # the trial's setting, or advise's recommendation
        self.baseline: Window | None = None
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
        self.counts = {"trials": {}, "rollbacks": {}, "phase_changes": 0, "windows": 0}
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
            if self.trial is not None:
                self.explore_s += dt
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
                self.baseline, self.baseline_epoch, self.proposable = w, self.epoch, True
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
            self._choose(now)

    def _choose(self, now: float) -> None:
        arms = ["local"]
        targets: dict[str, dict[str, float]] = {}
        candidates = [("robust", self.arms.robust)] + ([(self.phase, self.arms.phases[self.phase])]
                                                      if self.phase in self.arms.phases else [])
        for name, arm in candidates:
            if arm is None:
                continue
            t = self.space.toward(self.incumbent, merge_params(self.incumbent, arm))
            if not self.space.same(t, self.incumbent):
                arms.append(f"arm:{name}")
                targets[f"arm:{name}"] = t
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
        self._propose(now, choice, target, why=f"bandit drew {shown}", base=self.baseline, number=number)

    def _propose(self, now: float, arm: str, target: dict[str, float], why: str, base: Window | None,
                 number: int | None = None) -> None:
        target = self.space.toward(self.incumbent, target)  # a second cap, whatever produced it
        if self.mode in ("shadow", "advise"):
            if number is not None:
                self.local.tell(number, None, False)
            if self.mode == "advise":
                self.candidate = dict(target)
            self.cooldown_until = now + self.cfg.cooldown_s
            self._log(now, "advise" if self.mode == "advise" else "propose",
                      f"{self.mode}: would trial {arm} ({why}); nothing written", target)
            return
        if self.mode != "auto":
            return
        self.candidate = dict(target)
        if base is not None and base is self.obs:
            self.obs = None  # the baseline keeps collecting outcomes until the trial ends
        self._apply(now, target)
        w = self.m.open(now + self.cfg.warmup_s, self.cfg.window_s, "candidate")
        expected = self.arms.robust.score if arm == "arm:robust" and self.arms.robust else \
            (self.arms.phases[arm[4:]].score if arm.startswith("arm:") and arm[4:] in self.arms.phases else None)
        self.trial = Trial(arm=arm, started=now, window=w, base=base, number=number, previous=dict(self.incumbent),
                           expected=expected)
        self.state = "trial"
        self._log(now, "trial", f"{arm}: {why}", target)

    def _run_trial(self, now: float) -> None:
        tr = self.trial
        cfg = self.cfg
        self.state = "trial"
        cand = self.m.score(tr.window, now)
        base = self.m.score(tr.base, now) if tr.base is not None else None
        if (base is None or base.decided < cfg.guard_min_requests) and tr.expected is not None:
            low, z = stats.below_expected(cand, tr.expected, cfg.guard_alpha, cfg.guard_margin, cfg.guard_min_requests)
            if low:
                self._rollback(now, f"guard: {cand.value:.3f} is below the study's {tr.expected:.3f} for this arm "
                               f"(z {z:.2f}, margin {cfg.guard_margin}; no baseline in this traffic)", cand, None)
                return
        if base is not None:
            tenant, z = stats.guard_fires(cand, base, cfg.guard_alpha, cfg.guard_margin, cfg.guard_min_requests)
            if tenant is not None:
                ct, bt = cand.tenant(tenant)[0], base.tenant(tenant)[0]
                self._rollback(now, f"guard: tenant {tenant} at {ct:.3f} vs the incumbent's {bt:.3f} "
                               f"(z {z:.2f} > {stats.z_quantile(1 - cfg.guard_alpha):.2f}, margin {cfg.guard_margin})",
                               cand, base)
                return
        if not self.m.evaluable(tr.window, now):
            return
        if cand.decided < cfg.min_requests:
            if not tr.extended:
                tr.extended = True
                tr.window.end += cfg.window_s
                return
            self._end_trial(now, "reject", f"inconclusive: {cand.decided} decided requests (< {cfg.min_requests})",
                            write_back=True, gain=None)
            return
        self.objective["candidate"] = cand.value
        self.counts["windows"] += 1
        if base is None or base.decided < cfg.min_requests // 2:
            low = tr.expected is None or stats.below_expected(cand, tr.expected, cfg.alpha, cfg.noninferiority_margin,
                                                              cfg.guard_min_requests)[0]
            why = (f"no baseline in this traffic ({0 if base is None else base.decided} < {cfg.min_requests // 2} "
                   f"decided); {cand.value:.4f} against the study's {tr.expected} for this arm")
            self._end_trial(now, "reject" if low else "accept", why, write_back=low, gain=None)
            return
        if tr.arm.startswith("arm:"):
            ok, z = stats.not_worse(cand, base, cfg.alpha, cfg.noninferiority_margin)
            test = f"non-inferiority within {cfg.noninferiority_margin}"
        else:
            ok, z = stats.better(cand, base, cfg.alpha)
            test = "superiority"
        why = (f"{cand.value:.4f} vs {base.value:.4f} over {cand.decided}/{base.decided} requests, {test} z {z:.2f} "
               f"(one-sided alpha {cfg.alpha})")
        self._end_trial(now, "accept" if ok else "reject", why, write_back=not ok, gain=cand.value - base.value)

    def _rollback(self, now: float, why: str, cand, base) -> None:
        self.freeze.rolled_back(now)
        self.counts["rollbacks"]["guard"] = self.counts["rollbacks"].get("guard", 0) + 1
        gain = None if base is None else cand.value - base.value
        self._end_trial(now, "rollback", why, write_back=True, gain=gain)

    def _end_trial(self, now: float, outcome: str, reason: str, *, write_back: bool, gain: float | None) -> None:
        tr, self.trial = self.trial, None
        if tr is None:
            return
        self.counts["trials"][outcome] = self.counts["trials"].get(outcome, 0) + 1
        if tr.number is not None:
            self.local.tell(tr.number, gain, outcome == "accept")
        if outcome in ("accept", "reject", "rollback"):
            self.bandit.update(tr.arm, outcome == "accept")
        self.m.close(tr.base if tr.base is not self.baseline else None)
        if outcome == "accept":
            self.incumbent = dict(self.applied)
            self.m.close(tr.window)
            self.baseline, self.baseline_epoch, self.proposable = tr.window, self.epoch, True
        else:
            self.m.close(tr.window)
            if write_back:
                self._apply(now, self.incumbent)
            self.proposable = outcome == "reject" and self.baseline is not None
        self.candidate = None
        self.cooldown_until = now + self.cfg.cooldown_s
        self.state = "cooldown"
        self._log(now, outcome, f"{tr.arm}: {reason}", dict(self.applied))

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
