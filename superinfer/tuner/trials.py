"""What the controller does with one candidate: start a switchback trial, switch its slots, guard it,
judge it, and end it (accept / reject / roll back / abort).

A mixin of :class:`~superinfer.tuner.controller.Controller` (it uses the controller's state, ``_apply``
and ``_log``); kept apart so each file has one job. The comparison is the switchback's
(``superinfer.tuner.switchback``): candidate slots against incumbent slots of the same trial.

Tests (``superinfer.tuner.stats``). With ``test_unit = "slot"`` (the default) the slots are the units:
each side's share over its slots with a cluster-robust variance, Student's t with Welch degrees of
freedom, nothing until each side has two slots with decided requests (the first C I I C block). With
``"request"``, one-sided two-proportion z-tests on the two sides' pooled requests, as if independent
(the first switchback version; its false-alarm rate under a queue that collapses slot by slot is far
above nominal, ``tests/tuner/test_switchback.py``).

* guard, at every tick: any tenant with ``guard_min_requests`` decided requests on both sides worse by
  more than ``guard_margin`` at ``guard_alpha`` -> roll back in that tick; tested twice, on the decided
  requests and provisionally (requests that met TTFT and still run counted as hits on both sides: the
  incumbent's slots come second, and their requests would otherwise wait for their finish to count),
  so the guard's false-alarm rate is at most ``2 guard_alpha``. It compares only the trial's own slots
  (an offline arm is no longer held to its study score while the incumbent side is empty: live traffic
  inherits a queue the study never saw, and that check rolled back good arms for it).
* verdict, once every slot has run and settled: superiority at ``alpha`` for a local step (unexplored:
  it must prove itself); for an offline study's arm (``arm_test``) either adopted unless significantly
  worse than the incumbent at ``alpha`` or worse by more than ``guard_margin`` on the point estimate
  (``unless_worse``, the default: the study is prior evidence for it, the trial only has to not
  contradict it), or non-inferiority within ``noninferiority_margin``
  (``noninferiority``: the trial must show it). A side with fewer than
  ``min_requests`` decided requests extends the trial once by as many slots again, then the trial is
  inconclusive and rejected.
"""

from __future__ import annotations

import math

from superinfer.tuner import stats
from superinfer.tuner.decisions import Trial
from superinfer.tuner.objective import Score
from superinfer.tuner.switchback import CANDIDATE, INCUMBENT, Switchback, combine


