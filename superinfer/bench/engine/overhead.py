"""``superinferd bench overhead``: vLLM's own host time per engine step, by batch size (issue 29).

The grounded twin prices an iteration as the GPU's work plus the engine's CPU work (schedule, prepare the
inputs, build attention metadata, turn sampled ids into outputs, update the requests). The only measured
CPU line it had came from another engine (Vidur's Sarathi-Serve on an A100 host). This bench measures
vLLM's: it runs the real engine in this process on CPU (the tiny model; ``CPUModelRunner`` is vLLM's
``GPUModelRunner`` with a CPU attention backend, so its input preparation is the GPU runner's code) and
splits every decode step's wall time, from ``schedule()`` to the end of ``update_from_output``, into

* **device work**: the model's forward, ``compute_logits`` and the sampler (kernels on a GPU), and
* **host work**: everything else, what a GPU host's CPU would spend on that step.

Decode batches of each size run ``steps`` tokens, ``repeats`` times after one discarded pass (first
shapes cost one-off setup); the host time's median per batch size is fitted to ``base + per_seq · B`` by
least squares, clipped at zero. The stock scheduler runs synchronously here (the timing needs step
boundaries); on a GPU, vLLM's default async scheduling overlaps this host work with the GPU's (see
:mod:`superinfer.sim.grounded`). The figures are this host's CPU: a GPU server's cores are usually faster.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

def _batch_sizes(ctx: Any, param: Any, value: str) -> tuple[int, ...]:
    """click callback of ``--batch-sizes``: two or more distinct positive integers, sorted."""
    try:
        sizes = tuple(sorted({int(x) for x in value.split(",") if x.strip()}))
    except ValueError:
        sizes = ()
    if len(sizes) < 2 or sizes[0] < 1:
        raise click.BadParameter(f"expected two or more distinct integers >= 1, comma separated; got {value!r}")
    return sizes


def _timed(fn: Any, acc: list[float]) -> Any:
    """``fn`` wrapped to add its wall time to ``acc[0]``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[0] += time.perf_counter() - t0
    return wrapper


