"""``superinferd bench tuner``: the online tuner against ``paper``, ``static_best`` and a per-phase
``oracle`` on shifting traffic, on the twin in virtual time (superinfer.bench.tuner.main)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace

import click

from superinfer.sim.grounded import GPU_COSTS
from superinfer.tuner.offline.scenario import SCENARIOS


def _pp(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:5.1f}"


@click.command("tuner")
@click.option("--scenario", default="shifting", show_default=True, type=click.Choice(sorted(SCENARIOS)),
              help="Built-in scenario to judge on.")
@click.option("--workload", default=None, help="A recorded trace (with arrival times) instead of a scenario; no oracle.")
@click.option("--arrival", default=None, help="With --workload: trace (the trace's own arrivals).")
@click.option("--rps", default=None, help="With --workload: trace (the trace's own rate) or a rate to scale it to.")
@click.option("--model", default=None, help="Model profile (default: the scenario's, qwen2.5-32b).")
@click.option("--hardware", default=None, help="Hardware profile (default: the scenario's, gh200).")
@click.option("--seeds", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option("--static-trials", default=300, show_default=True, type=click.IntRange(2, 10000),
              help="Most trials of the baselines' study (static_best, oracle: with hindsight, until converged).")
@click.option("--warm-trials", default=12, show_default=True, type=click.IntRange(2, 10000),
              help="Trials of the tuner's warm-start study (on another trace).")
@click.option("--converge-window", default=30, show_default=True, type=click.IntRange(1, 10000),
              help="The baselines' study stops once its best moved less than --converge-pp over this many trials.")
@click.option("--converge-pp", default=0.5, show_default=True, type=click.FloatRange(0.0, 100.0))
@click.option("--study-storage", default=None, help="Keep both studies here (a journal file, sqlite:///, "
              "postgresql://) and resume them on a re-run with the same settings.")
@click.option("--study-seeds", default=2, show_default=True, type=click.IntRange(1, 100),
              help="Seeds each warm-start trial is evaluated on (more: less luck in the arms, proportionally slower).")
@click.option("--control/--no-control", default=True, show_default=True, help="Also run the stationary control.")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(1, 64), help="Worker processes.")
@click.option("--json", "json_path", default=None, help="Write the result here ('-' for stdout).")
@click.option("--plot-dir", default=None, type=click.Path(file_okay=False), help="Write the figures here.")
@click.option("--profile", default=None, help="Instead of a scenario: the profile's own traffic on its own twin, "
              "its tuner (auto, cold, no study) against its static knobs: may it ship deciding?")
@click.option("--profile-file", type=click.Path(dir_okay=False), default=None, help="As --profile, from this file.")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE", help="With --profile: override a key.")
@click.option("--gpu-costs", type=click.Choice(GPU_COSTS), default="datasheet", show_default=True,
              help="How the scenario's twin prices iterations (as bench sim); with --profile use "
                   "--set engine.gpu_costs=C.")
@click.option("--duration", default=3600.0, show_default=True, type=click.FloatRange(60.0, 86400.0),
              help="With --profile: seconds of the profile's traffic per run.")
def bench_tuner(scenario, workload, arrival, rps, model, hardware, seeds, static_trials, warm_trials, converge_window,
                converge_pp, study_storage, study_seeds, control, jobs, json_path, plot_dir, profile,
                profile_file, sets, gpu_costs, duration) -> None:
    """Does the online tuner beat the best static setting on shifting traffic? (twin, virtual time)"""
    if profile or profile_file:
        if gpu_costs != "datasheet":
            click.echo("error: --gpu-costs prices a scenario's twin; a profile's is --set engine.gpu_costs=C", err=True)
            sys.exit(2)
        _profile(profile, profile_file, sets, seeds, duration, jobs, json_path)
        return
    from superinfer.bench.tuner.main import BenchSpec, run_bench
    from superinfer.tuner.offline.evaluate import TwinEnv
    from superinfer.tuner.offline.scenario import trace_scenario

    from superinfer.tuner.offline.study import storage_url

    try:
        storage_url(study_storage)
    except ValueError as exc:
        click.echo(f"error: --study-storage: {exc}", err=True)
        sys.exit(2)
    scn = SCENARIOS[scenario]
    if workload or arrival or rps:
        scn = _trace(workload, arrival, rps, trace_scenario)
    env = TwinEnv()
    env = replace(env, model=model or scn.model, hardware=hardware or scn.hardware, gpu_costs=gpu_costs)
    # the warm start's study is of another trace: the scenario's own -alt when it has one
    warm = f"{scenario}-alt" if f"{scenario}-alt" in SCENARIOS and not workload else "shifting-alt"
    spec = BenchSpec(scenario=scn if workload else scenario, study_scenario=warm,
                     control="stationary" if control else None, seeds=seeds,
                     static_trials=static_trials, warm_trials=warm_trials, converge_window=converge_window,
                     converge_tol=converge_pp / 100.0, study_storage=study_storage, study_seeds=study_seeds,
                     jobs=jobs, env=env)
    quiet = json_path == "-"
    res = run_bench(spec, progress=None if quiet else (lambda m: click.echo(m, err=True)))
    res["command"] = "superinferd bench tuner " + " ".join(sys.argv[3:])
    if plot_dir:
        from superinfer.bench.tuner.plots import all_figures

        res["plots"] = all_figures(res, plot_dir)
    text = json.dumps(res, indent=1, default=float)
    if json_path == "-":
        click.echo(text)
        return
    if json_path:
        with open(json_path, "w") as fh:
            fh.write(text + "\n")
    _table(res)


def _trace(workload, arrival, rps, trace_scenario):
    """The scenario of ``--workload FILE --arrival trace --rps trace|R``; exit 2 with a message otherwise."""
    if not workload or arrival != "trace":
        click.echo("error: --workload FILE needs --arrival trace (a recorded trace replayed with its own arrivals; "
                   "synthetic phases are the built-in scenarios)", err=True)
        sys.exit(2)
    rate = None
    if rps not in (None, "trace"):
        try:
            rate = float(rps)
        except ValueError:
            rate = -1.0
        if not rate > 0:
            click.echo(f"error: --rps: expected 'trace' or a number > 0, got {rps!r}", err=True)
            sys.exit(2)
    try:
        return trace_scenario(workload, rate)
    except (ValueError, OSError) as exc:
        click.echo(f"error: --workload {workload}: {exc}", err=True)
        sys.exit(2)


def _profile(profile, profile_file, sets, seeds, duration, jobs, json_path) -> None:
    """``--profile``: superinfer.bench.tuner.profile; exit 2 on a bad profile."""
    from superinfer.bench.tuner.profile import run_profile_bench
    from superinfer.daemon.profiles import ProfileError

    quiet = json_path == "-"
    try:
        res = run_profile_bench(profile, profile_file, tuple(sets), seeds, duration, jobs,
                                progress=None if quiet else (lambda m: click.echo(m, err=True)))
    except (ProfileError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    res["command"] = "superinferd bench tuner " + " ".join(sys.argv[3:])
    text = json.dumps(res, indent=1, default=float)
    if quiet:
        click.echo(text)
        return
    if json_path:
        with open(json_path, "w") as fh:
            fh.write(text + "\n")
    s, d = res["settings"], res["tuner_minus_static"]
    click.echo(f"profile {s['profile']}: {s['workload']} at {s['rps']:g} req/s, {s['model']} on {s['hardware']}, "
               f"{s['seeds']} seeds x {s['duration_s']:g} s")
    for k in ("slo_attainment", "ttft_attainment", "tbt_attainment"):
        ci = d[k]["ci95_pp"] or [float("nan")] * 2
        click.echo(f"  {k:<16} static {_pp(res['mean']['static'][k])}  tuner {_pp(res['mean']['tuner'][k])}  "
                   f"tuner - static {d[k]['mean_pp']:+.2f} pp [{ci[0]:+.2f}, {ci[1]:+.2f}]")
    t = res["tuner"]
    click.echo(f"  tuner: {t['trials']} trials, {t['accepted']} accepted, {t['jumps']} jumps, "
               f"{t['rollbacks_per_hour']:.2f} rollbacks/h, first decision at {t['first_decision_s_median']} s (median)")
    click.echo(f"verdict: {res['verdict']} (rule {json.dumps(res['rule'])}; shipped: {s['shipped_mode']})")


def _table(res: dict) -> None:
    click.echo(f"{'strategy':<12} {'SLO att %':>22} {'TTFT %':>7} {'TBT %':>7}")
    for s, v in res["strategies"].items():
        lo, hi = v["slo_attainment_ci"]
        click.echo(f"{s:<12} {_pp(v['slo_attainment'])} [{_pp(lo)}, {_pp(hi)}]      {_pp(v['ttft_attainment'])} "
                   f"{_pp(v['tbt_attainment'])}")
    d = res.get("tuner_minus_static_best")
    if d:
        click.echo(f"tuner - static_best: {100 * d['mean']:+.2f} pp, 95 % t interval "
                   f"[{100 * d['ci_t95'][0]:+.2f}, {100 * d['ci_t95'][1]:+.2f}]")
    conv = res.get("studies", {}).get("static", {}).get("convergence")
    if conv:
        click.echo(f"baselines' study: {conv['trials']} trials, {'converged' if conv['converged'] else 'NOT converged'}"
                   f" (best feasible {conv['best_feasible']}, moved {conv['moved_last_window']} over the last "
                   f"{conv['window']}; unguarded best {conv['best_unguarded']}, guard binds: {conv['guard_binds']})")
    if "gap_closed" in res:
        gap = "n/a" if res["gap_closed"] is None else f"{res['gap_closed']:.2f}"
        click.echo(f"gap closed: {gap} (oracle - static_best {res['oracle_minus_static_best_pp']:.2f} pp);"
                   f" median recovery {res['recovery_median_s']:.0f} s, {res['recovery_median_trials']:.1f} trials")
    for name, t in res.get("targets", {}).items():
        verdict = "n/a" if t["met"] is None else "met" if t["met"] else "MISSED"
        click.echo(f"  target {name}: {verdict} {json.dumps({k: v for k, v in t.items() if k != 'met'}, default=float)}")
    click.echo(f"wall: {res['wall_s']}")
