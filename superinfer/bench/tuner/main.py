"""``bench tuner`` end to end: two offline studies, every strategy on every seed, the summary.

1. Two studies (``superinfer.tuner.offline.study``), in parallel. The baselines' study judges each
   setting with hindsight, on the whole judged scenario as the strategies replay it and on the judged
   seeds (``hindsight``: its value for a setting is what ``static_best`` with that setting scores), and
   runs until it has converged (the best feasible value moved < ``converge_tol`` over the last
   ``converge_window`` trials; ``static_trials`` is a ceiling): its ``robust`` arm is ``static_best``,
   its phase arms (the best score in each phase among trials feasible there) the ``oracle``'s. The warm
   start's study is of a *different* trace (the scenario's ``-alt``, else ``shifting-alt``), judged with
   hindsight the same way on ``study_seeds`` seeds no judged run uses (2000, 2001, ...), ``warm_trials``
   trials: what an operator would have run on other traffic. Each study's sampler has its own seed (on one seed they
   proposed the same settings). With ``study_storage`` both are kept there, keyed by everything their
   scores depend on, and a re-run resumes them (a converged study runs no trial).
2. Every strategy on seeds ``0 .. seeds - 1`` of the scenario, and ``tuner`` and ``static_best`` on the
   stationary control (there ``static_best`` is the study's arm for that phase: the best static setting
   for stationary chat traffic), in a process pool.
3. :func:`~superinfer.bench.tuner.summary.summarise` and the targets.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from superinfer.tuner.arms import arms_from_dict
from superinfer.bench.tuner.runs import STRATEGIES, RunTask, run_task, start_setting
from superinfer.bench.tuner.summary import summarise, targets
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.offline.evaluate import TwinEnv
from superinfer.tuner.offline.scenario import SCENARIOS, Scenario, get_scenario
from superinfer.tuner.offline.study import StudySpec, run_study


@dataclass(frozen=True)
class BenchSpec:
    scenario: str | Scenario = "shifting"  # a built-in name, or a Scenario (``trace_scenario``)
    study_scenario: str | Scenario = "shifting-alt"
    control: str | None = "stationary"
    seeds: int = 5
    static_trials: int = 300  # the baselines' study: a ceiling; it stops when converged
    warm_trials: int = 12
    study_seeds: int = 2
    converge_window: int = 30
    converge_tol: float = 0.005
    study_storage: str | None = None
    eval_s: float = 240.0  # a phase's length in a study without hindsight (bench's are not): in the studies' keys
    jobs: int = 2
    env: TwinEnv = field(default_factory=TwinEnv)
    tuner: TunerConfig = field(default_factory=lambda: TunerConfig(mode="auto"))
    bin_s: float = 60.0


def _study(spec: StudySpec, jobs: int = 1, progress: Callable[[str], None] | None = None) -> tuple[dict, dict]:
    arms, report = run_study(replace(spec, study_name=f"{spec.study_name}-{spec.key()}"), jobs=jobs, progress=progress)
    return arms.as_dict(), report


def run_bench(spec: BenchSpec, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    scn = spec.scenario if isinstance(spec.scenario, Scenario) else get_scenario(spec.scenario)
    env = spec.env
    tuner = replace(spec.tuner, b_xfer_max=env.b_xfer_max() or None)  # b_xfer bounded by the twin's budget
    start = start_setting(tuner)
    knobs = tuple(start)
    if spec.study_seeds < 1:
        raise ValueError(f"study_seeds: expected >= 1, got {spec.study_seeds!r}")
    warm_seeds = tuple(range(2000, 2000 + spec.study_seeds))
    static_spec = StudySpec(env, scn, knobs, start, spec.static_trials, tuple(range(spec.seeds)), spec.eval_s,
                            storage=spec.study_storage, study_name="bench-static", sampler_seed=1000, hindsight=True,
                            converge_window=spec.converge_window, converge_tol=spec.converge_tol, ceiling=True)
    warm_scn = spec.study_scenario if isinstance(spec.study_scenario, Scenario) else get_scenario(spec.study_scenario)
    # the warm start is judged as the baselines are, on its whole (other) trace as it flows: a phase's arm
    # scored on that phase alone from an empty queue (run H: hopeless_last 0 for reasoning, +3.8 pp there)
    # can collapse the live queue it inherits (the tuner's reasoning phases 63-76 % against 91 %)
    warm_spec = StudySpec(env, warm_scn, knobs, start, spec.warm_trials, warm_seeds,
                          spec.eval_s, storage=spec.study_storage, study_name="bench-warm-start", sampler_seed=2000,
                          hindsight=True, ceiling=True)
    say(f"studies: {scn.name} with hindsight on seeds 0..{spec.seeds - 1} until converged (window "
        f"{spec.converge_window}, {100 * spec.converge_tol:g} pp, at most {spec.static_trials} trials: static_best, "
        f"oracle); {warm_scn.name}, {spec.warm_trials} trials with hindsight on {spec.study_seeds} seed(s) (the "
        f"tuner's warm start)")
    with ProcessPoolExecutor(max_workers=1) as pool:
        warm = pool.submit(_study, warm_spec, max(1, spec.jobs))  # alone on the cores once the main one is stored
        main_arms, main_rep = _study(static_spec, jobs=max(1, spec.jobs), progress=say)
        warm_arms, warm_rep = warm.result()
    t_studies = time.perf_counter() - t0
    conv = main_rep["convergence"]
    say(f"studies done in {t_studies:.0f} s; baselines' study: {conv['trials']} trials, "
        f"{'converged' if conv['converged'] else 'NOT converged'} (best moved {conv['moved_last_window']} over the "
        f"last {conv['window']}); static_best {main_arms['robust']['params']}")
    main = arms_from_dict(main_arms)
    static = dict(main.robust.params)
    oracle = {n: dict(a.params) for n, a in main.phases.items()}
    strategies = STRATEGIES if scn.known_phases else tuple(s for s in STRATEGIES if s != "oracle")
    custom = None if scn.name in SCENARIOS else scn
    tasks = [RunTask(s, scn.name, seed, env, static, oracle, warm_arms, tuner, spec.bin_s, custom)
             for seed in range(spec.seeds) for s in strategies]
    if spec.control:
        ctl_phase = get_scenario(spec.control).phases[0].name
        ctl_static = oracle.get(ctl_phase, static)
        tasks += [RunTask(s, spec.control, seed, env, ctl_static, oracle, warm_arms, tuner, spec.bin_s)
                  for seed in range(spec.seeds) for s in ("static_best", "tuner")]
    tasks.sort(key=lambda t: t.strategy != "paper")  # the slowest first, for a better packing
    say(f"{len(tasks)} runs on {spec.jobs} worker(s)")
    runs = []
    with ProcessPoolExecutor(max_workers=max(1, spec.jobs)) as pool:
        for r in pool.map(run_task, tasks):
            runs.append(r)
            say(f"  {r['scenario']:<10} {r['strategy']:<11} seed {r['seed']}: SLO attainment "
                f"{100 * r['slo_attainment']:.1f} % ({r['wall_s']:.0f} s)")
    res = summarise(runs, scn.name, spec.control, spec.bin_s)
    res["targets"] = targets(res)
    if not scn.known_phases:
        res["oracle"] = "omitted: a recorded trace has no known phase boundaries"
    res["settings"] = {"scenario": scn.name, "study_scenario": warm_scn.name, "control": spec.control,
                       "seeds": spec.seeds, "static_trials": spec.static_trials, "warm_trials": spec.warm_trials,
                       "study_seeds": spec.study_seeds, "eval_s": spec.eval_s, "converge_window": spec.converge_window,
                       "converge_tol": spec.converge_tol, "study_storage": spec.study_storage,
                       "jobs": spec.jobs, "model": env.model, "hardware": env.hardware, "bin_s": spec.bin_s,
                       "tuner": {k: getattr(tuner, k) for k in tuner.__dataclass_fields__},
                       "start": start, "static_best": static, "oracle": oracle,
                       "warm_start_arms": warm_arms, "study_arms": main_arms,
                       "scenario_description": scn.description}
    res["studies"] = {"static": _brief(main_rep), "warm_start": _brief(warm_rep)}
    res["runs"] = runs
    res["wall_s"] = {"studies": round(t_studies, 1), "total": round(time.perf_counter() - t0, 1),
                     "cpu_count": os.cpu_count()}
    return res


def _brief(report: dict) -> dict:
    return {"reference": {k: round(v["score"], 6) for k, v in report["reference"].items()},
            "whole_start": report.get("whole_start"), "convergence": report["convergence"],
            "trials": [{"number": t["number"], "value": t["value"], "params": t["params"],
                        "constraint": t["constraint"], "phases": t.get("phases", {})} for t in report["trials"]]}
