"""`superinferd bench costmodel` (the twin scored against measured GPU profiles) and `superinferd bench
opprofile` (profile one layer's operators on this host's GPU, in the same format)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from superinfer.sim.models import get_model, model_names
from superinfer.sim.options import positive_ints

#: the measured profiles shipped with the package (README.md there says where each comes from)
SHIPPED_PROFILES = Path(__file__).resolve().parent / "profiles"


def _points(text: str) -> list[tuple[str, int, int]]:
    out = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or parts[0] not in ("decode", "prefill") or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
            raise click.BadParameter(f"expected phase:batch:kv_len (phase decode or prefill), got {item!r}",
                                     param_hint="--attention-points")
        out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


@click.command("opprofile")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write compute/<gpu>/<model>/mlp.csv and compute/<gpu>/meta.json into.")
@click.option("--gpu", default="h200", show_default=True, help="Folder name of this GPU in the output.")
@click.option("--models", default="llama-3-8b,qwen2.5-32b,llama-3-70b", show_default=True,
              help=f"Comma-separated models ({', '.join(model_names())}).")
@click.option("--tp", "tps", default="1,2,4,8", show_default=True, help="TP degrees whose shard to profile.")
@click.option("--tokens", default=None, help="Comma-separated token counts (default: 1 to 16384, 23 points).")
@click.option("--device", default="cuda", show_default=True, help="cuda, or cpu to test the plumbing.")
@click.option("--reps", default=20, show_default=True, type=click.IntRange(1, 1000),
              help="Launches captured per CUDA graph.")
@click.option("--trials", default=7, show_default=True, type=click.IntRange(1, 1000),
              help="Timed samples per operator.")
@click.option("--deadline-s", default=None, type=click.FloatRange(min=1.0),
              help="Stop after the (model, TP) running when this many seconds have passed.")
@click.option("--attention/--no-attention", default=True, show_default=True,
              help="Also time decode and prefill attention per shard (attention.csv).")
@click.option("--attention-points", default=None,
              help="Attention points as phase:batch:kv_len, comma-separated (default: 20 decode, 5 prefill).")
def opprofile(out_dir: Path, gpu: str, models: str, tps: str, tokens: str | None, device: str, reps: int,
              trials: int, deadline_s: float | None, attention: bool, attention_points: str | None) -> None:
    """Time one transformer layer's operators (GEMMs, norms, RoPE, activation, add) per TP shard and
    token count on this host's GPU, and write them in the format of the shipped GPU profiles."""
    from superinfer.bench.costmodel.profile import DEFAULT_TOKENS, run_profile

    try:
        chosen = [get_model(m) for m in models.split(",") if m.strip()]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--models") from None
    token_list = positive_ints(tokens, "--tokens") if tokens else list(DEFAULT_TOKENS)
    pts = [] if not attention else (_points(attention_points) if attention_points else None)
    try:
        meta = run_profile(chosen, positive_ints(tps, "--tp"), token_list, out_dir, gpu, device=device, reps=reps,
                           trials=trials, deadline_s=deadline_s, log=lambda m: click.echo(m, err=True),
                           attention_points=pts)
    except RuntimeError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(meta, indent=2))


def _print_report(report: dict) -> None:
    c = report["compute"]
    if c.get("rows"):
        click.echo(f"{report['model']} - compute: {c['rows']} rows; the layer's four GEMMs: median error "
                   f"{c['median_ape_pct']} %, P90 {c['p90_ape_pct']} %, bias {c['bias_pct']:+} % (+ = too slow); "
                   f"the whole layer: median {c['layer_median_ape_pct']} %, P90 {c['layer_p90_ape_pct']} % "
                   f"(norms, RoPE, activation, adds: {c['elementwise_share_pct']} % of it)")
        click.echo(f"  {'gpu':<6}{'hardware':<11}{'model':<14}{'tp':>3} {'tokens':<10}{'rows':>5}  GEMMs: {'med%':>6}"
                   f"{'p90%':>7}{'bias%':>8}  layer: {'med%':>6}{'p90%':>7}{'elem%':>7}")
        for g in c["by_model"] + c["groups"]:
            tp = g.get("tp", "all")
            click.echo(f"  {g['gpu']:<6}{g['hardware']:<11}{g['model']:<14}{tp:>3} {g.get('tokens', 'all'):<10}"
                       f"{g['rows']:>5}         {g['median_ape_pct']:>6}{g['p90_ape_pct']:>7}{g['bias_pct']:>+8}"
                       f"         {g['layer_median_ape_pct']:>6}{g['layer_p90_ape_pct']:>7}"
                       f"{g['elementwise_share_pct']:>7}")
    at = report.get("attention", {})
    if at.get("rows"):
        click.echo(f"attention: {at['rows']} rows, median error {at['median_ape_pct']} %, P90 {at['p90_ape_pct']} %, "
                   f"bias {at['bias_pct']:+} %")
        for g in at["by_phase"]:
            click.echo(f"  {g['gpu']:<6}{g['phase']:<9}{g['rows']:>5}{g['median_ape_pct']:>9}{g['p90_ape_pct']:>8}"
                       f"{g['bias_pct']:>+8}")
    a = report["all_reduce"]
    if a.get("rows"):
        parts = [f"{k.replace('_', ' ')}: median {a[k]['median_ape_pct']} %" for k in ("below_1MiB", "from_1MiB") if k in a]
        click.echo(f"all-reduce: {a['rows']} rows, median error {a['median_ape_pct']} %, P90 {a['p90_ape_pct']} % "
                   f"({'; '.join(parts)})")
        click.echo(f"  {'folder':<22}{'fabric':<15}{'ranks':>5} {'size':<12}{'rows':>5}{'median%':>9}{'p90%':>8}{'bias%':>8}")
        for g in a["groups"]:
            click.echo(f"  {g['folder']:<22}{g['fabric']:<15}{g['ranks']:>5} {g['size']:<12}{g['rows']:>5}"
                       f"{g['median_ape_pct']:>9}{g['p90_ape_pct']:>8}{g['bias_pct']:>+8}")
    p = report["cpu"]
    if p.get("rows"):
        click.echo(f"cpu overhead: {p['rows']} rows, median error {p['median_ape_pct']} %, bias {p['bias_pct']:+} %")
        for g in p["groups"]:
            click.echo(f"  {g['gpu']:<6} tp {g['tp']:<3}{g['rows']:>5}{g['median_ape_pct']:>9}{g['bias_pct']:>+8}")


