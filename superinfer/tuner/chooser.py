"""What to try next: the bandit over local steps and the offline study's arms, the local search behind
the local arm, the exploration budget that gates it, and the jump to a phase's arm and its check.

:class:`Chooser` owns that state and *returns* a decision: a :class:`Proposal` (a setting to try), a
:class:`Hold` (nothing to try, and why) or a :class:`Jump` (adopt a phase's arm without a trial); it
learns from each trial's end (:meth:`Chooser.learn`). Writing and logging are the controller's
(:mod:`superinfer.tuner.controller`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from superinfer.tuner.arms import Arms, merge_params
from superinfer.tuner.bandit import DiscountedThompson
from superinfer.tuner.budget import ExplorationBudget
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.decisions import Trial
from superinfer.tuner.fleet import Fleet, phase_key
from superinfer.tuner.local import LocalSearch
from superinfer.tuner.objective import Score
from superinfer.tuner.space import KnobSpace

PRIOR_LOCAL, PRIOR_PHASE, PRIOR_ROBUST = (1.0, 1.0), (4.0, 1.0), (2.0, 1.0)
PRIOR_FLEET = PRIOR_PHASE  # another host's accepted setting: live evidence, as strong as the study's phase arm


@dataclass(frozen=True)
class Proposal:
    """Try ``target`` as ``arm`` (``local``, ``arm:<phase>``, ``arm:robust`` or ``revert:<phase>``),
    because ``why``; ``number``: the Optuna trial number of a local step. The controller caps it again
    (one step cap for a local step, ``arm_step_factor`` caps otherwise)."""

    arm: str
    target: dict[str, float]
    why: str
    number: int | None = None


@dataclass(frozen=True)
class Hold:
    """Nothing to try now, because ``reason``."""

    reason: str


@dataclass(frozen=True)
class Jump:
    """Adopt ``phase``'s arm (``target``, within ``arm_step_factor`` caps) without a trial: the study
    scored it ``score`` there against ``replaced`` for the incumbent's setting."""

    phase: str
    target: dict[str, float]
    score: float
    replaced: float


