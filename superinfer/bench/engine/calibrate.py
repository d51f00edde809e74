"""``superinferd calibrate --model DIR``: measure this engine's step times, write the simulator's
calibration file (:mod:`superinfer.sim.calibration`).

A :class:`TimingScheduler` (vLLM's scheduler plus a stopwatch) records, for every engine step, the
prefill tokens, prefill attention pairs, decoding sequences and KV tokens read, and the wall time from
``schedule()`` to the end of ``update_from_output`` (the whole iteration: scheduling, forward, sampling,
output processing). Two sweeps give the fit enough spread: prefill-only batches (prompt lengths x batch
sizes, one output token) and decode batches (batch sizes x context lengths); a first pass over all
shapes is discarded (on CPU the first batch of a new shape costs up to ~0.5 s of one-off setup). Coefficients come from
:func:`superinfer.sim.calibration.fit` (non-negative least squares); the raw samples are kept in the file.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

#: filled by TimingScheduler instances in this process (the engine runs in-process)
SAMPLES: list[tuple[int, int, int, float, float]] = []


def _timing_scheduler_cls() -> type:
    from vllm.v1.core.sched.scheduler import Scheduler

    class TimingScheduler(Scheduler):
        """Stock vLLM scheduling; records (prefill tokens, decode seqs, kv tokens, seconds, attn pairs)."""

        _t0 = 0.0
        _step: tuple[int, int, int, float] | None = None

        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = super().schedule(*args, **kwargs)
            prefill = decode = kv = 0
            pairs = 0.0
            for rid, n in out.num_scheduled_tokens.items():
                req = self.requests[rid]
                start = req.num_computed_tokens - n  # _update_after_schedule already advanced it
                if n == 1 and start >= req.num_prompt_tokens:
                    decode += 1
                    kv += start + 1
                else:
                    prefill += n
                    pairs += n * start + n * (n + 1) / 2
            self._t0, self._step = t0, (prefill, decode, kv, pairs)
            return out

        def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
            out = super().update_from_output(*args, **kwargs)
            if self._step is not None and (self._step[0] or self._step[1]):
                p, d, k, pairs = self._step
                SAMPLES.append((p, d, k, time.perf_counter() - self._t0, pairs))
            self._step = None
            return out

    return TimingScheduler


# vLLM resolves scheduler classes by qualified name: expose the class lazily under a module attribute.
def __getattr__(name: str) -> Any:
    if name == "TimingScheduler":
        cls = _timing_scheduler_cls()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def engine_model(model_dir: str | None, build_tiny: str | None, threads: int | None) -> tuple[str, str, str]:
    """What an engine measurement runs on: ``(model folder, vLLM distribution, version)`` from exactly one of
    ``--model DIR`` / ``--build-tiny DIR`` (the tiny model is built there), torch's threads set first; a click
    usage error otherwise, a click error without vLLM."""
    from superinfer.vllm.compat import check_vllm_version

    if (model_dir is None) == (build_tiny is None):
        raise click.UsageError("give exactly one of --model DIR or --build-tiny DIR")
    try:
        dist, version = check_vllm_version()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    if build_tiny:
        from superinfer.daemon.backends.tiny import build_tiny_llama

        model_dir = str(build_tiny_llama(Path(build_tiny)))
    if threads:
        import torch

        torch.set_num_threads(threads)
    return str(model_dir), dist, version


def measure(model: str, *, block_size: int = 32, max_model_len: int = 512, repeats: int = 2,
            prompt_lens: tuple[int, ...] = (16, 64, 128, 256, 448), batch_sizes: tuple[int, ...] = (1, 4, 16, 32),
            contexts: tuple[int, ...] = (32, 128, 384)) -> list[Any]:
    """Run the sweeps on an in-process engine; return :class:`superinfer.sim.calibration.Sample` rows."""
    from vllm import SamplingParams

    from superinfer.bench.engine.replay import EngineSpec, open_engine
    from superinfer.sim.calibration import Sample

    SAMPLES.clear()
    spec = EngineSpec(model=model, policy="vllm", num_blocks=4096, block_size=block_size, max_model_len=max_model_len,
                      scheduler_cls="superinfer.bench.engine.calibrate.TimingScheduler")
    with tempfile.TemporaryDirectory() as tmp, open_engine(spec, Path(tmp)) as llm:
        warm = [{"prompt_token_ids": [5] * 32}] * 4
        llm.generate(warm, SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)
        SAMPLES.clear()
        for rep in range(repeats + 1):  # pass 0 meets every batch shape once (first-shape costs): dropped
            if rep == 1:
                SAMPLES.clear()
            for plen in prompt_lens:  # prefill sweep
                for bs in batch_sizes:
                    if plen * bs > 8192:
                        continue
                    prompts = [{"prompt_token_ids": [(7 * i + j) % 300 + 3 for j in range(plen)]} for i in range(bs)]
                    llm.generate(prompts, SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
            for ctx in contexts:  # decode sweep: each generate gives ~32 decode steps at growing context
                for bs in batch_sizes:
                    prompts = [{"prompt_token_ids": [(11 * i + j) % 300 + 3 for j in range(ctx)]} for i in range(bs)]
                    llm.generate(prompts, SamplingParams(max_tokens=32, ignore_eos=True), use_tqdm=False)
    return [Sample(p, d, k, s, pairs) for p, d, k, s, pairs in SAMPLES]


def robust_fit(samples: list[Any], *, spike: float = 2.5, rounds: int = 4) -> tuple[Any, int]:
    """:func:`superinfer.sim.calibration.fit`, refitted without steps slower than ``spike`` x the model.

    On a shared CPU host a step is sometimes descheduled for tens of milliseconds; least squares on
    absolute times then fits those spikes (a large intercept) and mispredicts every short step. Only
    upward outliers are dropped (contention never makes a step faster). Returns (coefficients, dropped).
    """
    from superinfer.sim.calibration import fit

    kept = list(samples)
    coef = fit(kept)
    for _ in range(rounds):
        pred = [max(1e-6, coef.predict(s.prefill_tokens, s.decode_seqs, s.kv_tokens, s.prefill_attn_pairs))
                for s in kept]
        keep = [s for s, p in zip(kept, pred) if s.measured_s <= spike * p]
        if len(keep) == len(kept) or len(keep) < 10:
            break
        kept = keep
        coef = fit(kept)
    return coef, len(samples) - len(kept)


def fit_mape(coef: Any, samples: list[Any]) -> float:
    """Mean absolute percentage error of ``coef``'s step times over ``samples`` (a fraction)."""
    pred = [coef.predict(s.prefill_tokens, s.decode_seqs, s.kv_tokens, s.prefill_attn_pairs) for s in samples]
    return sum(abs(p - s.measured_s) / s.measured_s for p, s in zip(pred, samples)) / len(samples)


