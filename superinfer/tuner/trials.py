"""The running trial: start a switchback trial, enter its slots, guard it and judge it.

:class:`Trials` owns the running :class:`~superinfer.tuner.decisions.Trial` and returns what the
controller must act on: the settings each entered slot needs (:meth:`Trials.switch`) and a
:class:`Verdict` (:meth:`Trials.judge`: accept / reject / roll back); the controller writes them, and
the learning from a verdict (bandit, local search, budget) is the chooser's. The comparison is the
switchback's (``superinfer.tuner.switchback``): candidate slots against incumbent slots of the same trial.

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
* futility, at every tick of a local step once the first C I I C block is in (slot 4 entered) and each
  side has ``guard_min_requests`` decided requests: a candidate more than ``futility_margin`` below the
  incumbent on the point estimate is rejected at once. To be accepted it would need its second block to
  beat the incumbent's by more than that margin and then pass the superiority test: the look can only turn
  an accept into a reject, never add one, and it stops a step that is collapsing a queue at half its cost.
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
from collections.abc import Mapping
from dataclasses import dataclass

from superinfer.tuner import stats
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.decisions import Trial
from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Score
from superinfer.tuner.sparse import switch_s
from superinfer.tuner.switchback import CANDIDATE, INCUMBENT, Switchback, combine


@dataclass(frozen=True)
class Verdict:
    """How a trial ends: ``outcome`` (``accept``, ``reject``, ``rollback``, ``abort``) and why;
    ``write_back``: the incumbent is written again (an accepted candidate is written regardless);
    ``gain``: candidate minus incumbent (None when not measured); ``scores``: (candidate, incumbent)
    when the trial ran to its verdict (then either side's score may serve as the next baseline)."""

    outcome: str
    reason: str
    write_back: bool
    gain: float | None = None
    scores: tuple[Score, Score] | None = None

    @classmethod
    def abort(cls, reason: str, write_back: bool = True) -> Verdict:
        return cls("abort", reason, write_back)


class Trials:
    """The running trial (``running``, None when none), its slots, guard and verdict.

    Invariants: at most one trial runs; its slot windows are open in the shared
    :class:`~superinfer.tuner.measure.Measurements` from its start until :meth:`end`, which closes
    them; every due slot is entered, in order (:meth:`switch`); :meth:`judge` fires the guard before
    anything else, and returns a verdict other than a rollback only once every slot has run and
    settled; a trial is extended at most once. It writes nothing: the settings and the verdict are
    returned to the controller."""

    def __init__(self, cfg: TunerConfig, m: Measurements) -> None:
        self.cfg, self.m = cfg, m
        self.running: Trial | None = None
        self.window_s = cfg.window_s  # each side's counted arrivals in the next trial (superinfer.tuner.sparse)

    def start(self, now: float, arm: str, setting: Mapping[str, float], number: int | None,
              incumbent: Mapping[str, float], expected: float | None, baseline: float | None) -> Trial:
        """Start a switchback trial of ``setting`` (already within the step caps) against ``incumbent``;
        its first slot is entered by the next :meth:`switch`."""
        cfg = self.cfg
        sb = Switchback(switch_s(cfg, self.window_s), cfg.switch_warmup_s, cfg.switch_slots)
        self.running = Trial(arm=arm, started=now, sb=sb, setting=dict(setting), number=number,
                             previous=dict(incumbent), expected=expected, baseline=baseline)
        return self.running

    def switch(self, now: float, incumbent: Mapping[str, float]) -> list[Mapping[str, float]]:
        """Enter every slot that is due; the setting each needs, in order (a late tick skips none: each
        is entered, the last one wins)."""
        tr, out = self.running, []
        while tr is not None and tr.sb.due(now):
            side = tr.sb.switch(now, self.m)
            out.append(tr.setting if side == CANDIDATE else incumbent)
        return out

    def scores(self, now: float, provisional: bool = False) -> tuple[Score, Score]:
        """(candidate, incumbent) over the running trial's slots so far."""
        sb = self.running.sb
        return sb.score(CANDIDATE, self.m, now, provisional), sb.score(INCUMBENT, self.m, now, provisional)

    def judge(self, now: float) -> Verdict | None:
        """The running trial's verdict at ``now``, or None while it runs on (an inconclusive trial is
        extended once: its next slot is then due at once)."""
        tr = self.running
        cfg = self.cfg
        cand, base = self.scores(now)
        for prov in (False, True):
            fired = self._guard(now, prov)
            if fired is not None:
                return Verdict("rollback", fired, True, cand.value - base.value)
        futile = self._futility(cand, base)
        if futile is not None:
            return Verdict("reject", futile, True, cand.value - base.value)
        if not tr.sb.evaluable(self.m, now):
            return None
        if min(cand.decided, base.decided) < cfg.min_requests:
            if not tr.extended:
                tr.extended = True
                tr.sb.extend(cfg.switch_slots, now)
                return None
            return Verdict("reject", f"inconclusive: {cand.decided}/{base.decided} decided requests "
                           f"(< {cfg.min_requests})", True)
        ok, test = self._verdict(now, cand, base, tr.arm != "local")
        why = (f"{cand.value:.4f} vs {base.value:.4f} over {cand.decided}/{base.decided} requests (switchback, "
               f"{tr.sb.k} slots), {test} (one-sided alpha {cfg.alpha})"
               + (f"; the study's score {tr.expected:.4f}" if tr.expected is not None else ""))
        return Verdict("accept" if ok else "reject", why, not ok, cand.value - base.value, (cand, base))

    def end(self, now: float, provisional: bool) -> tuple[Trial, Score]:
        """Stop the running trial and close its windows; returns it and what it served: one score over
        all the slots of both sides (``provisional`` when it ended before its verdict)."""
        tr = self.running
        served = combine(tr.sb.windows[CANDIDATE] + tr.sb.windows[INCUMBENT], self.m, now, provisional)
        self.running = None
        tr.sb.close(self.m)
        return tr, served

    def _verdict(self, now: float, cand: Score, base: Score, arm: bool) -> tuple[bool, str]:
        """Accept? and the test in words: superiority for a local step; for an offline arm ``arm_test``."""
        cfg, sb, w = self.cfg, self.running.sb, self.m.weights
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

    def _futility(self, cand: Score, base: Score) -> str | None:
        """Why a local step is stopped half-way (see the module docstring), or None."""
        cfg, tr = self.cfg, self.running
        if tr.arm != "local" or cfg.futility_margin >= 1 or tr.sb.k < 4 or tr.sb.done:
            return None
        if min(cand.decided, base.decided) < cfg.guard_min_requests or cand.value >= base.value - cfg.futility_margin:
            return None
        return (f"futility: {cand.value:.4f} vs {base.value:.4f} over {cand.decided}/{base.decided} requests after "
                f"{tr.sb.k} slots: more than {cfg.futility_margin} below the incumbent half-way, rejected now")

    def _guard(self, now: float, provisional: bool) -> str | None:
        """Why the guard fires now (``provisional``: running requests that met TTFT count as hits), or None."""
        cfg, sb = self.cfg, self.running.sb
        kind = "provisional (running requests that met TTFT as hits)" if provisional else "decided"
        if cfg.test_unit == "slot":
            c = sb.slot_scores(CANDIDATE, self.m, now, provisional)
            b = sb.slot_scores(INCUMBENT, self.m, now, provisional)
            tenant, t, df = stats.slot_guard(c, b, self.m.weights, cfg.guard_alpha, cfg.guard_margin,
                                             cfg.guard_min_requests)
            crit = stats.t_quantile(1 - cfg.guard_alpha, df) if tenant is not None else math.nan
            stat = f"slot-level t {t:.2f} > {crit:.2f}, df {df:.1f}"
        else:
            c, b = self.scores(now, provisional)
            tenant, t = stats.guard_fires(c, b, cfg.guard_alpha, cfg.guard_margin, cfg.guard_min_requests)
            stat = f"z {t:.2f} > {stats.z_quantile(1 - cfg.guard_alpha):.2f}"
        if tenant is None:
            return None
        cs, bs = self.scores(now, provisional)
        return (f"guard: tenant {tenant} at {cs.tenant(tenant)[0]:.3f} vs the incumbent's {bs.tenant(tenant)[0]:.3f}, "
                f"{kind} ({stat}, margin {cfg.guard_margin})")