class TrialRunner:
    def _propose(self, now: float, arm: str, target: dict[str, float], why: str, number: int | None = None) -> None:
        factor = self.cfg.arm_step_factor if arm != "local" else 1.0
        target = self.space.toward(self.incumbent, target, factor)  # a second cap, whatever produced it
        if self.mode in ("shadow", "advise"):
            if number is not None:
                self.local.tell(number, None, False)
            self._would(now, f"trial {arm} ({why})", target)
            return
        if self.mode != "auto":
            return
        self.candidate = dict(target)
        self.m.close(self.obs)
        self.obs = None
        cfg = self.cfg
        sb = Switchback(cfg.switch_s, cfg.switch_warmup_s, cfg.switch_slots)
        expected = self.arms.robust.score if arm == "arm:robust" and self.arms.robust else \
            (self.arms.phases[arm[4:]].score if arm.startswith("arm:") and arm[4:] in self.arms.phases else None)
        self.trial = Trial(arm=arm, started=now, sb=sb, setting=dict(target), number=number,
                           previous=dict(self.incumbent), expected=expected,
                           baseline=None if self.baseline is None else self.baseline.value)
        self.state = "trial"
        self._log(now, "trial", f"{arm}: {why} (switchback: {sb.slots} slots of {sb.slot_s:g} s, "
                  f"warm-up {sb.warmup_s:g} s each)", target)
        self._switch(now)

    def _jump(self, now: float, phase: str, target: dict[str, float], score: float, replaced: float) -> None:
        """Adopt a phase's offline arm without a trial (``jump_gain``); the setting it replaces and the
        study's score for it there are kept for the check of the arm's first window (``_check_jump``)."""
        gain = f"the study's arm for phase {phase} scored {score:.4f} there against {replaced:.4f} for the incumbent"
        if self.mode != "auto":
            self._would(now, f"jump to arm:{phase} without a trial ({gain})", target)
            return
        self.jumped = (dict(self.incumbent), replaced, self.epoch, phase)
        self.incumbent = self.space.check(dict(target))
        self.baseline, self.proposable = None, False
        self.counts["jumps"] += 1
        self._apply(now, self.incumbent)
        self.cooldown_until = now + self.cfg.cooldown_s
        self.state = "cooldown"
        self._log(now, "jump", f"arm:{phase}: {gain} (gain {score - replaced:+.4f} >= jump_gain {self.cfg.jump_gain}): "
                  "adopted without a trial; its first window is checked against that", dict(self.incumbent))

    def _check_jump(self, now: float, live: Score) -> bool:
        """The first window after a jump: live below what the study expected of the setting the arm
        replaced contradicts the study, and that setting gets a trial (``revert:<phase>``, judged as an
        offline arm is: adopted unless worse). True if a trial started."""
        previous, replaced, epoch, phase = self.jumped
        self.jumped = None
        if epoch != self.epoch or live.value >= replaced:
            return False
        self._propose(now, f"revert:{phase}", previous,
                      why=f"the arm's first window {live.value:.4f} is below the study's {replaced:.4f} for the "
                          "setting it replaced")
        return self.trial is not None

    def _would(self, now: float, what: str, target: dict[str, float]) -> None:
        """Shadow / advise: log what auto would do (advise also publishes ``target`` as the candidate);
        nothing is written."""
        if self.mode == "advise":
            self.candidate = dict(target)
        self.cooldown_until = now + self.cfg.cooldown_s
        self._log(now, "advise" if self.mode == "advise" else "propose",
                  f"{self.mode}: would {what}; nothing written", target)

    def _switch(self, now: float) -> None:
        """Enter every slot that is due (a late tick skips none: each is entered, the last one wins)."""
        tr = self.trial
        while tr is not None and tr.sb.due(now):
            side = tr.sb.switch(now, self.m)
            self._apply(now, tr.setting if side == CANDIDATE else self.incumbent)

    def _scores(self, now: float, provisional: bool = False) -> tuple[Score, Score]:
        sb = self.trial.sb
        return sb.score(CANDIDATE, self.m, now, provisional), sb.score(INCUMBENT, self.m, now, provisional)

    def _run_trial(self, now: float) -> None:
        tr = self.trial
        cfg = self.cfg
        self.state = "trial"
        self._switch(now)
        cand, base = self._scores(now)
        for prov in (False, True):
            fired = self._guard(now, prov)
            if fired is not None:
                self._rollback(now, fired, cand, base)
                return
        if not tr.sb.evaluable(self.m, now):
            return
        if min(cand.decided, base.decided) < cfg.min_requests:
            if not tr.extended:
                tr.extended = True
                tr.sb.extend(cfg.switch_slots, now)
                self._switch(now)
                return
            self._end_trial(now, "reject", f"inconclusive: {cand.decided}/{base.decided} decided requests "
                            f"(< {cfg.min_requests})", write_back=True, gain=None)
            return
        self.objective["candidate"], self.objective["incumbent"] = cand.value, base.value
        self.counts["windows"] += 1
        ok, test = self._verdict(now, cand, base, tr.arm != "local")
        why = (f"{cand.value:.4f} vs {base.value:.4f} over {cand.decided}/{base.decided} requests (switchback, "
               f"{tr.sb.k} slots), {test} (one-sided alpha {cfg.alpha})"
               + (f"; the study's score {tr.expected:.4f}" if tr.expected is not None else ""))
        self._end_trial(now, "accept" if ok else "reject", why, write_back=not ok, gain=cand.value - base.value,
                        scores=(cand, base))

    def _verdict(self, now: float, cand: Score, base: Score, arm: bool) -> tuple[bool, str]:
        """Accept? and the test in words: superiority for a local step; for an offline arm ``arm_test``."""
        cfg, sb, w = self.cfg, self.trial.sb, self.m.weights
        unless_worse = arm and cfg.arm_test == "unless_worse"
        margin = cfg.noninferiority_margin if arm else 0.0
        slot = cfg.test_unit == "slot"
        if slot:
            cs, bs = sb.slot_scores(CANDIDATE, self.m, now), sb.slot_scores(INCUMBENT, self.m, now)
            if unless_worse:
                bad, z, df = stats.slot_worse(cs, bs, w, cfg.alpha)
            else:
                ok, z, df = stats.slot_better(cs, bs, w, cfg.alpha, margin)
            unit = f"slot-level t (df {df:.1f})"
        else:
            if unless_worse:
                bad, z = stats.worse(cand, base, cfg.alpha)
            else:
                ok, z = stats.not_worse(cand, base, cfg.alpha, margin) if arm else stats.better(cand, base, cfg.alpha)
            unit = "request-level z"
        if unless_worse:
            # worse by more than the guard's margin on the point estimate is a contradiction too: with 4
            # slots a side the test alone adopted arms 10 pp worse in half their trials (test_switchback)
            far = cand.value < base.value - cfg.guard_margin
            return not (bad or far), (f"study arm, adopted unless worse: {unit} of incumbent - arm {z:.2f}"
                                      f"{' (significant)' if bad else ''}, point estimate {cand.value - base.value:+.4f}"
                                      f" (rejected below -{cfg.guard_margin})")
        test = f"non-inferiority within {margin}" if arm else "superiority"
        return ok, f"{test}, {unit} {z:.2f}"

    def _guard(self, now: float, provisional: bool) -> str | None:
        """Why the guard fires now (``provisional``: running requests that met TTFT count as hits), or None."""
        cfg, sb = self.cfg, self.trial.sb
        kind = "provisional (running requests that met TTFT as hits)" if provisional else "decided"
        if cfg.test_unit == "slot":
            c = sb.slot_scores(CANDIDATE, self.m, now, provisional)
            b = sb.slot_scores(INCUMBENT, self.m, now, provisional)
            tenant, t, df = stats.slot_guard(c, b, self.m.weights, cfg.guard_alpha, cfg.guard_margin,
                                             cfg.guard_min_requests)
            crit = stats.t_quantile(1 - cfg.guard_alpha, df) if tenant is not None else math.nan
            stat = f"slot-level t {t:.2f} > {crit:.2f}, df {df:.1f}"
        else:
            c, b = self._scores(now, provisional)
            tenant, t = stats.guard_fires(c, b, cfg.guard_alpha, cfg.guard_margin, cfg.guard_min_requests)
            stat = f"z {t:.2f} > {stats.z_quantile(1 - cfg.guard_alpha):.2f}"
        if tenant is None:
            return None
        cs, bs = self._scores(now, provisional)
        return (f"guard: tenant {tenant} at {cs.tenant(tenant)[0]:.3f} vs the incumbent's {bs.tenant(tenant)[0]:.3f}, "
                f"{kind} ({stat}, margin {cfg.guard_margin})")

    def _rollback(self, now: float, why: str, cand: Score, base: Score | None) -> None:
        self.freeze.rolled_back(now)
        self.counts["rollbacks"]["guard"] = self.counts["rollbacks"].get("guard", 0) + 1
        gain = None if base is None else cand.value - base.value
        self._end_trial(now, "rollback", why, write_back=True, gain=gain)

    def _charge(self, now: float, tr: Trial, provisional: bool) -> None:
        """Charge a local trial's realised loss to the exploration budget: the incumbent's baseline
        before it against what both sides served, one score over all their slots (provisional when the
        trial ended before its verdict)."""
        served = combine(tr.sb.windows[CANDIDATE] + tr.sb.windows[INCUMBENT], self.m, now, provisional)
        self.budget.charge(now, tr.baseline, served.value, now - tr.started)

    def _end_trial(self, now: float, outcome: str, reason: str, *, write_back: bool, gain: float | None,
                   scores: tuple[Score, Score] | None = None) -> None:
        tr = self.trial
        if tr is None:
            return
        if tr.arm == "local":
            self._charge(now, tr, provisional=scores is None)
        self.trial = None
        self.counts["trials"][outcome] = self.counts["trials"].get(outcome, 0) + 1
        if tr.number is not None:
            self.local.tell(tr.number, gain, outcome == "accept")
        if outcome in ("accept", "reject", "rollback") and tr.arm in self.bandit.arms:
            self.bandit.update(tr.arm, outcome == "accept")
        tr.sb.close(self.m)
        if outcome == "accept":
            self.incumbent = dict(tr.setting)
            self._apply(now, self.incumbent)
        elif write_back:
            self._apply(now, self.incumbent)
        # a verdict measured both sides in this traffic: the next proposal needs no fresh baseline
        if scores is not None:
            self.baseline, self.baseline_epoch = scores[0] if outcome == "accept" else scores[1], self.epoch
            self.proposable = True
        else:
            self.proposable = False
        self.candidate = None
        self.cooldown_until = now + self.cfg.cooldown_s
        self.state = "cooldown"
        self._log(now, outcome, f"{tr.arm}: {reason}", dict(self.applied))
