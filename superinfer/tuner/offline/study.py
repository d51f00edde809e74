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

With ``hindsight`` a trial is judged instead on the whole scenario as the strategies replay it, on the
given seeds (:func:`~superinfer.tuner.offline.evaluate.evaluate_trace`): its value is that run's
objective, its phase scores those of the requests that arrived in each phase (``bench tuner``'s
``static_best`` and ``oracle``). With ``converge_window`` > 0, ``trials`` is a ceiling: the study stops
once its best feasible value moved less than ``converge_tol`` over the last ``converge_window`` trials
(``superinfer.tuner.offline.converge``); the report holds that curve and each phase's.

A study in a storage resumes: without ``converge_window`` it runs ``trials`` more (``superinferd tune``
goes on); with it (or ``ceiling``), trials already there count toward ``trials``. The start's scores are
kept in the study (with a key of everything they depend on) and not re-measured when the key matches.

Parallel workers (``jobs > 1``) are processes on one study in a shared storage (a journal file in a
temporary directory when no storage is given). Storages: ``sqlite:///path``, ``postgresql://...``
(driven by psycopg 3), ``journal:path`` or any path without ``://`` (an Optuna journal file).
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from superinfer.tuner.space import TUNABLE_BOUNDS, TUNABLE_INTEGER
from superinfer.tuner.arms import Arm, Arms
from superinfer.tuner.offline.converge import converged, moved, running_best, stopper, study_curve
from superinfer.tuner.offline.evaluate import TwinEnv, evaluate, evaluate_trace, weights_of, workload_features
from superinfer.tuner.offline.scenario import Scenario, phase_workload

#: where a study searches each knob (inside ``TUNABLE_BOUNDS``; the bounds themselves span off-switches
#: and extremes no operating point needs)
SEARCH_RANGES: dict[str, tuple[float, float]] = {
    "alpha": (0.0, 10.0), "delta_b": (-0.2, 0.2), "delta_f": (-5.0, 5.0), "min_residency": (0, 16),
    "max_rotations": (1, 256), "slack_gate_s": (-5.0, 10.0), "rotation_margin_s": (0.0, 10.0),
    "hopeless_last": (0, 1), "step_slo_share": (0.3, 3.0), "backfill": (0, 1), "replan_steps": (1, 16),
    "tbt_credit": (0, 1),
}
#: ``b_xfer``: from this many blocks (0 turns rotation off) up to the twin's measured budget, on a log scale
B_XFER_SEARCH_MIN = 16


#: trials the TPE sampler draws at random before it models anything
STARTUP_TRIALS = 8


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
    hindsight: bool = False  # judge a trial on the whole scenario as replayed (evaluate_trace), not phases alone
    converge_window: int = 0  # > 0: stop once the best moved < converge_tol over this many trials
    converge_tol: float = 0.005
    ceiling: bool = False  # ``trials`` counts the trials already in the storage (implied by converge_window)

    @property
    def min_trials(self) -> int:
        """No convergence before the sampler's random start and a whole window after it."""
        return STARTUP_TRIALS + self.converge_window

    def key(self) -> str:
        """A digest of everything a trial's score depends on (a resumed study must match it)."""
        what = [repr(self.env), repr(self.scenario), list(self.knobs), sorted(self.start.items()), list(self.seeds),
                self.eval_s, self.margin, self.hindsight]
        return hashlib.sha256(json.dumps(what, default=repr).encode()).hexdigest()[:12]

    def measure(self, values: dict[str, float]) -> dict[str, dict]:
        """``{phase: {"score", "per_tenant", ...}}`` of ``values``; with hindsight also ``"": the whole run``."""
        if not self.hindsight:
            return evaluate(self.env, self.scenario, values, list(self.seeds), self.eval_s)
        res = evaluate_trace(self.env, self.scenario, values, list(self.seeds))
        return {**res["phases"], "": {k: res[k] for k in ("score", "per_tenant", "requests")}}


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


