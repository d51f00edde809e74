"""``superinferd bench tuner --workload FILE --arrival trace --rps trace``: a recorded trace replayed with
its own arrivals, judged without an oracle (its phase boundaries are unknown), and the refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from superinfer.tuner.offline.scenario import build, trace_scenario

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]


def write_trace(path: Path, seconds: float = 90.0, rps: float = 3.0, seed: int = 0, tenant: str | None = None) -> Path:
    """A ShareGPT-style JSONL trace with arrival times and token lengths."""
    rng = np.random.default_rng(seed)
    t, lines = 0.0, []
    while True:
        t += rng.exponential(1 / rps)
        if t >= seconds:
            break
        rec = {"arrival_s": round(t, 4), "prompt_len": int(rng.integers(50, 800)), "output_len": int(rng.integers(20, 300))}
        if tenant:
            rec["tenant"] = tenant
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def bench(*args: str, timeout: float = 280) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "superinfer.cli", "bench", "tuner", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout, env={"PATH": "/usr/bin:/bin", "HOME": str(REPO),
                                                                     "XDG_CONFIG_HOME": "/nonexistent"})


def test_a_trace_is_one_phase_replayed_with_its_own_arrivals(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl")
    scn = trace_scenario(str(path))
    assert not scn.known_phases and [p.name for p in scn.phases] == ["trace"]
    w, bounds = build(scn, seed=3)
    raw = [json.loads(x)["arrival_s"] for x in path.read_text().splitlines()]
    assert len(w) == len(raw) and bounds[0][0] == "trace"
    assert np.allclose(np.diff(w.arrival_s), np.diff(raw), atol=1e-6)  # the trace's own gaps
    assert set(w.tenant_names) == {"chat", "voice", "bulk"} and set(w.tenant_ids.tolist()) == {0}  # all chat
    voice = trace_scenario(str(write_trace(tmp_path / "v.jsonl", tenant="voice")))
    wv, _ = build(voice, seed=0)
    assert set(wv.tenant_ids.tolist()) == {1}  # a tenant of the table is kept


def test_bench_tuner_on_a_trace_runs_without_an_oracle(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl", seconds=120.0)
    r = bench("--workload", str(path), "--arrival", "trace", "--rps", "trace", "--seeds", "1", "--static-trials", "2",
              "--study-seeds", "1", "--warm-trials", "2", "--no-control", "--jobs", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert set(res["strategies"]) == {"paper", "static_best", "tuner"}
    assert "no known phase boundaries" in res["oracle"] and "gap_closed" not in res
    assert res["settings"]["scenario"] == "trace:t.jsonl" and "tuner_minus_static_best" in res
    assert res["settings"]["study_seeds"] == 1


@pytest.mark.parametrize("args,message", [
    (["--arrival", "poisson"], "needs --arrival trace"),
    (["--arrival", "trace", "--rps", "fast"], "--rps: expected 'trace' or a number"),
    (["--arrival", "trace", "--rps", "-2"], "--rps: expected 'trace' or a number"),
    (["--arrival", "trace", "--study-storage", "ftp://host/x"], "--study-storage: storage 'ftp://host/x'"),
])
def test_bench_tuner_refuses_what_it_cannot_replay(tmp_path: Path, args: list[str], message: str) -> None:
    path = write_trace(tmp_path / "t.jsonl", seconds=10.0)
    r = bench("--workload", str(path), *args, "--json", "-")
    assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]
    r = bench("--workload", str(tmp_path / "missing.jsonl"), "--arrival", "trace", "--json", "-")
    assert r.returncode == 2 and "missing.jsonl" in r.stderr, r.stderr[-2000:]


def test_the_scenario_twin_prices_as_asked_and_a_profile_s_as_its_profile_says() -> None:
    from dataclasses import replace

    from click.testing import CliRunner

    from superinfer.bench.tuner.cli import bench_tuner
    from superinfer.tuner.offline.evaluate import TwinEnv

    cm = replace(TwinEnv(), gpu_costs="grounded").cost_model()
    assert cm._grounded is not None and cm.async_host is True  # lvf follows vLLM's async scheduling
    assert TwinEnv().cost_model()._grounded is None
    r = CliRunner().invoke(bench_tuner, ["--profile", "demo", "--gpu-costs", "grounded"])
    assert r.exit_code == 2 and "--set engine.gpu_costs=C" in r.output
