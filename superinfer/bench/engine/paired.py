"""``bench vllm``'s loads as shares of a measured capacity, its interleaved run order and its paired statistics.

These hosts' speed moves 2-3x between days and +-30 % within minutes, so an absolute request rate means
something else on every run. ``--capacity-share 0.8,1.2`` sets each load as a share of the engine's
**capacity**, measured at the start of the same run: ``--capacity-requests K`` requests drawn from the
workload (seed 0, lengths as the runs get them) all arrive at t = 0 on the stock engine (policy ``vllm``,
the runs' num_blocks, block_size, max_model_len, max_num_seqs and max_num_batched_tokens), and capacity =
K / the time from t = 0 until the last of them finishes, in requests/s. The burst runs twice in one engine
and the second is timed: on CPU a process sets up its kernels once per batch shape (docs/fidelity.md,
``new_shape``), and in a fresh process the first burst took 1.3x the second (tiny Llama, 8 requests:
0.127 s against 0.098 s; ``warmup_makespan_s``); the prefix cache is reset in between so the timed burst
computes its prompts. ``--capacity-end`` measures it again after the runs, so a host that drifted during
them shows (``capacity_end``, its ``drift``: end / start).

Runs are paired: for each seed, each load, every policy replays the same requests (same seed, same draw),
in an order that rotates with the seed and the load so that no policy always runs first. ``paired``
holds, per load and pair ``a:b`` (``--pairs``), the per-seed differences a - b of the attainments in
percentage points and the per-seed ratio a / b of ``throughput_tok_s``, each with its mean and a Student-t
95 % interval over the seeds (:func:`superinfer.sim.metrics.t_interval`; ``null`` with fewer than two).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.bench.engine.hostload import HostLoad
from superinfer.sim.metrics import t_interval

CAPACITY_HOW = ("requests / makespan_s: `requests` requests drawn from the workload (seed 0, lengths as the "
                "runs') all arriving at t=0 on the stock engine (policy vllm, the runs' num_blocks, block_size, "
                "max_model_len, max_num_seqs, max_num_batched_tokens); makespan_s: from t=0 until the last "
                "one finishes; timed on the second of two such bursts in one engine (the first sets up the "
                "process's kernels for the burst's batch shapes; the prefix cache is reset in between)")
#: the attainments whose paired differences are reported, in percentage points
PAIRED_KEYS = ("slo_attainment", "tbt_attainment", "ttft_attainment")
#: the run's throughput (``superinfer.sim.metrics.run_metrics``), reported as a paired ratio
THROUGHPUT_KEY = "throughput_tok_s"

#: (workload, arrival, rps, duration, seed, max_len) -> (workload, arrivals, prompt lengths, output lengths,
#: prompts as token ids), as ``superinfer.bench.engine.run._requests``
Draw = Callable[[str, str, float, float, int, int], tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[list[int]]]]


def parse_shares(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> list[float] | None:
    """``--capacity-share``: a comma list of distinct finite numbers > 0 (None when not given)."""
    if value is None:
        return None
    shares: list[float] = []
    for item in str(value).split(","):
        try:
            s = float(item.strip())
        except ValueError:
            raise click.BadParameter(f"{item.strip()!r} is not a number (expected e.g. 0.8,1.2,1.6)") from None
        if not math.isfinite(s) or s <= 0:
            raise click.BadParameter(f"every share must be a finite number > 0, got {item.strip()!r}")
        if s in shares:
            raise click.BadParameter(f"share {s:g} is given twice")
        shares.append(s)
    return shares


def parse_pairs(value: str | None, policies: Sequence[str]) -> list[tuple[str, str]]:
    """``--pairs a:b,...``: each a policy that runs, a != b, no pair twice. Not given: every policy against
    ``vllm`` and ``lvf`` against ``lvf-hbm``, those of them whose two policies both run."""
    if value is None:
        pairs = [(p, "vllm") for p in policies if p != "vllm" and "vllm" in policies]
        if "lvf" in policies and "lvf-hbm" in policies:
            pairs.append(("lvf", "lvf-hbm"))
        return pairs
    out: list[tuple[str, str]] = []
    for item in (x.strip() for x in str(value).split(",") if x.strip()):
        a, sep, b = (x.strip() for x in item.partition(":"))
        if not sep or not a or not b or a == b:
            raise click.BadParameter(f"{item!r}: expected a:b with two different policies, e.g. lvf:vllm",
                                     param_hint="--pairs")
        missing = [p for p in (a, b) if p not in policies]
        if missing:
            raise click.BadParameter(f"{item!r}: {', '.join(missing)} not among --policies ({', '.join(policies)})",
                                     param_hint="--pairs")
        if (a, b) not in out:
            out.append((a, b))
    return out


def burst_requests(o: dict[str, Any], k: int, draw: Draw) -> tuple[list[list[int]], np.ndarray]:
    """The first ``k`` requests of the workload's seed-0 draw (prompt token ids, output lengths): the window
    is made long enough to hold them (at ``o["rps"]``), and doubled while it does not."""
    rps = float(o["rps"])
    duration = max(float(o["duration"]), 2.0 * k / rps)
    prompts: list[list[int]] = []
    for _ in range(6):
        _, _, _, output, prompts = draw(o["workload"], o["arrival"], rps, duration, 0, o["max_model_len"])
        if len(prompts) >= k:
            return prompts[:k], np.asarray(output[:k], np.int64)
        duration *= 2
    raise click.ClickException(f"capacity: the workload gives {len(prompts)} requests, fewer than "
                               f"--capacity-requests {k}; give a smaller --capacity-requests")


def measure_capacity(o: dict[str, Any], k: int, workdir: Path, draw: Draw, limit_s: float) -> dict[str, Any]:
    """Capacity of the stock engine (module docstring): ``k`` burst requests at t = 0, a warm-up burst then the
    timed one, ``limit_s`` seconds at most each. ``rps`` is None when some request of either had not finished
    by then (``unfinished``: of the timed burst, or of the warm-up when that did not finish)."""
    from superinfer.bench.engine.replay import EngineSpec, open_engine, replay

    prompts, output = burst_requests(o, k, draw)
    spec = EngineSpec(model=o["model"], policy="vllm", num_blocks=o["num_blocks"], block_size=o["block_size"],
                      max_model_len=o["max_model_len"], max_num_seqs=o["max_num_seqs"],
                      max_num_batched_tokens=o["max_num_batched_tokens"])
    with open_engine(spec, workdir) as llm:
        r = warm = replay(llm, np.zeros(k), prompts, output, 0.0, limit_s)  # sets up the burst's batch shapes
        load = HostLoad()
        if not np.isnan(warm.t_end).any():
            if not llm.reset_prefix_cache():  # the timed burst computes its prompts again
                raise RuntimeError("capacity: the engine's prefix cache could not be reset after the warm-up")
            r = replay(llm, np.zeros(k), prompts, output, 0.0, limit_s)
        host = load.result()
    unfinished = int(np.count_nonzero(np.isnan(r.t_end)))
    makespan = float(np.nanmax(r.t_end)) if unfinished < k else math.nan
    rps = k / makespan if r is not warm and unfinished == 0 and makespan > 0 else None
    return {"rps": rps, "requests": k, "makespan_s": makespan, "unfinished": unfinished,
            "warmup_makespan_s": float(np.nanmax(warm.t_end)) if not np.isnan(warm.t_end).all() else math.nan,
            "output_tokens": int(output.sum()), "how": CAPACITY_HOW, "host": host}


def start_capacity(o: dict[str, Any], workdir: Path, draw: Draw) -> dict[str, Any]:
    """The capacity the loads are shares of; a burst that does not finish within ``--duration + --drain``
    is an error (nothing has run yet)."""
    limit = float(o["duration"]) + float(o["drain"])
    cap = measure_capacity(o, int(o["capacity_requests"]), workdir, draw, limit)
    if cap["rps"] is None:
        raise click.ClickException(
            f"capacity: {cap['unfinished']} of {cap['requests']} burst requests had not finished after "
            f"{limit:g} s (--duration + --drain); give a smaller --capacity-requests or a longer --drain")
    return cap


def end_capacity(o: dict[str, Any], workdir: Path, draw: Draw, start: dict[str, Any]) -> dict[str, Any]:
    """The capacity again after the runs, and its ratio to the start's (``drift``); an engine failure here
    is recorded (``error``), not raised: the runs are done and must be written."""
    try:
        cap = measure_capacity(o, int(start["requests"]), workdir, draw, float(o["duration"]) + float(o["drain"]))
    except Exception as exc:  # noqa: BLE001 - the runs before it must still be written
        return {"error": f"{type(exc).__name__}: {exc}"}
    cap["drift"] = cap["rps"] / start["rps"] if cap["rps"] is not None else None
    return cap


def run_order(policies: Sequence[str], n_loads: int, seeds: int) -> list[tuple[int, int, str]]:
    """(seed, load index, policy) in run order: seeds outermost, then loads, then every policy, the
    policies' order rotated by seed + load so that none always runs first."""
    n = len(policies)
    return [(s, j, policies[(k + s + j) % n]) for s in range(seeds) for j in range(n_loads) for k in range(n)]


