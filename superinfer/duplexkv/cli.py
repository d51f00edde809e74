"""``superinferd probe`` (wired lazily from ``superinfer/cli.py``; ``superinferd bench kv`` is
``superinfer.bench.kv.cli``, which shares :func:`checked_block_bytes`).

Exit codes (design §7): 0 ok, 1 failure, 2 usage error (bad option values included).
"""

from __future__ import annotations

import json

import click

from superinfer.duplexkv.backends import NAMES as BACKENDS

DEFAULT_ITERATION_S = 0.05  # a 50 ms decode iteration: the paper's TBT SLO is 100 ms


def checked_block_bytes(model: str, block_size: int) -> int:
    """Bytes of one KV block of ``model`` (a profile name); a bad value is a usage error naming its option."""
    from superinfer.sim.models import get_model

    if block_size <= 0:
        raise click.BadParameter(f"must be > 0, got {block_size}", param_hint="--block-size")
    try:
        return get_model(model).kv_bytes_per_token * block_size
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from exc


@click.command("probe")
@click.option("--model", default="llama-3-8b", show_default=True, help="Model profile that sets the block bytes.")
@click.option("--block-size", default=16, show_default=True, type=int, help="Tokens per KV block.")
@click.option("--iteration-s", default=DEFAULT_ITERATION_S, show_default=True, type=float, help="Engine iteration time for B_xfer.")
@click.option("--eta", default=0.8, show_default=True, type=float, help="Share of the iteration copies may use.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="auto", show_default=True)
@click.option("--size-mb", type=int, default=None, help="MiB per direction (default: 1024 on GPU, 64 on CPU).")
@click.option("--repeats", default=5, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def probe(model: str, block_size: int, iteration_s: float, eta: float, device: str, backend: str,
          size_mb: int | None, repeats: int, as_json: bool) -> None:
    """Measure host<->device bandwidth, one way and both at once, and derive B_xfer (design §4)."""
    from superinfer.duplexkv.probe import run_probe

    block_bytes = checked_block_bytes(model, block_size)
    try:
        result = run_probe(
            block_bytes, device=device, backend=backend, iteration_s=iteration_s, eta=eta,
            bytes_each_way=None if size_mb is None else size_mb << 20, repeats=repeats,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    data = {"model": model, "block_size": block_size, **result.as_dict()}
    if as_json:
        click.echo(json.dumps(data))
        return
    click.echo(f"device        {data['device']} ({data['device_name']}), backend {data['backend']}")
    click.echo(f"block         {block_size} tokens of {model} = {data['block_bytes']} bytes")
    click.echo(f"one way       H2D {data['h2d_gbps']:.2f} GB/s   D2H {data['d2h_gbps']:.2f} GB/s")
    click.echo(f"both at once  H2D {data['duplex_h2d_gbps']:.2f} GB/s   D2H {data['duplex_d2h_gbps']:.2f} GB/s"
               f"   duplex factor {data['duplex_factor']:.2f}")
    click.echo(f"B_xfer        {data['b_xfer_blocks']} blocks per direction per {iteration_s * 1e3:g} ms iteration (eta {eta})")
    if data["note"]:
        click.echo(f"note          {data['note']}", err=True)

