"""Which trials of an offline study become arms (superinfer/tuner/offline/study.py): a phase's arm is the
best trial *in that phase* among the trials that keep that phase's tenants within the margin; the robust
arm must keep every tenant of every phase within it."""

from __future__ import annotations

import optuna
import pytest

from superinfer.tuner.offline.evaluate import TwinEnv
from superinfer.tuner.offline.scenario import Phase, Scenario, Segment
from superinfer.tuner.offline.study import StudySpec, _arms, phase_feasible

SCN = Scenario("two", (Phase("a", (Segment("chat", 2.0, 60.0),)), Phase("b", (Segment("chat", 3.0, 60.0),))))
START = {"alpha": 3.0}
#: the start's per-tenant attainment in each phase (what ``run_study`` measures first)
REFERENCE = {"a": {"score": 0.80, "per_tenant": {"chat": 0.80}}, "b": {"score": 0.90, "per_tenant": {"chat": 0.90}}}


def study_of(trials: list[tuple[float, dict[str, float]]]) -> optuna.Study:
    """An in-memory study whose trials set ``alpha`` and scored each phase's one tenant as given (what
    ``_objective`` records: the phase score, the per-tenant scores, the constraint over every phase)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for alpha, scores in trials:
        loss = max([0.0] + [REFERENCE[p]["per_tenant"]["chat"] - v - 0.05 for p, v in scores.items()])
        attrs = {"constraint": loss, **{f"phase:{p}": v for p, v in scores.items()},
                 **{f"tenants:{p}": {"chat": v} for p, v in scores.items()}}
        study.add_trial(optuna.trial.create_trial(
            params={"alpha": alpha}, distributions={"alpha": optuna.distributions.FloatDistribution(0.0, 10.0)},
            value=0.5 * sum(scores.values()), user_attrs=attrs))
    return study


def arms_of(study: optuna.Study):
    spec = StudySpec(TwinEnv(), SCN, ("alpha",), START, trials=len(study.trials), seeds=(0,), eval_s=30.0)
    return _arms(spec, study, REFERENCE)


def test_a_trial_best_and_feasible_in_one_phase_is_that_phases_arm_though_infeasible_in_another() -> None:
    study = study_of([
        (3.0, {"a": 0.80, "b": 0.90}),  # the start: feasible everywhere
        (6.0, {"a": 0.97, "b": 0.70}),  # best in a, loses 20 pp in b: infeasible over the whole study
        (4.0, {"a": 0.85, "b": 0.92}),  # feasible everywhere, best in b
    ])
    arms = arms_of(study)
    assert arms.phases["a"].params["alpha"] == pytest.approx(6.0)
    assert arms.phases["a"].score == pytest.approx(0.97)
    assert arms.phases["b"].params["alpha"] == pytest.approx(4.0)  # not the trial that loses 20 pp in b
    assert arms.robust.params["alpha"] == pytest.approx(4.0)  # robust: feasible in every phase
    assert phase_feasible(study.trials[1], "a", REFERENCE, 0.05)
    assert not phase_feasible(study.trials[1], "b", REFERENCE, 0.05)
    # what the study measured in each phase for the start and the other phase's arm: the tuner's prior
    assert arms.phases["a"].versus == {"start": pytest.approx(0.80), "b": pytest.approx(0.85)}
    assert arms.phases["b"].versus == {"start": pytest.approx(0.90), "a": pytest.approx(0.70)}
    assert arms.start.params == {"alpha": 3.0}
    same = lambda x, y: x == y  # noqa: E731
    assert arms.prior("b", {"alpha": 6.0}, same) == pytest.approx(0.70)  # a's arm, in b
    assert arms.prior("b", {"alpha": 3.0}, same) == pytest.approx(0.90)  # the start, in b
    assert arms.prior("b", {"alpha": 5.0}, same) is None  # a setting the study did not hand over


def test_a_phase_arm_never_loses_more_than_the_margin_against_the_start_in_its_phase() -> None:
    study = study_of([
        (3.0, {"a": 0.80, "b": 0.90}),
        (7.0, {"a": 0.99, "b": 0.84}),  # b: 6 pp below the start, beyond the 5 pp margin
    ])
    arms = arms_of(study)
    assert arms.phases["a"].params["alpha"] == pytest.approx(7.0)
    assert arms.phases["b"].params["alpha"] == pytest.approx(3.0)  # the start, the only feasible one in b
    assert arms.robust.params["alpha"] == pytest.approx(3.0)
