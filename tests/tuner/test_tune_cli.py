"""``superinferd tune``: an Optuna study on the twin that writes an arms file the online tuner loads, on
SQLite and on a journal file, with parallel workers on one study."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from superinfer.tuner.arms import load_arms

pytestmark = pytest.mark.timeout(240)
REPO = Path(__file__).resolve().parents[2]


def tune(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "superinfer.cli", "tune", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, env={"PATH": "/usr/bin:/bin", "HOME": str(REPO),
                                                         "XDG_CONFIG_HOME": "/nonexistent"})


def test_tune_on_sqlite_writes_arms_the_tuner_loads(tmp_path: Path) -> None:
    out = tmp_path / "arms.json"
    r = tune("--profile", "chat", "--rps", "6", "--duration", "20", "--trials", "3",
             "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--study", "t1", "--json", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trial 3/3" in r.stderr and "robust:" in r.stdout
    arms = load_arms(out)
    assert arms.robust is not None and set(arms.phases) == {"chat"}
    assert arms.phases["chat"].features["log_rate"] > 1.0 and arms.source["storage"].startswith("sqlite:")
    assert arms.source["start_scores"]["chat"] >= 0.0
    again = tune("--profile", "chat", "--rps", "6", "--duration", "20", "--trials", "1",
                 "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--study", "t1", "--json", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert load_arms(out).source["trials"] == 4  # the study in the storage went on: 3 + 1


def test_tune_scenario_with_two_workers_on_a_journal(tmp_path: Path) -> None:
    r = tune("--profile", "chat", "--scenario", "stationary", "--duration", "15", "--trials", "4", "--jobs", "2",
             "--storage", f"journal:{tmp_path / 'study.journal'}", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout)
    assert data["kind"] == "superinfer-tuner-arms" and data["source"]["trials"] == 4
    # what the online tuner needs to jump: the start, and the study's score of it in every phase
    assert set(data["start"]["params"]) == set(data["robust"]["params"])
    assert all(0 <= arm["versus"]["start"] <= 1 for arm in data["phases"].values())
    assert (tmp_path / "study.journal").stat().st_size > 0


def test_tune_refuses_bad_storage_and_profile(tmp_path: Path) -> None:
    r = tune("--profile", "chat", "--storage", "ftp://x", "--json", str(tmp_path / "a.json"))
    assert r.returncode == 2 and "--storage" in r.stderr
    r = tune("--profile", "nope", "--json", str(tmp_path / "a.json"))
    assert r.returncode == 2 and "no profile 'nope'" in r.stderr
    r = tune("--profile", "chat", "--set", "tuner.knobs=min_residency", "--set", "tuner.step_caps=min_residency=0.5",
             "--json", str(tmp_path / "a.json"))
    assert r.returncode == 2 and "tuner.step_caps.min_residency: an integer knob needs a cap >= 1" in r.stderr
    assert not (tmp_path / "a.json").exists()


def test_tune_until_converged_stops_by_itself_under_the_ceiling(tmp_path: Path) -> None:
    out = tmp_path / "arms.json"
    r = tune("--profile", "chat", "--rps", "6", "--duration", "10", "--trials", "60", "--converge-window", "3",
             "--json", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    src = load_arms(out).source
    # no convergence before the sampler's 8 random trials and a window after them; well under the ceiling
    assert src["converged"] and 11 <= src["trials"] < 60, src
    assert "; converged" in r.stderr
