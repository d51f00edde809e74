"""``superinferd bench kv``: the paper's Table 1 ablation of KV transfers (``ablation``; wired lazily from
``superinfer/cli.py``). Plot its ``--json`` with ``python -m superinfer.bench.kv.plot IN.json OUT.png``.

Exit codes (design §7): 0 ok, 1 failure, 2 usage error (bad option values included).
"""

from __future__ import annotations

import json

import click

from superinfer.duplexkv.cli import checked_block_bytes


@click.command("kv")
@click.option("--model", default="llama-3-8b", show_default=True, help="Model profile (block bytes, layers).")
@click.option("--block-size", default=16, show_default=True, type=int, help="Tokens per KV block.")
@click.option("--total-mb", type=int, default=None, help="MiB moved in EACH direction (default: 8192 on GPU, 32 on CPU).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--repeats", default=11, show_default=True, type=int, help="Interleaved repeats; rows report medians.")
@click.option("--run-blocks", default=8, show_default=True, type=int, help="Adjacent device blocks per run.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_kv(model: str, block_size: int, total_mb: int | None, device: str, repeats: int, run_blocks: int,
             as_json: bool) -> None:
    """Table 1 ablation: naive, merged 4 MB, merged kernel, full duplex, ideal (same bytes per row)."""
    from superinfer.bench.kv.ablation import run_bench

    checked_block_bytes(model, block_size)
    if total_mb is not None and total_mb <= 0:
        raise click.BadParameter(f"must be > 0, got {total_mb}", param_hint="--total-mb")
    if run_blocks <= 0:
        raise click.BadParameter(f"must be > 0, got {run_blocks}", param_hint="--run-blocks")
    try:
        result = run_bench(
            model=model, block_size=block_size, device=device, repeats=repeats, run_blocks=run_blocks,
            bytes_each_way=None if total_mb is None else total_mb << 20,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(result))
        return
    cpu = result["device"] == "cpu"
    click.echo(f"{result['device']} ({result['device_name']}): {model}, {result['block_bytes']} B blocks, "
               f"{result['bytes_each_way'] / 2**20:.0f} MiB each way, median of {repeats}")
    head = f"{'row':<14}{'ms':>10}{'GB/s':>9}{'/ideal':>8}" + (f"{'/copy_':>8}" if cpu else "")
    click.echo(head)
    for row in result["rows"]:
        line = f"{row['row']:<14}{row['ms']:>10.2f}{row['gbps']:>9.2f}{row['ratio_to_ideal']:>8.2f}"
        if cpu and "ratio_to_copy" in row:
            line += f"{row['ratio_to_copy']:>8.2f}"
        click.echo(line)
    if result["note"]:
        click.echo(f"note: {result['note']}", err=True)