def _suggest(trial: Any, knobs: tuple[str, ...], b_xfer_max: int) -> dict[str, float]:
    out = {}
    for k in knobs:
        if k == "b_xfer":
            out[k] = float(trial.suggest_int(k, min(B_XFER_SEARCH_MIN, b_xfer_max), b_xfer_max, log=True))
            continue
        lo, hi = SEARCH_RANGES.get(k, TUNABLE_BOUNDS[k])
        lo, hi = max(lo, TUNABLE_BOUNDS[k][0]), min(hi, TUNABLE_BOUNDS[k][1])
        out[k] = float(trial.suggest_int(k, int(lo), int(hi)) if k in TUNABLE_INTEGER else trial.suggest_float(k, lo, hi))
    return out


def _objective(spec: StudySpec, reference: dict[str, dict]) -> Callable[[Any], float]:
    weights = weights_of(spec.scenario)
    b_xfer_max = spec.env.b_xfer_max() if "b_xfer" in spec.knobs else 0

    def fn(trial: Any) -> float:
        values = _suggest(trial, spec.knobs, b_xfer_max)
        res = spec.measure(values)
        whole = res.pop("", None)
        loss = 0.0
        for name, r in res.items():
            trial.set_user_attr(f"phase:{name}", r["score"])
            trial.set_user_attr(f"tenants:{name}", r["per_tenant"])
            ref = reference.get(name, {}).get("per_tenant", {})
            loss = max([loss] + [ref[t] - v - spec.margin for t, v in r["per_tenant"].items() if t in ref])
        trial.set_user_attr("constraint", loss)
        trial.set_constraint("tenant_loss", loss)
        return whole["score"] if whole is not None else sum(weights[n] * r["score"] for n, r in res.items())

    return fn


def _study(spec: StudySpec, storage: Any) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed, n_startup_trials=STARTUP_TRIALS)
    return optuna.create_study(study_name=spec.study_name, storage=storage, direction="maximize", sampler=sampler,
                               load_if_exists=True)


def _progress(total: int, say: Callable[[str], None]) -> Callable[[Any, Any], None]:
    """An Optuna callback that reports each finished trial and the best feasible value so far."""

    def cb(st: Any, tr: Any) -> None:
        curve = study_curve(st)
        say(f"trial {len(curve)}/{total}: value {tr.value if tr.value is not None else float('nan'):.4f}"
            f" (best feasible {curve[-1] if curve else float('nan'):.4f})")

    return cb


def _worker(spec: StudySpec, storage_spec: str, reference: dict, n: int, seed: int, loud: bool = False) -> None:
    import sys
    from dataclasses import replace

    s = replace(spec, sampler_seed=seed)
    study = _study(s, open_storage(storage_spec))
    callbacks = [stopper(s.converge_window, s.converge_tol, s.min_trials)]
    if loud:
        callbacks.insert(0, _progress(spec.trials, lambda m: print(m, file=sys.stderr, flush=True)))
    study.optimize(_objective(s, reference), n_trials=n, callbacks=callbacks)


def run_study(spec: StudySpec, jobs: int = 1, progress: Callable[[str], None] | None = None) -> tuple[Arms, dict]:
    """Run the study; returns the arms and a report (reference scores, every trial)."""
    say = progress or (lambda _m: None)
    storage_spec = spec.storage
    tmp = None
    if jobs > 1 and not storage_spec:
        tmp = tempfile.TemporaryDirectory(prefix="superinfer-study-")
        storage_spec = os.path.join(tmp.name, "study.journal")
    try:
        study = _study(spec, open_storage(storage_spec))
        reference = _reference(spec, study, say)
        study.enqueue_trial({k: (int(spec.start[k]) if k in TUNABLE_INTEGER else spec.start[k]) for k in spec.knobs},
                            skip_if_exists=True)

        todo = _remaining(spec, study)
        if todo and jobs <= 1:
            study.optimize(_objective(spec, reference), n_trials=todo,
                           callbacks=[_progress(spec.trials, say), stopper(spec.converge_window, spec.converge_tol, spec.min_trials)])
        elif todo:
            per = [todo // jobs + (1 if i < todo % jobs else 0) for i in range(jobs)]
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_worker, args=(spec, storage_spec, reference, n, spec.sampler_seed + i,
                                                       progress is not None))
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


