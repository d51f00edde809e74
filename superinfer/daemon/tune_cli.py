"""``superinferd tune``: an offline Optuna study of the scheduler's knobs on the twin, for a profile.

The profile gives the engine (model, hardware, limits, fixed ``B_xfer``), the tenants (SLOs, weights,
replay shares), the starting knobs (``[scheduler]``), the knobs to tune (``[tuner] knobs``) and the
traffic (``[sim]``: workload, arrival, rps); flags override the traffic, model and hardware, or
``--scenario`` studies a built-in phased scenario instead. The result is an arms file
(``superinfer.tuner.arms``) for the online tuner: ``[tuner] arms_file``. Exit 0 ok, 1 failure, 2 usage.
"""

from __future__ import annotations

import json
import sys

import click

from superinfer.daemon.cli import EXIT_CONFIG, EXIT_FAIL, profile_file_opt, profile_opt, set_opt
from superinfer.sim.options import start_s_option, with_start


@click.command("tune")
@profile_opt
@profile_file_opt
@set_opt
@click.option("--scenario", default=None, help="A built-in phased scenario (shifting, shifting-alt, stationary) "
              "instead of the profile's traffic (its tenants then come with it).")
@click.option("--workload", default=None, help="Workload (default: [sim] workload).")
@start_s_option
@click.option("--arrival", default=None, help="Arrivals (default: [sim] arrival).")
@click.option("--rps", default=None, type=click.FloatRange(min=0, min_open=True), help="Rate (default: [sim] rps).")
@click.option("--duration", default=180.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Seconds of traffic each trial simulates (per phase with --scenario).")
@click.option("--model", default=None, help="Model profile (default: [engine] model).")
@click.option("--hardware", default=None, help="Hardware profile (default: [engine] hardware).")
@click.option("--trials", default=30, show_default=True, type=click.IntRange(1, 100000))
@click.option("--seeds", default=1, show_default=True, type=click.IntRange(1, 100), help="Seeds per trial (shared by every trial).")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 256), help="Worker processes on one study.")
@click.option("--storage", default=None, help="sqlite:///PATH, postgresql://..., journal:PATH (default: in memory; "
              "a temporary journal with --jobs > 1).")
@click.option("--converge-window", default=0, show_default=True, type=click.IntRange(0, 10000),
              help="> 0: --trials becomes a ceiling and the study stops once its best moved < 0.5 pp over this "
              "many trials (30: the bar `bench tuner` holds its static_best to).")
@click.option("--hindsight/--phases-alone", default=True, show_default=True,
              help="Judge each trial on the whole traffic as it flows, phase after phase (--scenario: its own "
              "lengths; --duration then ignored), its phase arms on each phase's requests; or each phase alone "
              "for --duration from an empty queue (faster; blind to a setting that collapses a loaded queue).")
@click.option("--study", "study_name", default="superinfer-tune", show_default=True, help="Study name in the storage.")
@click.option("--json", "json_path", required=True, help="Write the arms file here ('-' for stdout).")
def tune(profile, profile_file, sets, scenario, workload, start_s, arrival, rps, duration, model, hardware, trials, seeds,
         jobs, storage, converge_window, hindsight, study_name, json_path) -> None:
    """Search the knobs offline on the twin; write the robust setting and per-phase arms."""
    from dataclasses import replace

    from superinfer.core import PARAM_BOUNDS
    from superinfer.daemon.cli import _config
    from superinfer.tuner.arms import save_arms
    from superinfer.tuner.offline.evaluate import TwinEnv
    from superinfer.daemon.profile_twin import traffic_of
    from superinfer.tuner.offline.scenario import SCENARIOS
    from superinfer.tuner.offline.study import StudySpec, run_study, storage_url
    from superinfer.tuner.space import KnobSpace, SpaceError

    cfg = _config(profile, profile_file, {}, sets)
    g = cfg.get
    try:
        storage_url(storage)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--storage") from None
    if scenario is not None:
        if scenario not in SCENARIOS:
            raise click.BadParameter(f"unknown scenario {scenario!r}; built in: {', '.join(SCENARIOS)}",
                                     param_hint="--scenario")
        scn = SCENARIOS[scenario]
        scn = replace(scn, model=model or scn.model, hardware=hardware or scn.hardware)
    else:
        try:
            scn = traffic_of(cfg, with_start(workload or g("sim", "workload"), start_s), arrival, rps, duration,
                             model, hardware)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--rps") from None
    b = g("scheduler", "b_xfer")
    env = TwinEnv(model=scn.model, hardware=scn.hardware, block_size=g("engine", "block_size"),
                  max_num_seqs=g("engine", "max_num_seqs"), max_num_batched_tokens=g("engine", "max_num_batched_tokens"),
                  b_xfer=None if b == "auto" else int(b), policy=g("scheduler", "policy"),
                  gpu_costs=g("engine", "gpu_costs"),
                  base={k: float(getattr(cfg.params(), k)) for k in PARAM_BOUNDS})
    params = cfg.params()
    b_max = env.b_xfer_max()  # b_xfer: searched up to the twin's budget; not at all without a host tier
    try:
        space = KnobSpace(g("tuner", "knobs"), g("tuner", "step_caps"), b_max)
    except SpaceError as exc:
        click.echo(f"superinferd tune: tuner.{exc}", err=True)
        sys.exit(EXIT_CONFIG)
    knobs = space.knobs
    start = {k: float(b_max) if k == "b_xfer" else float(getattr(params, k)) for k in knobs}
    spec = StudySpec(env, scn, knobs, start, trials, tuple(range(seeds)), duration, storage=storage,
                     study_name=study_name, converge_window=converge_window, hindsight=hindsight)
    say = (lambda m: click.echo(m, err=True)) if json_path != "-" else (lambda m: None)
    try:
        arms, report = run_study(spec, jobs=jobs, progress=say)
    except Exception as exc:  # noqa: BLE001 - reported, exit 1
        click.echo(f"superinferd tune: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAIL)
    conv = report["convergence"]
    say(f"{conv['trials']} trials; best feasible {conv['best_feasible']}, moved {conv['moved_last_window']} over the "
        f"last {conv['window']}" + ("; converged" if conv["converged"] else ""))
    arms = replace(arms, source={**arms.source, "profile": cfg.profile, "storage": storage or "memory",
                                 "converged": conv["converged"],
                                 "command": "superinferd tune " + " ".join(sys.argv[2:])})
    if json_path == "-":
        click.echo(json.dumps(arms.as_dict(), indent=1, sort_keys=True))
        return
    try:
        save_arms(arms, json_path)
    except OSError as exc:
        click.echo(f"superinferd tune: cannot write {json_path}: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    click.echo(f"robust: {arms.robust.params} (score {arms.robust.score})")
    for name, arm in arms.phases.items():
        click.echo(f"phase {name}: {arm.params} (score {arm.score})")
    click.echo(f"wrote {json_path} ({len(report['trials'])} trials)")
