"""Overload through the daemon's HTTP endpoint, by a real OpenAI client (issue 28's real-engine target).

    .venv/bin/python bench/overload_http.py --load 2 --duration 60 --json bench/results/overload/http_cpu_2x.json

Starts ``superinferd start --profile cpu-demo --device cpu`` (vLLM on this host's CPU, the tiny Llama, 96 KV
blocks; its own load generator off) with first-token deadlines at ``--deadline-x`` times each tenant's TTFT
SLO, then:

1. **capacity**, measured in the same run: ``--capacity-requests`` streamed requests of the workload at once
   (twice; the second counts: the first warms the engine), capacity = requests / seconds until the last ends;
2. **load**: Poisson arrivals at ``--load`` x that capacity for ``--duration`` seconds, each a streamed
   completion by ``openai.AsyncOpenAI`` (``max_retries=0``: the client sees every refusal), tenants mixed by
   the profile's shares, while another process polls ``/v1/state`` every 0.2 s.

Checked and written (exit 1 if any check fails): every request got a whole completion (``completion_tokens``
as asked) or a 503/429 with ``Retry-After``, within its tenant's deadline + TTFT SLO; ``/metrics`` counts
(``superinfer_requests_{arrived,finished,shed}_total``) add up to what the client saw; ``/v1/state`` p99 poll
latency <= 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from superinfer.bench.daemon_proc import launch, poll_state

REPO = Path(__file__).resolve().parents[1]
PROMPT_WORDS = "the quick brown fox jumps over the lazy dog ".split()


def start_daemon(state_dir: Path, deadline_x: float, admission: bool, log_path: Path) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERINFER_") and k != "NOTIFY_SOCKET"}
    env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "superinfer.cli", "start", "--profile", "cpu-demo", "--device", "cpu", "--port", "0",
           "--state-dir", str(state_dir), "--set", "load.rps=0", "--set", f"slo.max_queue_ttft_x={deadline_x}",
           "--set", f"slo.shed_at_admission={'true' if admission else 'false'}"]
    return launch(cmd, state_dir, log_path, env, cwd=REPO)


async def one(client, tenant: str, i: int, tokens: int, words: int) -> dict:
    """One streamed completion: status, seconds to the answer (headers or refusal), tokens, Retry-After."""
    import openai

    t0 = time.monotonic()
    prompt = f"request {i}: " + " ".join(PROMPT_WORDS[k % len(PROMPT_WORDS)] for k in range(words))
    try:
        stream = await client.completions.create(
            model="tiny-llama", prompt=prompt, max_tokens=tokens, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True, "vllm_xargs": {"tenant": tenant}})
    except openai.APIStatusError as exc:
        return {"tenant": tenant, "status": exc.status_code, "answer_s": time.monotonic() - t0,
                "retry_after": exc.response.headers.get("retry-after"), "type": (exc.body or {}).get("type")}
    answer = time.monotonic() - t0
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    return {"tenant": tenant, "status": 200, "answer_s": answer, "end_s": time.monotonic() - t0,
            "completion_tokens": usage}


async def burst(url: str, n: int, tokens: int, words: int) -> float:
    import openai

    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        t0 = time.monotonic()
        out = await asyncio.gather(*(one(client, "chat", i, tokens, words) for i in range(n)))
    if any(o["status"] != 200 for o in out):
        raise SystemExit(f"capacity burst: not every request was served: {[o['status'] for o in out]}")
    return n / (time.monotonic() - t0)


async def load(url: str, rps: float, duration: float, tokens: int, words: int, tenants: list[tuple[str, float]],
               seed: int) -> tuple[list[dict], list[float]]:
    import openai

    rng = np.random.default_rng(seed)
    names, shares = [t for t, _ in tenants], np.array([s for _, s in tenants], float)
    arrivals = np.cumsum(rng.exponential(1.0 / rps, size=int(rps * duration * 2) + 10))
    arrivals = arrivals[arrivals < duration]
    who = rng.choice(len(names), size=arrivals.size, p=shares / shares.sum())
    ctx = mp.get_context("spawn")
    stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
    poller = ctx.Process(target=poll_state, args=(url, 0.2, stop, out, ready))  # its own interpreter, as top's
    poller.start()
    if not ready.wait(120):
        raise SystemExit("the /v1/state poller did not start")
    try:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
            t0 = time.monotonic()
            tasks = []
            for i, (t, k) in enumerate(zip(arrivals.tolist(), who.tolist())):
                await asyncio.sleep(max(0.0, t - (time.monotonic() - t0)))
                tasks.append(asyncio.create_task(one(client, names[k], i, tokens, words)))
            results = await asyncio.gather(*tasks)
    finally:
        stop.set()
        polls = out.get(timeout=60)  # (status, seconds)
        poller.join(timeout=10)
    for r, t in zip(results, arrivals.tolist()):
        r["arrival_s"] = t
    return list(results), polls


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def check(results: list[dict], polled: list[tuple[int, float, int]], metrics_text: str, tenants: dict[str, dict], tokens: int) -> dict:
    by = {s: [r for r in results if r["status"] == s] for s in sorted({r["status"] for r in results})}
    served, refused = by.get(200, []), [r for r in results if r["status"] in (429, 503)]
    other = [r for r in results if r["status"] not in (200, 429, 503)]
    late = [r for r in refused if r["answer_s"] > tenants[r["tenant"]]["deadline_s"] + tenants[r["tenant"]]["ttft_s"]]
    late_first = [r for r in served
                  if r["answer_s"] > tenants[r["tenant"]]["deadline_s"] + tenants[r["tenant"]]["ttft_s"]]
    cut = [r for r in served if r["completion_tokens"] != tokens]
    no_retry = [r for r in refused if not r.get("retry_after")]
    arrived = metric(metrics_text, "superinfer_requests_arrived_total")
    finished = metric(metrics_text, "superinfer_requests_finished_total")
    shed_deadline = metric(metrics_text, "superinfer_requests_shed_total", reason="deadline")
    shed_predicted = metric(metrics_text, "superinfer_requests_shed_total", reason="predicted")
    shed_limit = metric(metrics_text, "superinfer_requests_shed_total", reason="tenant_limit")
    # refusals at the door (predicted, tenant_limit) never reach the engine: not counted as arrived
    counts_ok = (finished == len(served) and shed_deadline + shed_predicted == len(by.get(503, []))
                 and shed_limit == len(by.get(429, [])) and arrived == len(served) + shed_deadline)
    polls = [seconds for _, seconds, _ in polled]
    p99 = float(np.percentile(polls, 99)) if polls else float("nan")
    checks = {"every_request_answered": not other, "whole_completions": not cut, "retry_after_on_refusals": not no_retry,
              "within_deadline_plus_slo": not late and not late_first, "metrics_add_up": counts_ok,
              "state_p99_le_200ms": p99 <= 0.2, "every_poll_answered": all(s == 200 for s, _, _ in polled)}
    return {"requests": len(results), "served": len(served), "shed_503": len(by.get(503, [])),
            "refused_429": len(by.get(429, [])), "other": len(other), "cut_short": len(cut),
            "refused_after_deadline_plus_slo": len(late), "first_token_after_deadline_plus_slo": len(late_first),
            "answer_p99_s": {"served": float(np.percentile([r["answer_s"] for r in served], 99)) if served else None,
                             "refused": float(np.percentile([r["answer_s"] for r in refused], 99)) if refused else None},
            "metrics": {"arrived": arrived, "finished": finished, "shed_deadline": shed_deadline,
                        "shed_predicted": shed_predicted, "shed_tenant_limit": shed_limit},
            "slo_attainment_client": _attainment(served, len(results), tenants),
            "state_poll_p99_s": p99, "state_poll_max_s": max(polls) if polls else None, "polls": len(polls),
            "daemon_loop_lag": _lag(metrics_text),
            "checks": checks, "ok": all(checks.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=float, default=2.0, help="offered load as a multiple of the measured capacity")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--deadline-x", type=float, default=4.0, help="first-token deadline / TTFT SLO")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--prompt-words", type=int, default=48)
    ap.add_argument("--capacity-requests", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shed-at-admission", action="store_true", help="[slo].shed_at_admission on")
    ap.add_argument("--json", default=None)
    ap.add_argument("--daemon-log", default=None, help="keep the daemon's log here (stalls are logged with a stack)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp) / "state"
        proc, url = start_daemon(state_dir, a.deadline_x, a.shed_at_admission,
                                 Path(a.daemon_log) if a.daemon_log else Path(tmp) / "daemon.log")
        try:
            cfg = httpx.get(url + "/v1/config", timeout=10).json()
            tenants = {t["name"]: {"ttft_s": t["ttft_s"], "deadline_s": t["max_queue_s"], "share": t["share"]}
                       for t in cfg["tenants"]["list"]}
            asyncio.run(burst(url, a.capacity_requests, a.tokens, a.prompt_words))  # warm-up
            capacity = asyncio.run(burst(url, a.capacity_requests, a.tokens, a.prompt_words))
            before = httpx.get(url + "/metrics", timeout=10).text
            cpu0 = _cpu_s(proc.pid)
            rps = a.load * capacity
            print(f"capacity {capacity:.3f} req/s; offering {rps:.3f} req/s for {a.duration:g} s", file=sys.stderr)
            results, polls = asyncio.run(load(url, rps, a.duration, a.tokens, a.prompt_words,
                                              [(n, t["share"]) for n, t in tenants.items()], a.seed))
            after = httpx.get(url + "/metrics", timeout=10).text
            daemon_cpu_s = _cpu_s(proc.pid) - cpu0
        finally:
            proc.terminate()
            proc.wait(timeout=300)
    # the load's own counts: /metrics after minus before (the capacity bursts came first)
    delta = "\n".join(f"{line.rsplit(' ', 1)[0]} {float(line.rsplit(' ', 1)[1]) - _before(before, line)}"
                      for line in after.splitlines()
                      if line.startswith(("superinfer_requests_", "superinfer_event_loop_lag_seconds_")))
    out = {"command": "python bench/overload_http.py " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
           "capacity_rps": capacity, "offered_rps": rps, "tenants": tenants, "daemon_cpu_s": daemon_cpu_s,
           "cpus": len(os.sched_getaffinity(0)),
           **check(results, polls, delta, tenants, a.tokens), "results": results}
    text = json.dumps(out, indent=1)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "results"}, indent=1))
    return 0 if out["ok"] else 1


def _attainment(served: list[dict], n: int, tenants: dict[str, dict]) -> float:
    """Share of all requests served with their first token within the tenant's TTFT SLO (as the client
    saw it: headers come with the first token); the TBT side is in /metrics."""
    ok = sum(1 for r in served if r["answer_s"] <= tenants[r["tenant"]]["ttft_s"])
    return ok / n if n else 0.0


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: the daemon's own, its engine not included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lag(metrics_text: str) -> dict:
    """The daemon's event-loop lag samples during the load (superinfer_event_loop_lag_seconds, every 0.1 s):
    how many, and how many over 0.2 s and 0.5 s."""
    count = metric(metrics_text, "superinfer_event_loop_lag_seconds_count")
    within = {le: metric(metrics_text, "superinfer_event_loop_lag_seconds_bucket", le=le) for le in ("0.2", "0.5")}
    return {"samples": count, "over_0_2s": count - within["0.2"], "over_0_5s": count - within["0.5"]}


def _before(before: str, line: str) -> float:
    key = line.rsplit(" ", 1)[0]
    m = re.search("^" + re.escape(key) + r" ([0-9.e+-]+)$", before, re.M)
    return float(m.group(1)) if m else 0.0


if __name__ == "__main__":
    sys.exit(main())