def run_interleaved(policies: Sequence[str], loads: Sequence[tuple[float | None, float]], seeds: int,
                    run_one: Callable[[str, int, float], dict[str, Any]],
                    partial: Path | None) -> list[dict[str, Any]]:
    """Every (seed, load, policy) run in :func:`run_order`; ``loads``: (share or None, rps). Each run gets
    ``share`` and is appended to ``partial`` (JSON lines) as it finishes; returned sorted by load, seed and
    policy."""
    if partial is not None:
        partial.write_text("")
    runs: list[dict[str, Any]] = []
    for seed, j, policy in run_order(policies, len(loads), seeds):
        share, rps = loads[j]
        run = run_one(policy, seed, rps)
        run["share"] = share
        runs.append(run)
        if partial is not None:
            with partial.open("a") as fh:
                fh.write(json.dumps(run, default=str) + "\n")
    order = {(s, r): j for j, (s, r) in enumerate(loads)}
    runs.sort(key=lambda x: (order.get((x.get("share"), x.get("rps")), 0), x["seed"], policies.index(x["policy"])))
    return runs


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Per-seed ``a - b`` of two shares, in percentage points: mean, Student-t 95 % interval (None with
    fewer than two seeds), and the differences."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}")
    d = [100.0 * (float(x) - float(y)) for x, y in zip(a, b)]
    return {"mean_pp": float(np.mean(d)) if d else math.nan,
            "ci95_pp": list(t_interval(d)) if len(d) >= 2 else None, "per_seed_pp": d}


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Per-seed ``a / b`` (nan where b is not > 0): mean, Student-t 95 % interval (None with fewer than two
    seeds), and the ratios."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}")
    q = [float(x) / float(y) if float(y) > 0 else math.nan for x, y in zip(a, b)]
    return {"mean": float(np.mean(q)) if q else math.nan, "ci95": list(t_interval(q)) if len(q) >= 2 else None,
            "per_seed": q}


def paired_results(runs: Sequence[dict[str, Any]], pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Per load (share, rps) and pair (a, b), over the seeds both ran: the paired attainment differences and
    throughput ratio (module docstring)."""
    loads = list(dict.fromkeys((r.get("share"), r["rps"]) for r in runs))
    out = []
    for share, rps in loads:
        here = [r for r in runs if r.get("share") == share and r["rps"] == rps]
        for a, b in pairs:
            ra = {r["seed"]: r for r in here if r["policy"] == a}
            rb = {r["seed"]: r for r in here if r["policy"] == b}
            seeds = sorted(ra.keys() & rb.keys())
            if not seeds:
                continue
            entry: dict[str, Any] = {"share": share, "rps": rps, "a": a, "b": b, "n": len(seeds), "seeds": seeds}
            for k in PAIRED_KEYS:
                entry[k] = paired_difference([ra[s][k] for s in seeds], [rb[s][k] for s in seeds])
            entry["throughput_ratio"] = paired_ratio([ra[s][THROUGHPUT_KEY] for s in seeds],
                                                     [rb[s][THROUGHPUT_KEY] for s in seeds])
            out.append(entry)
    return out
