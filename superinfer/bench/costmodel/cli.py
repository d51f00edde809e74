"""`superinferd bench opprofile`: profile one layer's operators on this host's GPU, in Vidur's format."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from superinfer.sim.models import get_model, model_names


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=what) from None
    if not values or any(v <= 0 for v in values):
        raise click.BadParameter(f"expected integers > 0, got {text!r}", param_hint=what)
    return values


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
def opprofile(out_dir: Path, gpu: str, models: str, tps: str, tokens: str | None, device: str, reps: int,
              trials: int, deadline_s: float | None) -> None:
    """Time one transformer layer's operators (GEMMs, norms, RoPE, activation, add) per TP shard and
    token count on this host's GPU, and write them in the format of the shipped GPU profiles."""
    from superinfer.bench.costmodel.profile import DEFAULT_TOKENS, run_profile

    try:
        chosen = [get_model(m) for m in models.split(",") if m.strip()]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--models") from None
    token_list = _ints(tokens, "--tokens") if tokens else list(DEFAULT_TOKENS)
    try:
        meta = run_profile(chosen, _ints(tps, "--tp"), token_list, out_dir, gpu, device=device, reps=reps,
                           trials=trials, deadline_s=deadline_s, log=lambda m: click.echo(m, err=True))
    except RuntimeError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(meta, indent=2))