_PROFILES_HELP = ("Folder of Vidur-format profiles (compute/<gpu>/<model>/mlp.csv and attention.csv, "
                  "network/<fabric>/all_reduce.csv, cpu/<gpu>/cpu_overheads.csv). Default: the measured A100/H100/H200 profiles shipped with superinfer.")


@click.command("costmodel")
@click.option("--profiles", "profiles_dir", type=click.Path(file_okay=False, path_type=Path), default=SHIPPED_PROFILES,
              show_default=False, help=_PROFILES_HELP)
@click.option("--hardware", default=None, help="Score every compute and CPU row with this hardware profile "
                                                "(default: from each GPU folder's name).")
@click.option("--terms", "terms_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Score the fitted GPU terms in this file (superinferd calibrate --profiles) instead of the "
                   "twin's built-in profiles.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the report as JSON to this file ('-': print JSON instead of the tables).")
def costmodel(profiles_dir: Path, hardware: str | None, terms_path: Path | None, json_out: Path | None) -> None:
    """Score the twin's GPU cost model, as it is (no fitting), against every row of measured GPU profiles:
    error per (GPU, model, TP, token band) for one layer's GEMMs, and per (fabric, ranks, size band) for
    all-reduce. Exit 2 on a bad or unknown file, naming it and the line."""
    from superinfer.bench.costmodel import fit
    from superinfer.bench.costmodel.files import ProfileError, read_profiles
    from superinfer.bench.costmodel.score import score

    try:
        terms = fit.load(terms_path) if terms_path is not None else None
        report = score(read_profiles(profiles_dir), hardware, terms)
    except (ProfileError, ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    report["command"] = " ".join(["superinferd", "bench", "costmodel", *sys.argv[3:]])
    if json_out is not None and str(json_out) == "-":
        click.echo(json.dumps(report, indent=2))
        return
    _print_report(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2) + "\n")
        click.echo(f"wrote {json_out}")


def calibrate_from_profiles(profiles_dir: Path, output: Path, hardware: str | None, as_json: bool) -> None:
    """``superinferd calibrate --profiles DIR``: fit the GPU terms and write them; exit 2 on a bad file."""
    from superinfer.bench.costmodel import fit
    from superinfer.bench.costmodel.files import ProfileError, read_profiles
    from superinfer.bench.costmodel.score import hardware_for, score

    try:
        profiles = read_profiles(profiles_dir)
        terms = fit.fit(profiles, lambda gpu: hardware_for(gpu, hardware))
    except ProfileError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    output.parent.mkdir(parents=True, exist_ok=True)
    fit.save(terms, output)
    report = score(profiles, hardware, terms)
    if as_json:
        click.echo(json.dumps({"terms": fit.to_json_dict(terms), "score": report}, indent=2))
        return
    for name, g in terms.gpus.items():
        click.echo(f"{name} ({g.hardware}, {g.rows} rows): GEMMs reach {g.gemm_eff_flops:.0%} of peak FLOP/s and "
                   f"{g.gemm_eff_bw:.0%} of HBM bandwidth, {g.gemm_fixed_s * 1e6:.1f} us fixed, sharpness "
                   f"{g.gemm_sharpness}; elementwise {g.elementwise_eff_bw:.0%} of HBM bandwidth, "
                   f"{g.elementwise_fixed_s * 1e6:.1f} us fixed")
    for name, at in terms.attention.items():
        click.echo(f"{name} attention ({at.rows} rows): {at.eff_flops:.0%} of peak FLOP/s, {at.eff_bw:.0%} of HBM "
                   f"bandwidth, {at.fixed_s * 1e6:.1f} us fixed")
    for key, link in terms.all_reduce.items():
        click.echo(f"all-reduce {key}: {link.latency_s * 1e6:.1f} us + size / {link.bw / 1e9:.0f} GB/s")
    for key, cpu in terms.cpu.items():
        click.echo(f"cpu {key}: {cpu.base_s * 1e3:.2f} ms + {cpu.per_seq_s * 1e3:.3f} ms per sequence")
    _print_report(report)
    click.echo(f"wrote {output}")