class Chooser:
    """The bandit (``bandit``), the local search (``local``), the exploration budget (``budget``) and
    the pending check of a jump (``jumped``).

    Invariants: every target it returns differs from the incumbent it was given and, for an arm, is
    within ``arm_step_factor`` step caps of it; ``local`` is offered only while the budget allows; in a
    named phase of the arms file only that phase's arm is offered, elsewhere only the robust arm; a
    :class:`Jump` only when the study's gain there reaches ``jump_gain`` (< 1) and the step caps do not
    cut the arm short; ``jumped`` holds (the replaced setting, the study's score for it, the epoch, the
    phase) from a jump until :meth:`check_jump` reads it once; the bandit learns only accept / reject /
    rollback of its own arms, and only local trials are charged to the budget."""

    def __init__(self, cfg: TunerConfig, space: KnobSpace, arms: Arms, storage: str | None, study_name: str,
                 fleet: Fleet | None = None) -> None:
        self.cfg, self.space, self.arms, self.fleet = cfg, space, arms, fleet
        self.bandit = DiscountedThompson(cfg.gamma, cfg.explore_threshold, cfg.seed)
        self.bandit.ensure("local", PRIOR_LOCAL)
        for name in arms.phases:
            self.bandit.ensure(f"arm:{name}", PRIOR_PHASE)
        if arms.robust is not None:
            self.bandit.ensure("arm:robust", PRIOR_ROBUST)
        self.budget = ExplorationBudget(cfg.explore_budget)
        self.local = LocalSearch(space, cfg.trust_region, cfg.seed, storage, study_name)
        self.jumped: tuple[dict[str, float], float, int, str] | None = None

    def choose(self, now: float, incumbent: Mapping[str, float], phase: str | None) -> Proposal | Hold:
        """What to try from ``incumbent`` in ``phase`` (the bandit draws among the arms on offer)."""
        # local steps only while their realised losses of the last hour are within the budget
        arms = ["local"] if self.budget.allows(now) else []
        targets: dict[str, dict[str, float]] = {}
        # in a named phase the study's arm for it is never below the robust arm there (the robust trial is
        # feasible in every phase, so it competed for the phase's arm): offering both only re-tests what
        # the study ranked; the robust arm is for traffic the arms file does not name
        candidates = [(phase, self.arms.phases[phase])] if phase in self.arms.phases else \
            [("robust", self.arms.robust)]
        for name, arm in candidates:
            if arm is None:
                continue
            t = self.space.toward(incumbent, merge_params(incumbent, arm), self.cfg.arm_step_factor)
            if not self.space.same(t, incumbent):
                arms.append(f"arm:{name}")
                targets[f"arm:{name}"] = t
        fleet = self._fleet_target(phase, incumbent)
        if fleet is not None:
            self.bandit.ensure("fleet", PRIOR_FLEET)
            arms.append("fleet")
            targets["fleet"] = fleet.target
        if not arms:
            return Hold(f"no local step: {self.budget.describe(now)}; no study arm to try")
        choice, samples = self.bandit.choose(arms)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in samples.items())
        if choice is None:
            return Hold(f"no arm likely to help (samples {shown}; threshold {self.cfg.explore_threshold})")
        number = None
        if choice == "local":
            number, target = self.local.ask(incumbent)
        else:
            target = targets[choice]
        return Proposal(choice, target, f"bandit drew {shown}", number)

    def to_phase(self, phase: str, incumbent: Mapping[str, float]) -> Jump | Proposal | None:
        """Going to the arm of the newly named ``phase``: a jump when the study's gain over the
        incumbent's setting there is at least ``jump_gain``, else a trial; None when it is the incumbent."""
        arm = self.arms.phases[phase]
        target = self.space.toward(incumbent, merge_params(incumbent, arm), self.cfg.arm_step_factor)
        if self.space.same(target, incumbent):
            return self._fleet_target(phase, incumbent)  # the study has nothing here; another host may
        here = self.arms.prior(phase, incumbent, self.space.same)
        gain = None if here is None or arm.score is None else arm.score - here
        full = self.space.same(target, merge_params(incumbent, arm))  # not cut short by the step caps
        if gain is not None and full and self.cfg.jump_gain < 1 and gain >= self.cfg.jump_gain:
            return Jump(phase, target, arm.score, here)
        why = f"jump to the study's arm for phase {phase}"
        if gain is not None:
            why += f" (the study's gain {gain:+.3f} over the incumbent here; " + \
                ("below jump_gain)" if full else "more than the step caps allow in one decision)")
        return Proposal(f"arm:{phase}", target, why)

    def fallback(self, incumbent: Mapping[str, float]) -> dict[str, float] | None:
        """Where to go when the traffic leaves the phase the incumbent was chosen for: the study's robust
        setting (within ``arm_step_factor`` caps); None without one, or when it is the incumbent."""
        if self.arms.robust is None or not self.cfg.change_fallback:
            return None
        target = self.space.toward(incumbent, merge_params(incumbent, self.arms.robust), self.cfg.arm_step_factor)
        return None if self.space.same(target, incumbent) else target

    def jumped_from(self, previous: Mapping[str, float], jump: Jump, epoch: int) -> None:
        """A jump was made from ``previous`` in ``epoch``: its first window is to be checked."""
        self.jumped = (dict(previous), jump.replaced, epoch, jump.phase)

    def check_jump(self, live: Score, epoch: int) -> Proposal | None:
        """The first window after a jump: live below what the study expected of the setting the arm
        replaced contradicts the study, and that setting gets a trial (``revert:<phase>``, judged as an
        offline arm is: adopted unless worse). Reads (and forgets) ``jumped``."""
        previous, replaced, at, phase = self.jumped
        self.jumped = None
        if at != epoch or live.value >= replaced:
            return None
        return Proposal(f"revert:{phase}", previous,
                        f"the arm's first window {live.value:.4f} is below the study's {replaced:.4f} for the "
                        "setting it replaced")

    def expected(self, arm: str) -> float | None:
        """The study's score for an offline arm (None for a local step or a revert)."""
        if arm == "arm:robust" and self.arms.robust:
            return self.arms.robust.score
        return self.arms.phases[arm[4:]].score if arm.startswith("arm:") and arm[4:] in self.arms.phases else None

    def _fleet_target(self, phase: str | None, incumbent: Mapping[str, float]) -> Proposal | None:
        """The ``fleet`` arm: the best accepted setting another host published for ``phase`` (within
        ``arm_step_factor`` caps), unless it is the incumbent or there is no fleet."""
        best = self.fleet.best(phase_key(phase)) if self.fleet is not None else None
        if best is None:
            return None
        full = {**incumbent, **{k: v for k, v in best.params.items() if k in self.space.knobs}}
        target = self.space.toward(incumbent, full, self.cfg.arm_step_factor)
        if self.space.same(target, incumbent):
            return None
        return Proposal("fleet", target, f"the fleet's best accepted setting for phase {phase_key(phase)}: "
                        f"{best.value:.4f} on host {best.host} ({best.trials} trials)")

    def learn(self, now: float, tr: Trial, outcome: str, gain: float | None, served: Score,
              scores: tuple[Score, Score] | None = None, phase: str | None = None) -> None:
        """A trial ended: charge a local one's realised loss to the budget (the incumbent's baseline
        before it against what both sides ``served``), tell the local search, update the bandit, and
        publish a verdict (``scores``: candidate, incumbent) of ``phase`` to the fleet."""
        if self.fleet is not None and outcome in ("accept", "reject", "rollback"):
            cand, inc = (None, None) if scores is None else (scores[0].value, scores[1].value)
            self.fleet.publish(phase_key(phase), tr.setting, outcome, cand, inc, gain, tr.arm)
        if tr.arm == "local":
            self.budget.charge(now, tr.baseline, served.value, now - tr.started)
        if tr.number is not None:
            self.local.tell(tr.number, gain, outcome == "accept")
        if outcome in ("accept", "reject", "rollback") and tr.arm in self.bandit.arms:
            self.bandit.update(tr.arm, outcome == "accept")

    def drop(self, number: int | None) -> None:
        """A local step that will not be tried (shadow / advise)."""
        if number is not None:
            self.local.tell(number, None, False)
