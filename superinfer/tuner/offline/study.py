"""The offline study behind ``superinferd tune``: an Optuna study of the knobs on the twin.

Every trial is one setting evaluated on every phase of a scenario with the same seeds
(:func:`~superinfer.tuner.offline.evaluate.evaluate`); its value is the phases' scores weighted by their
share of the scenario's time. Trial 0 is the starting setting (``enqueue_trial``), evaluated first, so
the constraint can be stated against it: no tenant of any phase may lose more than ``margin`` of
attainment against the start (``Trial.set_constraint``, which Optuna's TPE sampler takes into account;
infeasible trials are never chosen). The
result is an arms file (``superinfer.tuner.arms``): ``robust`` = the feasible trial (no tenant of *any*
phase loses more than ``margin``) with the best value; one arm per phase = the trial with the best score
in that phase among those feasible *in that phase* (no tenant of that phase loses more than ``margin``
against the start in that phase; :func:`phase_feasible`), with the phase's features. A phase's arm is
only ever used in that phase, so what a setting does elsewhere is no reason to withhold it.

Parallel workers (``jobs > 1``) are processes on one study in a shared storage (a journal file in a
temporary directory when no storage is given). Storages: ``sqlite:///path``, ``postgresql://...``
(driven by psycopg 3), ``journal:path`` or any path without ``://`` (an Optuna journal file).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from superinfer.core import INTEGER_PARAMS, PARAM_BOUNDS
from superinfer.tuner.arms import Arm, Arms
from superinfer.tuner.offline.evaluate import TwinEnv, evaluate, weights_of, workload_features
from superinfer.tuner.offline.scenario import Scenario, phase_workload

#: where a study searches each knob (inside ``PARAM_BOUNDS``; the bounds themselves span off-switches
#: and extremes no operating point needs)
SEARCH_RANGES: dict[str, tuple[float, float]] = {
    "alpha": (0.0, 10.0), "delta_b": (-0.2, 0.2), "delta_f": (-5.0, 5.0), "min_residency": (0, 16),
    "max_rotations": (1, 256), "slack_gate_s": (-5.0, 10.0), "rotation_margin_s": (0.0, 10.0),
    "hopeless_last": (0, 1), "step_slo_share": (0.3, 3.0), "backfill": (0, 1), "replan_steps": (1, 16),
    "tbt_credit": (0, 1),
}


@dataclass(frozen=True)
class StudySpec:
    env: TwinEnv
    scenario: Scenario
    knobs: tuple[str, ...]
    start: dict[str, float]
    trials: int
    seeds: tuple[int, ...]
    eval_s: float = 180.0
    margin: float = 0.05
    storage: str | None = None
    study_name: str = "superinfer-tune"
    sampler_seed: int = 0  # give each study its own (two studies on one seed propose the same settings)


def storage_url(spec: str | None) -> str | None:
    """An Optuna storage for ``spec`` (see the module docstring); None stays in memory."""
    if spec is None or spec == "":
        return None
    if spec.startswith("postgresql://") or spec.startswith("postgres://"):
        return "postgresql+psycopg://" + spec.split("://", 1)[1]
    if spec.startswith("journal:") or "://" not in spec:
        return spec
    if spec.startswith(("sqlite:///", "postgresql+", "mysql")):
        return spec
    raise ValueError(f"storage {spec!r}: expected sqlite:///PATH, postgresql://..., journal:PATH or a file path")


def open_storage(spec: str | None) -> Any:
    import optuna

    url = storage_url(spec)
    if url is None:
        return None
    if url.startswith("journal:") or "://" not in url:
        path = url[len("journal:"):] if url.startswith("journal:") else url
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path))
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def _suggest(trial: Any, knobs: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for k in knobs:
        lo, hi = SEARCH_RANGES.get(k, PARAM_BOUNDS[k])
        lo, hi = max(lo, PARAM_BOUNDS[k][0]), min(hi, PARAM_BOUNDS[k][1])
        out[k] = float(trial.suggest_int(k, int(lo), int(hi)) if k in INTEGER_PARAMS else trial.suggest_float(k, lo, hi))
    return out


def _objective(spec: StudySpec, reference: dict[str, dict]) -> Callable[[Any], float]:
    weights = weights_of(spec.scenario)

    def fn(trial: Any) -> float:
        values = _suggest(trial, spec.knobs)
        res = evaluate(spec.env, spec.scenario, values, list(spec.seeds), spec.eval_s)
        loss = 0.0
        for name, r in res.items():
            trial.set_user_attr(f"phase:{name}", r["score"])
            trial.set_user_attr(f"tenants:{name}", r["per_tenant"])
            ref = reference.get(name, {}).get("per_tenant", {})
            loss = max([loss] + [ref[t] - v - spec.margin for t, v in r["per_tenant"].items() if t in ref])
        trial.set_user_attr("constraint", loss)
        trial.set_constraint("tenant_loss", loss)
        return sum(weights[n] * r["score"] for n, r in res.items())

    return fn


def _study(spec: StudySpec, storage: Any) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed, n_startup_trials=8)
    return optuna.create_study(study_name=spec.study_name, storage=storage, direction="maximize", sampler=sampler,
                               load_if_exists=True)


def _worker(spec: StudySpec, storage_spec: str, reference: dict, n: int, seed: int) -> None:
    from dataclasses import replace

    s = replace(spec, sampler_seed=seed)
    study = _study(s, open_storage(storage_spec))
    study.optimize(_objective(s, reference), n_trials=n)


def run_study(spec: StudySpec, jobs: int = 1, progress: Callable[[str], None] | None = None) -> tuple[Arms, dict]:
    """Run the study; returns the arms and a report (reference scores, every trial)."""
    say = progress or (lambda _m: None)
    say(f"evaluating the start setting on {len(spec.scenario.phases)} phases x {len(spec.seeds)} seed(s)")
    reference = evaluate(spec.env, spec.scenario, dict(spec.start), list(spec.seeds), spec.eval_s)
    storage_spec = spec.storage
    tmp = None
    if jobs > 1 and not storage_spec:
        tmp = tempfile.TemporaryDirectory(prefix="superinfer-study-")
        storage_spec = os.path.join(tmp.name, "study.journal")
    try:
        study = _study(spec, open_storage(storage_spec))
        study.enqueue_trial({k: (int(spec.start[k]) if k in INTEGER_PARAMS else spec.start[k]) for k in spec.knobs},
                            skip_if_exists=True)

        def report(st: Any, tr: Any) -> None:
            best = max((t.value for t in st.trials if t.value is not None and t.user_attrs.get("constraint", 0) <= 0),
                       default=float("nan"))
            say(f"trial {tr.number + 1}/{spec.trials}: value {tr.value if tr.value is not None else float('nan'):.4f}"
                f" (best feasible {best:.4f})")

        if jobs <= 1:
            study.optimize(_objective(spec, reference), n_trials=spec.trials, callbacks=[report])
        else:
            per = [spec.trials // jobs + (1 if i < spec.trials % jobs else 0) for i in range(jobs)]
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_worker, args=(spec, storage_spec, reference, n, spec.sampler_seed + i))
                     for i, n in enumerate(per) if n]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            bad = [p.exitcode for p in procs if p.exitcode != 0]
            if bad:
                raise RuntimeError(f"{len(bad)} study worker(s) failed (exit codes {bad})")
            study = _study(spec, open_storage(storage_spec))
        return _arms(spec, study, reference), _report(spec, study, reference)
    finally:
        if tmp is not None:
            tmp.cleanup()


def phase_feasible(trial: Any, phase: str, reference: dict, margin: float) -> bool:
    """Did ``trial`` keep every tenant of ``phase`` within ``margin`` of the start's attainment there?
    (False when the trial has no per-tenant scores for the phase.)"""
    per = trial.user_attrs.get(f"tenants:{phase}")
    if per is None:
        return False
    ref = reference.get(phase, {}).get("per_tenant", {})
    return all(ref[t] - v - margin <= 0 for t, v in per.items() if t in ref)


def _arms(spec: StudySpec, study: Any, reference: dict) -> Arms:
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    feasible = [t for t in done if t.user_attrs.get("constraint", 0.0) <= 0] or done
    values = lambda t: {k: float(t.params[k]) for k in spec.knobs if k in t.params}  # noqa: E731
    best = max(feasible, key=lambda t: (t.value, -t.number))
    tops: dict[str, Any] = {}
    feats: dict[str, dict[str, float]] = {}
    for ph in spec.scenario.phases:
        if ph.name in tops:
            continue
        key = f"phase:{ph.name}"
        scored = [t for t in done if key in t.user_attrs]
        pool = [t for t in scored if phase_feasible(t, ph.name, reference, spec.margin)] or scored
        tops[ph.name] = max(pool, key=lambda t: (t.user_attrs[key], -t.number))
        feats[ph.name] = workload_features(phase_workload(spec.scenario, ph, spec.seeds[0], ph.duration_s, None))
    phases: dict[str, Arm] = {}
    for name, top in tops.items():
        key = f"phase:{name}"
        # what the study measured here for the start and for every other phase's arm: the prior for a jump
        versus = {"start": round(float(reference[name]["score"]), 6)} if name in reference else {}
        versus |= {other: round(float(t.user_attrs[key]), 6) for other, t in tops.items()
                   if other != name and key in t.user_attrs}
        phases[name] = Arm(name, values(top), round(float(top.user_attrs[key]), 6),
                           {k: round(v, 6) for k, v in feats[name].items()}, versus)
    source = {"scenario": spec.scenario.name, "model": spec.env.model, "hardware": spec.env.hardware,
              "trials": len(done), "seeds": list(spec.seeds), "eval_s": spec.eval_s, "margin": spec.margin,
              "study": spec.study_name, "start": dict(spec.start), "sampler_seed": spec.sampler_seed,
              "phase_arms": "best in the phase among trials feasible in that phase",
              "start_scores": {n: round(r["score"], 6) for n, r in reference.items()}}
    start = Arm("start", {k: float(spec.start[k]) for k in spec.knobs if k in spec.start})
    return Arms(Arm("robust", values(best), round(float(best.value), 6)), phases, source, start=start)


def _report(spec: StudySpec, study: Any, reference: dict) -> dict:
    return {"reference": reference,
            "trials": [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
                        "constraint": t.user_attrs.get("constraint"),
                        "phases": {k[6:]: v for k, v in t.user_attrs.items() if k.startswith("phase:")}}
                       for t in study.trials]}