def measure(model: str, *, batch_sizes: tuple[int, ...], steps: int = 24, repeats: int = 3,
            prompt_len: int = 64) -> dict[int, list[tuple[float, float]]]:
    """``{batch size: [(step s, device s), ...]}`` for the decode steps of an in-process engine on ``model``."""
    from vllm import SamplingParams

    import superinfer.bench.engine.calibrate as cal
    from superinfer.bench.engine.replay import EngineSpec, open_engine

    need = max(batch_sizes) * -(-(prompt_len + steps) // 32)
    spec = EngineSpec(model=model, policy="vllm", num_blocks=max(need + 64, 256), block_size=32, max_model_len=512,
                      scheduler_cls="superinfer.bench.engine.calibrate.TimingScheduler",
                      max_num_seqs=max(batch_sizes), max_num_batched_tokens=max(2048, max(batch_sizes) * prompt_len))
    device: list[float] = [0.0]
    per_step: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, open_engine(spec, Path(tmp)) as llm:
        core = llm.llm_engine.engine_core.engine_core
        worker = core.model_executor.driver_worker
        runner = getattr(worker, "worker", worker).model_runner
        runner.model.forward = _timed(runner.model.forward, device)
        runner.model.compute_logits = _timed(runner.model.compute_logits, device)
        runner.sampler.forward = _timed(runner.sampler.forward, device)
        update = core.scheduler.update_from_output

        def update_from_output(*args: Any, **kwargs: Any) -> Any:
            recorded = len(cal.SAMPLES)
            out = update(*args, **kwargs)  # TimingScheduler records a step that ran tokens
            if len(cal.SAMPLES) > recorded:
                per_step.append(device[0])  # so per_step[i] is cal.SAMPLES[i]'s device time
            device[0] = 0.0
            return out

        core.scheduler.update_from_output = update_from_output
        rows: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for rep in range(repeats + 1):
            for bs in batch_sizes:
                cal.SAMPLES.clear()
                per_step.clear()
                prompts = [{"prompt_token_ids": [(11 * i + j) % 300 + 3 for j in range(prompt_len)]} for i in range(bs)]
                llm.generate(prompts, SamplingParams(max_tokens=steps, ignore_eos=True), use_tqdm=False)
                if rep == 0:
                    continue  # first pass: one-off setup of every shape
                for (prefill, decode, _kv, step_s, _pairs), dev_s in zip(cal.SAMPLES, per_step, strict=True):
                    if prefill == 0 and decode == bs:
                        rows[bs].append((step_s, dev_s))
    return dict(rows)


def summarise(rows: dict[int, list[tuple[float, float]]]) -> dict[str, Any]:
    """Per batch size medians (ms) and the fitted host line (s; the line Vidur's CPU rows are fitted with)."""
    from superinfer.bench.costmodel.fit import fit_line

    table = []
    for bs in sorted(rows):
        steps = rows[bs]
        table.append({"batch": bs, "steps": len(steps),
                      "step_ms_p50": round(1e3 * statistics.median(s for s, _ in steps), 4),
                      "device_ms_p50": round(1e3 * statistics.median(d for _, d in steps), 4),
                      "host_ms_p50": round(1e3 * statistics.median(s - d for s, d in steps), 4)})
    base, per_seq = fit_line([(r["batch"], r["host_ms_p50"] * 1e-3) for r in table])
    errs = [abs(base + per_seq * r["batch"] - r["host_ms_p50"] * 1e-3) / (r["host_ms_p50"] * 1e-3) for r in table]
    return {"rows": table, "fit": {"base_s": base, "per_seq_s": per_seq,
                                   "median_ape_pct": round(100 * statistics.median(errs), 2)}}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@click.command("overhead")
@click.option("--model", "model_dir", default=None, type=click.Path(exists=True, file_okay=False),
              help="A local HF model folder (no hub).")
@click.option("--build-tiny", default=None, type=click.Path(file_okay=False),
              help="Build the tiny random Llama in this folder and measure it (the figures are the engine's, "
                   "not the model's: its device work is split out).")
@click.option("--batch-sizes", default="1,8,32,64,128,256", show_default=True, callback=_batch_sizes,
              help="Decoding sequences per step, comma separated (at least two sizes).")
@click.option("--steps", default=24, show_default=True, type=click.IntRange(4, 400), help="Decode steps per batch.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--threads", default=None, type=click.IntRange(min=1), help="Engine CPU threads (torch.set_num_threads).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False), help="Write the result here.")
def bench_overhead(model_dir: str | None, build_tiny: str | None, batch_sizes: tuple[int, ...], steps: int,
                   repeats: int, threads: int | None, json_out: str | None) -> None:
    """Measure vLLM's host (CPU) time per decode step by batch size and fit base + per_seq · batch."""
    from superinfer.bench.engine.calibrate import engine_model

    model_dir, dist, version = engine_model(model_dir, build_tiny, threads)
    rows = measure(str(model_dir), batch_sizes=batch_sizes, steps=steps, repeats=repeats)
    missing = [b for b in batch_sizes if not rows.get(b)]
    if missing:
        raise click.ClickException(f"no pure decode step of batch size {missing} was measured")
    out = {"command": "superinferd bench overhead " + " ".join(sys.argv[3:]), "engine": f"{dist} {version}",
           "host_cpu": _cpu_name(), "threads": threads,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **summarise(rows)}
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(out, indent=1) + "\n")
    for r in out["rows"]:
        click.echo(f"batch {r['batch']:4d}: step {r['step_ms_p50']:8.3f} ms  device {r['device_ms_p50']:8.3f} ms  "
                   f"host {r['host_ms_p50']:8.3f} ms  ({r['steps']} steps)")
    f = out["fit"]
    click.echo(f"host = {1e3 * f['base_s']:.3f} ms + {1e6 * f['per_seq_s']:.2f} us x batch "
               f"(median error {f['median_ape_pct']} %) on {out['host_cpu']}, {out['engine']}")
