"""``superinferd bench tuner --profile NAME``: the profile's own tuner, cold, against its static knobs on
the profile's own traffic and twin, paired per seed; the verdict rule that decides what a profile ships."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from superinfer.bench.tuner.profile import RULE, ProfileTask, run_profile_task, summarise_profile

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
# the chat profile busy enough, and its tuner quick enough, to decide within a few virtual minutes
QUICK = ("sim.rps=8", "tuner.window_s=20", "tuner.min_requests=40", "tuner.cooldown_s=5", "tuner.warmup_s=4")


def run(strategy: str, seed: int = 0, tuner: bool = True, slo: float = 0.9, rollbacks: int = 0) -> dict:
    """A run record as :func:`run_profile_task` writes it (only the fields the summary reads)."""
    r = {"strategy": strategy, "seed": seed, "slo_attainment": slo, "ttft_attainment": slo, "tbt_attainment": 1.0}
    if tuner:
        r |= {"rollbacks": rollbacks, "trials": {"accept": 1, "reject": 2}, "jumps": 0, "first_decision_s": 300.0}
    return r


def pairs(diffs_pp: list[float], rollbacks: int = 0) -> list[dict]:
    out = []
    for seed, d in enumerate(diffs_pp):
        out += [run("static", seed, tuner=False, slo=0.8), run("tuner", seed, slo=0.8 + d / 100, rollbacks=rollbacks)]
    return out


def test_the_verdict_is_auto_only_when_the_tuner_costs_at_most_a_point_with_few_rollbacks() -> None:
    assert summarise_profile(pairs([0.5, -0.4, 0.1, 0.0, 0.3]), 3600.0)["verdict"] == "auto"
    assert summarise_profile(pairs([2.0, 3.0, 2.5, 1.0, 4.0]), 3600.0)["verdict"] == "auto"
    # a mean loss of more than one point
    assert summarise_profile(pairs([-1.5, -1.2, -1.4, -1.1, -1.3]), 3600.0)["verdict"] == "shadow"
    # on average even, but one seed lost 8 points: the interval reaches far below -2 pp
    assert summarise_profile(pairs([2.0, 2.0, -8.0, 2.0, 2.0]), 3600.0)["verdict"] == "shadow"
    # two rollbacks in every hour
    res = summarise_profile(pairs([0.0, 0.0, 0.0], rollbacks=2), 3600.0)
    assert res["tuner"]["rollbacks_per_hour"] == 2.0 and res["verdict"] == "shadow"
    # one seed is no interval: never auto
    assert summarise_profile(pairs([5.0]), 3600.0)["verdict"] == "shadow"
    assert res["rule"] == RULE


def test_the_summary_refuses_runs_that_are_not_paired_by_seed() -> None:
    runs = pairs([0.0, 0.0])
    runs[-1]["seed"] = 7
    with pytest.raises(ValueError, match="paired"):
        summarise_profile(runs, 3600.0)


def test_both_strategies_replay_the_same_requests_and_only_the_tuner_writes() -> None:
    task = ProfileTask("static", "chat", None, QUICK, seed=3, duration_s=240.0)
    static = run_profile_task(task)
    tuner = run_profile_task(ProfileTask("tuner", "chat", None, QUICK, seed=3, duration_s=240.0))
    assert static["arrived"] == tuner["arrived"] > 1500  # the same requests (8 req/s for 240 s)
    assert "decisions" not in static
    assert tuner["first_decision_s"] is not None and tuner["first_decision_s"] < 240.0
    assert sum(tuner["decisions"].values()) == len(tuner["log"]) > 0
    assert {d["mode"] for d in tuner["log"]} == {"auto"}  # the bench runs it in auto, whatever the profile ships


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "superinfer.cli", "bench", "tuner", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=280, env={"PATH": "/usr/bin:/bin", "HOME": str(REPO),
                                                                 "XDG_CONFIG_HOME": "/nonexistent"})


def test_the_cli_writes_the_verdict_and_refuses_a_bad_profile_with_a_clear_error() -> None:
    r = bench("--profile", "chat", *[a for s in QUICK for a in ("--set", s)], "--seeds", "2", "--duration", "120",
              "--jobs", "2", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["settings"]["profile"] == "chat" and res["verdict"] in ("auto", "shadow")
    assert len(res["tuner_minus_static"]["slo_attainment"]["per_seed_pp"]) == 2
    bad = bench("--profile", "no-such-profile", "--seeds", "2", "--duration", "120")
    assert bad.returncode == 2 and "no-such-profile" in bad.stderr
    idle = bench("--profile", "chat", "--set", "sim.rps=0", "--seeds", "2", "--duration", "120")
    assert idle.returncode == 2 and "replays no traffic" in idle.stderr
