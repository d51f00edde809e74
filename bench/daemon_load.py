"""Load test of superinferd's sim backend: a bounded loopback client sends N completions while a poller
reads /v1/state; reports the request rate held, poll latency, and whether anything was lost.

    .venv/bin/python bench/daemon_load.py --requests 3000 --concurrency 64 --json bench/results/daemon_load.json

Starts its own daemon (``--backend sim``, the ``chat`` profile, replay off) unless ``--url`` is given.
Exit status 0 only if every request completed with the requested tokens, every poll answered 200,
and the daemon's counters balance (arrived == finished) after the run.

``--max-inflight`` lowers the daemon's ``engine.max_inflight``: a request refused with 503 "overloaded"
(refused before it reaches the engine, so never counted as arrived) is a rejection with a reason, not a
loss; the client counts it (``rejected_overloaded``) and retries after a short backoff. The client keeps
httpx's default keep-alive expiry (5 s, like the OpenAI SDK), so a daemon that closes idle connections
sooner shows up here as requests the daemon never saw (``unseen_by_daemon``, transport errors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from superinfer.bench.daemon_proc import launch, poll_state

REPO = Path(__file__).resolve().parents[1]


def start_daemon(state_dir: Path, profile: str, max_inflight: int = 100000) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERINFER_") and k != "NOTIFY_SOCKET"}
    cmd = [sys.executable, "-m", "superinfer.cli", "start", "--profile", profile, "--backend", "sim", "--port", "0",
           "--state-dir", str(state_dir), "--set", "sim.rps=0", "--set", f"engine.max_inflight={max_inflight}"]
    return launch(cmd, state_dir, state_dir.parent / "daemon.log", env, cwd=REPO, timeout_s=90)


def _overloaded(r: httpx.Response) -> bool:
    """A 503 refusal by admission control (``engine.max_inflight``): nothing reached the engine."""
    if r.status_code != 503:
        return False
    try:
        return str(r.json()["error"]["message"]).startswith("overloaded")
    except (ValueError, KeyError, TypeError):
        return False


async def run_load(url: str, requests: int, concurrency: int, max_tokens: int, poll_s: float,
                   max_retries: int = 200) -> dict:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    results: list[tuple[int, int]] = []
    errors: list[str] = []
    overloaded = [0]  # 503 "overloaded" answers (each retried)
    connects = [0]

    async def trace(event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete":
            connects[0] += 1

    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                body = {"prompt": "w" * (64 + (i % 7) * 32), "max_tokens": max_tokens,
                        "vllm_xargs": {"tenant": "default"}}
                try:
                    for attempt in range(max_retries + 1):
                        r = await client.post("/v1/completions", json=body, extensions={"trace": trace})
                        if not _overloaded(r) or attempt == max_retries:
                            break
                        overloaded[0] += 1
                        await asyncio.sleep(min(0.01 * 2 ** min(attempt, 6), 0.5) * (0.5 + (i % 10) / 10))
                    tokens = r.json().get("usage", {}).get("completion_tokens", -1) if r.status_code == 200 else -1
                    results.append((r.status_code, tokens))
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    results.append((-1, -1))

        stop, ready = mp.Event(), mp.Event()
        out: mp.Queue = mp.Queue()
        poller = mp.Process(target=poll_state, args=(url, poll_s, stop, out, ready), daemon=True)
        poller.start()
        ready.wait(60)
        arrived0 = (await client.get("/v1/state")).json()["counters"]["arrived"]  # a --url daemon may have history
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(requests)))
        wall = time.perf_counter() - t0
        stop.set()
        polls = out.get(timeout=60)
        queue_seen = max((live for _, _, live in polls), default=0)
        poller.join(10)
        state = (await client.get("/v1/state")).json()
    lat = sorted(p[1] for p in polls)
    ok = sum(1 for code, tok in results if code == 200 and tok == max_tokens)
    c = state["counters"]
    return {
        "requests": requests, "concurrency": concurrency, "max_tokens": max_tokens,
        "completed_ok": ok, "lost": requests - ok,
        "failures": sorted({f"{code}/{tok}" for code, tok in results if not (code == 200 and tok == max_tokens)}),
        "client_errors": errors[:5], "transport_errors": len(errors),
        "rejected_overloaded": overloaded[0], "connections_opened": connects[0],
        # requests the daemon never admitted (transport errors before the handler; overload refusals are
        # retried and so not counted here): arrived counts every request the engine saw, once
        "unseen_by_daemon": requests - (c["arrived"] - arrived0),
        "wall_s": round(wall, 3),
        "request_rate_rps": round(requests / wall, 1), "token_rate_tps": round(ok * max_tokens / wall, 1),
        "polls": len(polls), "polls_ok": sum(1 for p in polls if p[0] == 200),
        "poll_p50_s": round(lat[len(lat) // 2], 4) if lat else None,
        "poll_p99_s": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 4) if lat else None,
        "poll_max_s": round(lat[-1], 4) if lat else None,
        "max_live_seen": queue_seen,
        "daemon_counters": c, "sim_lag_s": state["sim"]["lag_s"],
        "balanced": c["arrived"] == c["finished"] and c["aborted"] == 0 and c["rejected"] == 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="an already running daemon (default: start one)")
    ap.add_argument("--profile", default="chat")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--poll-s", type=float, default=0.1)
    ap.add_argument("--max-inflight", type=int, default=100000,
                    help="the daemon's engine.max_inflight (only when it starts its own daemon); lower it to "
                         "exercise the 503 'overloaded' path, which the client retries")
    ap.add_argument("--json", dest="json_out", help="write the result here")
    a = ap.parse_args()
    if a.requests < 1 or a.concurrency < 1 or a.max_tokens < 1:
        ap.error("--requests, --concurrency and --max-tokens must be >= 1")
    proc = None
    with tempfile.TemporaryDirectory() as tmp:
        url = a.url
        if url is None:
            proc, url = start_daemon(Path(tmp) / "state", a.profile, a.max_inflight)
        try:
            res = asyncio.run(run_load(url, a.requests, a.concurrency, a.max_tokens, a.poll_s))
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                res_code = proc.wait(60)
        if proc is not None:
            res["daemon_exit"] = res_code
    res["host"] = {"cpus": os.cpu_count(), "note": "client and daemon share this host (loopback)"}
    out = json.dumps(res, indent=1)
    print(out)
    if a.json_out:
        Path(a.json_out).write_text(out + "\n")
    good = res["lost"] == 0 and res["polls_ok"] == res["polls"] and res["balanced"] and res.get("daemon_exit", 0) == 0
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