@click.command("calibrate")
@click.option("--model", "model_dir", default=None, type=click.Path(file_okay=False), help="Model directory.")
@click.option("--build-tiny", default=None, type=click.Path(file_okay=False), help="Build the tiny Llama here and use it.")
@click.option("--output", "-o", default="calibration.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--label", default=None, help="Model label stored in the file (default: the directory name).")
@click.option("--hardware", default="cpu", show_default=True, help="Hardware label stored in the file.")
@click.option("--block-size", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--max-model-len", default=512, show_default=True, type=click.IntRange(min=64))
@click.option("--repeats", default=2, show_default=True, type=click.IntRange(1, 20))
@click.option("--threads", default=None, type=click.IntRange(min=1),
              help="Engine CPU threads (torch.set_num_threads first); match what `bench vllm --threads` used.")
@click.option("--profiles", "profiles_dir", default=None, type=click.Path(file_okay=False),
              help="Fit the twin's GPU terms (GEMM, elementwise, all-reduce, CPU overhead) to measured Vidur-format "
                   "profiles in this folder instead of running an engine; --hardware then overrides the GPU "
                   "folders' datasheet profile.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.pass_context
def calibrate(ctx: click.Context, model_dir: str | None, build_tiny: str | None, output: str, label: str | None,
              hardware: str, block_size: int, max_model_len: int, repeats: int, threads: int | None,
              profiles_dir: str | None, as_json: bool) -> None:
    """Measure engine step times on this vLLM engine and write a simulator calibration file, or (with
    --profiles) fit the GPU cost model's terms to measured GPU profiles."""
    if profiles_dir is not None:
        if model_dir or build_tiny:
            raise click.UsageError("--profiles fits measured files: give it without --model/--build-tiny")
        from superinfer.bench.costmodel.cli import calibrate_from_profiles

        explicit = ctx.get_parameter_source("hardware") is not click.core.ParameterSource.DEFAULT
        calibrate_from_profiles(Path(profiles_dir), Path(output), hardware if explicit else None, as_json)
        return
    from superinfer.sim.calibration import Calibration, save

    model_dir, dist, version = engine_model(model_dir, build_tiny, threads)
    samples = measure(str(model_dir), block_size=block_size, max_model_len=max_model_len, repeats=repeats)
    if len(samples) < 10:
        raise click.ClickException(f"only {len(samples)} engine steps measured; cannot fit a calibration")
    coef, dropped = robust_fit(samples)
    cal = Calibration(engine=f"{dist} {version}", model=label or Path(str(model_dir)).name, hardware=hardware,
                      date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), coefficients=coef,
                      block_size=block_size, samples=samples)
    save(cal, output)
    mape = fit_mape(coef, samples)
    summary = {"command": "superinferd calibrate " + " ".join(sys.argv[2:]), "output": output, "samples": len(samples),
               "coefficients": cal.to_json_dict()["coefficients"], "fit_mape_step_time": round(mape, 4),
               "dropped_outliers": dropped}
    click.echo(json.dumps(summary, indent=1) if as_json else
               f"wrote {output}: {len(samples)} steps, step-time MAPE of the fit {100 * mape:.1f} %")
