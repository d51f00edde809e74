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
(``superinfer.tuner.phase``) aborts a running trial, forgets the baseline, resets the bandit, goes back to
the arms file's robust setting (``change_fallback``), measures the incumbent in the new traffic for
``classify_slots`` slots, names the phase from the arms file and, in
``auto``, goes to that phase's arm: at once (a *jump*) when the study measured a gain of at least
``jump_gain`` over the incumbent's setting in that phase, the arm's first window then checked against the
study's score for the replaced setting (below it: a ``revert:<phase>`` trial of that setting); else by a
switchback trial of the arm (adopted unless the trial shows it worse).

Invariants: every setting written is within ``PARAM_BOUNDS``, and is either the incumbent or a candidate
(or jumped-to arm) that moves no tuned knob by more than its step cap from the incumbent
(``arm_step_factor`` caps for an offline study's arm and a revert of one; ``KnobSpace``); at most one trial runs at a time; a rollback writes the incumbent in
the same :meth:`tick` in which the guard fired.

Collaborators, each owning its state and returning what it found; the controller acts on them (the
mode, the state, the incumbent, writes and the decision log are its own): :class:`TrafficTracker`
(``tracking``: closed feature slots -> a change or a phase name; the load), :class:`BaselineWatch`
(``baseline``: the incumbent's observation window -> the baseline), :class:`Trials` (``trials``: the
running trial -> the settings of its slots, a :class:`Verdict`), :class:`Chooser` (``chooser``: bandit,
local search, budget -> a :class:`Proposal`, a :class:`Hold` or a :class:`Jump`). :meth:`tick` reads
measure (traffic, load) -> judge (the trial) or observe -> decide -> write.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from superinfer.tuner.arms import Arms, empty_arms
from superinfer.tuner.bandit import DiscountedThompson
from superinfer.tuner.baseline import BaselineWatch
from superinfer.tuner.budget import ExplorationBudget
from superinfer.tuner.chooser import Chooser, Hold, Jump, Proposal
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.decisions import Decision, Trial
from superinfer.tuner.fleet import Fleet
from superinfer.tuner.freeze import Freeze
from superinfer.tuner.local import LocalSearch
from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Score
from superinfer.tuner.operator import OperatorControls
from superinfer.tuner.space import KnobSpace
from superinfer.tuner.tracking import Load, PhaseNamed, TrafficChange, TrafficTracker
from superinfer.tuner.trials import Trials, Verdict

Writer = Callable[[dict[str, float | int]], None]
_CURRENT: Any = object()  # _log's default phase: the one the tracker names now


class Controller(OperatorControls):
    """See the module docstring. ``tenants``: name -> (TTFT SLO in s, weight); ``incumbent``: the live
    knob values at start (every tuned knob).

    It owns what it acts on: ``mode``, ``state``, ``incumbent``, ``applied`` (the setting in force: the
    incumbent whenever no trial runs), ``candidate``, ``cooldown_until``, the counters and the decision
    log; the rest is its collaborators' (read-only properties: ``trial``, ``baseline``, ``epoch``,
    ``phase``, ``jumped``, ``bandit``, ``budget``, ``local``). Every write goes through :meth:`_apply`
    (and reaches ``writer`` only in ``auto``), every decision through :meth:`_log`."""

    def __init__(self, cfg: TunerConfig, tenants: Mapping[str, tuple[float, float]], incumbent: Mapping[str, float],
                 *, writer: Writer | None = None, arms: Arms | None = None, now: float = 0.0,
                 storage: str | None = None, study_name: str = "superinfer-online",
                 on_decision: Callable[[Decision], None] | None = None, fleet: Fleet | None = None) -> None:
        self.cfg = cfg
        self.space = KnobSpace(cfg.knobs, cfg.step_caps, cfg.b_xfer_max)
        # a knob the space leaves out (b_xfer with no host tier) is not the tuner's: not in its incumbent
        self.incumbent = self.space.check({k: v for k, v in incumbent.items() if k not in self.space.dropped})
        self.applied = dict(self.incumbent)
        self.writer = writer
        self.arms = arms or empty_arms()
        self.m = Measurements(tenants, cfg.slot_s, cfg.settle_s, cfg.max_settle_s, now)
        self.freeze = Freeze(cfg.max_rollbacks_per_hour)
        self.traffic = TrafficTracker(cfg, self.arms)
        self.watch = BaselineWatch(cfg, self.m, now)
        self.trials = Trials(cfg, self.m)
        self.chooser = Chooser(cfg, self.space, self.arms, storage, study_name, fleet)
        self.on_decision = on_decision
        self.mode = cfg.mode
        self.state = "off" if self.mode == "off" else "observe"
        self.decisions: deque[Decision] = deque(maxlen=200)
        self.decision_count = 0
        self.candidate: dict[str, float] | None = None  # the trial's setting, or advise's recommendation
        self.cooldown_until = now
        self.counts = {"trials": {}, "rollbacks": {}, "phase_changes": 0, "windows": 0, "jumps": 0}
        self.objective: dict[str, float | None] = {"incumbent": None, "candidate": None}
        self.explore_s = 0.0
        self.observed_s = 0.0
        self._last_tick = now

    # ---- what the collaborators own, read-only --------------------------------------------------
    @property
    def trial(self) -> Trial | None:
        return self.trials.running

    @property
    def baseline(self) -> Score | None:
        return self.watch.score

    @property
    def epoch(self) -> int:
        return self.traffic.epoch

    @property
    def phase(self) -> str | None:
        return self.traffic.phase

    @property
    def jumped(self) -> tuple[dict[str, float], float, int, str] | None:
        return self.chooser.jumped

    @property
    def bandit(self) -> DiscountedThompson:
        return self.chooser.bandit

    @property
    def budget(self) -> ExplorationBudget:
        return self.chooser.budget

    @property
    def local(self) -> LocalSearch:
        return self.chooser.local

    # ---- the feed (see superinfer.tuner.objective for what each means) ----------------------------
    def arrival(self, t: float, tenant: str, prompt_tokens: int) -> None:
        self.watch.arrival(t)
        self.m.arrival(t, tenant, prompt_tokens)

    def first_token(self, t_arr: float, tenant: str, ttft_ok: bool) -> None:
        self.m.first_token(t_arr, tenant, ttft_ok)

    def finished(self, t_arr: float, tenant: str, ttft_ok: bool | None, tbt_ok: bool, output_tokens: int) -> None:
        self.m.finished(t_arr, tenant, ttft_ok, tbt_ok, output_tokens)

    # ---- the loop ---------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Decision]:
        """Advance to ``now``: measure (the traffic's closed slots, the load), then judge the running
        trial, or observe the incumbent and decide what to try; each step writes and logs what it
        decided. Returns the decisions made."""
        first = self.decision_count
        self._account(now)
        for features in self.m.closed_slots(now):
            self._on_traffic(now, self.traffic.slot(features, self.m.arrivals_total))
        self._on_load(now, self.traffic.load())
        if self.mode == "off":
            self.state = "off"
        elif self.trial is not None:
            self._judge(now)
        else:
            self._observe(now)
        n = min(self.decision_count - first, len(self.decisions))
        return list(self.decisions)[len(self.decisions) - n:] if n else []

    def _account(self, now: float) -> None:
        dt = max(now - self._last_tick, 0.0)
        self._last_tick = now
        if self.mode != "off":
            self.observed_s += dt
            if self.trial is not None and not self.space.same(self.applied, self.incumbent):
                self.explore_s += dt  # time the candidate was in force (a switchback runs both)

    def _on_traffic(self, now: float, ev: TrafficChange | PhaseNamed | None) -> None:
        if isinstance(ev, TrafficChange):
            self._traffic_changed(now, ev)
        elif isinstance(ev, PhaseNamed):
            self._phase_named(now, ev)

    def _traffic_changed(self, now: float, ev: TrafficChange) -> None:
        """Abort the trial (logged in the phase it ran in), forget the baseline, fall back to the robust
        setting (``change_fallback``), measure afresh."""
        self.counts["phase_changes"] += 1
        self.chooser.bandit.reset()
        if self.trial is not None:
            self._end_trial(now, Verdict.abort("traffic changed during the trial"), phase=ev.before)
        self.watch.restart(now)
        self._log(now, "phase", "traffic changed: " + ", ".join(ev.alarms))
        target = self.chooser.fallback(self.incumbent)
        if target is None or self.mode == "off" or self.freeze.reason(now):
            return
        if self.mode != "auto":
            self._would(now, "fall back to arm:robust (traffic changed)", target)
            return
        self.incumbent = self.space.check(dict(target))
        self._apply(now, self.incumbent)
        self._log(now, "fallback", "traffic changed: the study's robust setting until the new phase is named",
                  dict(self.incumbent))

    def _phase_named(self, now: float, ev: PhaseNamed) -> None:
        """Log a new name; at a settling classification go to the phase's arm (a jump or a trial)."""
        if ev.renamed:
            self._log(now, "phase", f"phase {ev.phase or 'unknown'} (distance {ev.distance:.2f})")
        if not ev.settle or ev.phase is None or self.mode == "off" or self.freeze.reason(now):
            return
        move = self.chooser.to_phase(ev.phase, self.incumbent)
        if isinstance(move, Jump):
            self._jump(now, move)
        elif move is not None:
            self._propose(now, move)

    def _on_load(self, now: float, load: Load) -> None:
        self.watch.window_s = self.trials.window_s = load.window_s  # sized to the rate (tuner.sparse)
        if load.low == self.freeze.low_load:
            return
        self.freeze.low_load = load.low
        if load.low:
            self._log(now, "freeze", f"low_load: {load.rate:.3g} req/s fills the longest window "
                      f"({self.cfg.max_window_s:g} s) with fewer than {self.cfg.min_requests} requests")
            self._frozen_now(now)
        else:
            self._log(now, "unfreeze", f"load back: {load.rate:.3g} req/s")

    def _judge(self, now: float) -> None:
        """Judge the running trial: enter its due slots, then act on its verdict (if any)."""
        self.state = "trial"
        self._enter_slots(now)
        verdict = self.trials.judge(now)
        if verdict is None:
            self._enter_slots(now)  # an inconclusive trial extended: its next slot starts now
        else:
            self._end_trial(now, verdict)

    def _observe(self, now: float) -> None:
        """Measure the incumbent; unless frozen or cooling down, decide from a fresh baseline and act."""
        if not self.watch.started:
            self.state = "frozen" if self.freeze.reason(now) else "observe"
            return
        measured = self.watch.measure(now, self.epoch, self.traffic.classifying)
        if measured is not None:
            self.counts["windows"] += 1
            if measured.kept:
                self.objective["incumbent"] = measured.score.value
        if self.freeze.reason(now) is not None:
            self.state = "frozen"
            return
        if now < self.cooldown_until:
            self.state = "cooldown"
            return
        self.state = "observe"
        baseline = self.watch.take(self.epoch)
        if baseline is None:
            return
        if self.chooser.jumped is not None:
            revert = self.chooser.check_jump(baseline, self.epoch)
            if revert is not None and self._propose(now, revert):
                return
        choice = self.chooser.choose(now, self.incumbent, self.phase)
        if isinstance(choice, Hold):
            self._log(now, "hold", choice.reason)
        else:
            self._propose(now, choice)

    # ---- acting on a decision: every write and every log line -------------------------------------
    def _propose(self, now: float, p: Proposal) -> bool:
        """Start a trial of ``p`` (auto), or log what auto would do (shadow / advise); True if a trial started."""
        factor = self.cfg.arm_step_factor if p.arm != "local" else 1.0
        target = self.space.toward(self.incumbent, p.target, factor)  # a second cap, whatever produced it
        if self.mode in ("shadow", "advise"):
            self.chooser.drop(p.number)
            self._would(now, f"trial {p.arm} ({p.why})", target)
            return False
        if self.mode != "auto":
            return False
        self.candidate = dict(target)
        self.watch.drop_window()
        tr = self.trials.start(now, p.arm, target, p.number, self.incumbent, self.chooser.expected(p.arm),
                               None if self.baseline is None else self.baseline.value)
        sb = tr.sb
        self.state = "trial"
        self._log(now, "trial", f"{p.arm}: {p.why} (switchback: {sb.slots} slots of {sb.slot_s:g} s, "
                  f"warm-up {sb.warmup_s:g} s each)", target)
        self._enter_slots(now)
        return True

    def _jump(self, now: float, j: Jump) -> None:
        """Adopt a phase's offline arm without a trial (``jump_gain``); the chooser keeps the setting it
        replaces and the study's score for it for the check of the arm's first window."""
        gain = (f"the study's arm for phase {j.phase} scored {j.score:.4f} there against {j.replaced:.4f} "
                "for the incumbent")
        if self.mode != "auto":
            self._would(now, f"jump to arm:{j.phase} without a trial ({gain})", j.target)
            return
        self.chooser.jumped_from(self.incumbent, j, self.epoch)
        self.incumbent = self.space.check(dict(j.target))
        self.watch.forget()
        self.counts["jumps"] += 1
        self._apply(now, self.incumbent)
        self.cooldown_until = now + self.cfg.cooldown_s
        self.state = "cooldown"
        self._log(now, "jump", f"arm:{j.phase}: {gain} (gain {j.score - j.replaced:+.4f} >= jump_gain "
                  f"{self.cfg.jump_gain}): adopted without a trial; its first window is checked against that",
                  dict(self.incumbent))

    def _would(self, now: float, what: str, target: dict[str, float]) -> None:
        """Shadow / advise: log what auto would do (advise also publishes ``target`` as the candidate);
        nothing is written."""
        if self.mode == "advise":
            self.candidate = dict(target)
        self.cooldown_until = now + self.cfg.cooldown_s
        self._log(now, "advise" if self.mode == "advise" else "propose",
                  f"{self.mode}: would {what}; nothing written", target)

    def _enter_slots(self, now: float) -> None:
        for setting in self.trials.switch(now, self.incumbent):
            self._apply(now, setting)

    def _end_trial(self, now: float, v: Verdict, phase: str | None = _CURRENT) -> None:
        """End the running trial with verdict ``v``: count it, let the chooser learn, write the winner
        (or the incumbent back), keep the verdict's measurement as the baseline, cool down."""
        tr, served = self.trials.end(now, provisional=v.scores is None)
        if v.outcome == "rollback":
            self.freeze.rolled_back(now)
            self.counts["rollbacks"]["guard"] = self.counts["rollbacks"].get("guard", 0) + 1
        if v.scores is not None:
            self.objective["candidate"], self.objective["incumbent"] = v.scores[0].value, v.scores[1].value
            self.counts["windows"] += 1
        self.counts["trials"][v.outcome] = self.counts["trials"].get(v.outcome, 0) + 1
        self.chooser.learn(now, tr, v.outcome, v.gain, served, v.scores, self.phase if phase is _CURRENT else phase)
        if v.outcome == "accept":
            self.incumbent = dict(tr.setting)
            self._apply(now, self.incumbent)
        elif v.write_back:
            self._apply(now, self.incumbent)
        # a verdict measured both sides in this traffic: the next proposal needs no fresh baseline
        if v.scores is not None:
            self.watch.measured(v.scores[0] if v.outcome == "accept" else v.scores[1], self.epoch)
        else:
            self.watch.spent()
        self.candidate = None
        self.cooldown_until = now + self.cfg.cooldown_s
        self.state = "cooldown"
        self._log(now, v.outcome, f"{tr.arm}: {v.reason}", dict(self.applied), phase)

    def _frozen_now(self, now: float) -> None:
        if self.trial is not None:
            self._end_trial(now, Verdict.abort(f"frozen ({self.freeze.reason(now)})"))

    def _apply(self, now: float, setting: Mapping[str, float]) -> None:
        setting = self.space.check(dict(setting))
        if self.space.same(setting, self.applied):
            return
        self.applied = dict(setting)
        self.watch.changed(now)
        if self.writer is not None and self.mode == "auto":
            self.writer(self.space.values(setting))

    def _log(self, now: float, action: str, reason: str, params: Mapping[str, float] | None = None,
             phase: str | None = _CURRENT) -> None:
        d = Decision(now, action, reason, self.state, self.mode, self.phase if phase is _CURRENT else phase,
                     None if params is None else self.space.values(params))
        self.decisions.append(d)
        self.decision_count += 1
        if self.on_decision is not None:
            self.on_decision(d)

    def stop(self, now: float) -> None:
        """Shut down: a running trial is written back to the incumbent."""
        if self.trial is not None:
            self._end_trial(now, Verdict.abort("tuner stopping"))
        self.local.abandon()
