"""The online tuner on the real engine in wall-clock time, side by side with a static setting (issue 30 item 4).

Two daemons run at once on this host, each its own vLLM CPU engine (``--profile cpu-demo``: the tiny Llama,
96 KV blocks of 32 tokens) and its own streamed traffic over HTTP (``[load]``, the same seed: the same
requests, the two loads starting within the difference of the two start-up times; the first run, 2026-12-07,
started them one after the other, about a minute apart): ``tuner`` starts from a deliberately poor setting (``step_slo_share`` --poor)
with the tuner in ``auto``, no arms file (local steps only, under the exploration budget) unless --arms;
``static`` runs the profile's setting (``step_slo_share`` 0.8) untouched. Running them at once rather than one
after the other gives both the same host: these machines' speed moves by tens of percent within minutes.

Every --sample-s both daemons' ``superinfer_slo_attained_total`` / ``superinfer_slo_violations_total``
(``slo="both"``, per tenant) are read; the result is each side's attainment per interval and over the last
third of the run (the target: the tuner within 5 pp of the static setting there), the tuner's decisions, its
params trajectory and both load generators' counts (nothing may be lost).

    .venv/bin/python bench/tuner_engine.py --duration 1800 --json bench/results/tuner_engine.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from superinfer.bench.daemon_proc import launch  # noqa: E402

ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
LINE = re.compile(r'^superinfer_slo_(attained|violations)_total\{([^}]*)\} ([0-9.e+]+)$', re.M)


def counts(url: str) -> dict[str, dict[str, float]]:
    """Per tenant: requests that met both SLOs (ok) and that missed (bad), so far."""
    text = httpx.get(url + "/metrics", timeout=30).text
    out: dict[str, dict[str, float]] = {}
    for kind, labels, v in LINE.findall(text):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if lab.get("slo") != "both":
            continue
        tenant = lab["tenant"]
        out.setdefault(tenant, {"ok": 0.0, "bad": 0.0})["ok" if kind == "attained" else "bad"] = float(v)
    return out


def share(a: dict, b: dict) -> tuple[float | None, int]:
    """Attainment of the requests decided between two samples (all tenants, unweighted) and their number."""
    ok = sum(a.get(t, {}).get("ok", 0) - b.get(t, {}).get("ok", 0) for t in a)
    bad = sum(a.get(t, {}).get("bad", 0) - b.get(t, {}).get("bad", 0) for t in a)
    n = int(ok + bad)
    return (ok / n if n else None), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds of traffic after both are ready")
    ap.add_argument("--rps", type=float, default=1.5, help="each daemon's own load, requests per second")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--poor", type=float, default=0.01, help="the tuner's start: step_slo_share")
    ap.add_argument("--window-s", type=float, default=60.0)
    ap.add_argument("--min-requests", type=int, default=60)
    ap.add_argument("--sample-s", type=float, default=30.0)
    ap.add_argument("--arms", default="", help="an arms file for the tuner (default: none, local steps only)")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    common = ["--profile", "cpu-demo", "--device", "cpu", "--backend", "vllm", "--port", "0",
              "--set", f"load.rps={a.rps}", "--set", f"load.max_tokens={a.max_tokens}", "--set", "load.seed=7"]
    tuned = ["--set", f"scheduler.step_slo_share={a.poor}", "--set", "tuner.mode=auto",
             "--set", f"tuner.window_s={a.window_s}", "--set", f"tuner.min_requests={a.min_requests}",
             "--set", f"tuner.arms_file={a.arms}"]
    env = {**os.environ, **ENV}
    tmp = Path(tempfile.mkdtemp(prefix="tuner-engine-"))
    procs, urls = {}, {}

    def start(side: str, extra: list[str]) -> None:
        sd = tmp / side
        cmd = [sys.executable, "-m", "superinfer.cli", "start", "--state-dir", str(sd), *common, *extra]
        procs[side], urls[side] = launch(cmd, sd, tmp / f"{side}.log", env, cwd=REPO)
        print(f"{side}: {urls[side]} (log {tmp / f'{side}.log'})", flush=True)

    # started together, so their loads (the same seed) begin within the difference of their start-up times
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(start, ("tuner", "static"), (tuned, ["--set", "tuner.mode=off"])))
    t0 = time.monotonic()
    series: list[dict] = []
    base = {s: counts(u) for s, u in urls.items()}
    prev = dict(base)
    try:
        while (t := time.monotonic() - t0) < a.duration:
            time.sleep(min(a.sample_s, a.duration - t))
            now = {s: counts(u) for s, u in urls.items()}
            row = {"t": round(time.monotonic() - t0, 1)}
            for s in urls:
                row[s], row[f"{s}_n"] = share(now[s], prev[s])
            row["step_slo_share"] = httpx.get(urls["tuner"] + "/v1/params", timeout=30).json()["step_slo_share"]
            row["_counts"] = now
            series.append(row)
            prev = now
            print(json.dumps({k: v for k, v in row.items() if k != "_counts"}), flush=True)
        tuner = httpx.get(urls["tuner"] + "/v1/tuner", timeout=30).json()
        params = {s: httpx.get(u + "/v1/params", timeout=30).json() for s, u in urls.items()}
        loads = {s: httpx.get(u + "/v1/state", timeout=30).json()["load"] for s, u in urls.items()}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(120)
    third = [r for r in series if r["t"] >= 2 * a.duration / 3 - 1e-6]
    start = next((r["_counts"] for r in reversed(series) if r["t"] < 2 * a.duration / 3 - 1e-6), base)
    end = series[-1]["_counts"]
    last = {s: dict(zip(("slo_attainment", "decided"), share(end[s], start[s]))) for s in urls}
    whole = {s: dict(zip(("slo_attainment", "decided"), share(end[s], base[s]))) for s in urls}
    log = (tmp / "tuner" / "tuner-decisions.jsonl").read_text().splitlines()
    res = {"command": "bench/tuner_engine.py " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d %H:%M"),
           "settings": vars(a), "last_third": last, "whole_run": whole,
           "tuner_minus_static_last_third_pp": None if None in (last["tuner"]["slo_attainment"], last["static"]["slo_attainment"])
           else 100 * (last["tuner"]["slo_attainment"] - last["static"]["slo_attainment"]),
           "series": [{k: v for k, v in r.items() if k != "_counts"} for r in series], "samples_last_third": len(third),
           "tuner": {k: tuner.get(k) for k in ("incumbent", "trials", "rollbacks", "jumps", "exploration_budget")},
           "decisions": [json.loads(x) for x in log], "params": params, "load": loads}
    Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("last_third", "whole_run", "tuner_minus_static_last_third_pp")}, indent=1))


if __name__ == "__main__":
    main()