def _reference(spec: StudySpec, study: Any, say: Callable[[str], None]) -> dict:
    """The start's scores: kept in the study when its key matches, else measured (and kept)."""
    if study.user_attrs.get("spec_key") == spec.key() and "reference" in study.user_attrs:
        say("the start's scores: from the stored study")
        return study.user_attrs["reference"]
    say(f"evaluating the start setting on {len(spec.scenario.phases)} phases x {len(spec.seeds)} seed(s)"
        + (" (the whole scenario)" if spec.hindsight else ""))
    reference = spec.measure(dict(spec.start))
    study.set_user_attr("spec_key", spec.key())
    study.set_user_attr("reference", reference)
    return reference


def _remaining(spec: StudySpec, study: Any) -> int:
    """Trials still to run: ``trials`` more without a convergence rule; with one, up to ``trials`` in all
    and none once converged."""
    import optuna

    if spec.converge_window <= 0 and not spec.ceiling:
        return spec.trials
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if spec.converge_window > 0 and converged(study_curve(study), spec.converge_window, spec.converge_tol,
                                              spec.min_trials):
        return 0
    return max(0, spec.trials - len(done))


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
              "start_scores": {n or "whole": round(r["score"], 6) for n, r in reference.items()},
              "hindsight": spec.hindsight}
    start = Arm("start", {k: float(spec.start[k]) for k in spec.knobs if k in spec.start})
    return Arms(Arm("robust", values(best), round(float(best.value), 6)), phases, source, start=start)


def _report(spec: StudySpec, study: Any, reference: dict) -> dict:
    return {"reference": {k: v for k, v in reference.items() if k}, "whole_start": reference.get(""),
            "convergence": convergence(spec, study, reference),
            "trials": [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
                        "constraint": t.user_attrs.get("constraint"),
                        "phases": {k[6:]: v for k, v in t.user_attrs.items() if k.startswith("phase:")}}
                       for t in study.trials]}


def convergence(spec: StudySpec, study: Any, reference: dict) -> dict:
    """The study's curve (best feasible value after each trial) and each phase's (best score among the
    trials feasible in that phase: the oracle's arm), how far each moved over the last window, and
    whether the tenant guard binds (the best value with no guard above the best feasible one)."""
    import optuna

    window = spec.converge_window or 30
    done = sorted((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None),
                  key=lambda t: t.number)
    curve = study_curve(study)
    unguarded = running_best([t.value for t in done], [True] * len(done))
    r = lambda x: None if x is None or math.isnan(x) else round(float(x), 6)  # noqa: E731
    phases = {}
    for name in dict.fromkeys(ph.name for ph in spec.scenario.phases):
        c = running_best([t.user_attrs.get(f"phase:{name}") for t in done],
                         [phase_feasible(t, name, reference, spec.margin) for t in done])
        phases[name] = {"curve": [r(x) for x in c], "moved_last_window": r(moved(c, window))}
    best, free = (curve[-1] if curve else math.nan), (unguarded[-1] if unguarded else math.nan)
    return {"window": window, "tol": spec.converge_tol, "trials": len(done), "curve": [r(x) for x in curve],
            "curve_unguarded": [r(x) for x in unguarded],
            "moved_last_window": r(moved(curve, window)),
            "converged": converged(curve, window, spec.converge_tol, spec.min_trials),
            "best_feasible": r(best), "best_unguarded": r(free),
            "guard_binds": bool(free - best >= spec.converge_tol) if not math.isnan(best) else True,
            "phases": phases}
