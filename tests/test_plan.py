"""`superinferd plan`: the capacity planner on the twin (issue 14)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from superinfer.cli import main
from superinfer.sim.plan import CONFIG_KEYS, Candidate, PlanSpec, choose, layouts, levels


def run(*args: str) -> tuple[int, dict | None, str]:
    res = CliRunner().invoke(main, ["plan", *args, "--json"])
    out = res.stdout
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    return res.exit_code, doc, res.stderr


@pytest.fixture(scope="module")
def h100() -> tuple[int, dict, str]:
    # small and quick: 3 req/s for 15 s, one policy
    code, doc, err = run("--model", "llama-3-70b", "--hardware", "h100-pcie", "--rps", "3", "--duration", "15",
                         "--policies", "vllm", "--workers", "1", "--max-gpus", "8")
    assert doc is not None, err
    return code, doc, err


def test_plan_json_has_the_issue_shape(h100: tuple[int, dict, str]) -> None:
    code, doc, err = h100
    assert code == 0, err
    assert set(doc) >= {"configs", "best"}
    simulated = [c for c in doc["configs"] if c["feasible"]]
    assert simulated and all(set(CONFIG_KEYS) <= set(c) for c in simulated)
    assert all(c["gpus"] == c["tp"] * c["pp"] * c["replicas"] for c in simulated)
    assert set(CONFIG_KEYS) <= set(doc["best"]) and doc["best"]["slo_attainment"] >= 0.95


def test_infeasible_layouts_are_listed_not_scored(h100: tuple[int, dict, str]) -> None:
    _, doc, _ = h100
    bad = {(c["tp"], c["pp"]): c for c in doc["configs"] if not c["feasible"]}
    # 141 GB of bf16 weights: one H100 (80 GB) cannot hold them, nor two halves with their reserve
    assert {(1, 1), (2, 1), (1, 2)} <= set(bad)
    assert bad[(1, 1)]["reason"].startswith("weights do not fit") and bad[(1, 1)]["slo_attainment"] is None
    assert all((c["tp"], c["pp"]) not in bad for c in doc["configs"] if c["feasible"])


def test_best_is_the_fewest_gpus_meeting_the_target(h100: tuple[int, dict, str]) -> None:
    _, doc, err = h100
    best = doc["best"]
    assert best["gpus"] == 4  # the smallest feasible replica (TP x PP = 4) already meets 95 % at 3 req/s
    assert all(c["gpus"] <= best["gpus"] for c in doc["configs"] if c["feasible"])  # nothing larger was run
    assert "infeasible: weights do not fit" in err and "best: 4 x h100-pcie" in err  # the table
    assert "[1/" in err  # progress lines


def test_no_layout_within_the_budget_exits_1_with_best_null() -> None:
    code, doc, _ = run("--model", "llama-3-70b", "--hardware", "h100-pcie", "--rps", "3", "--max-gpus", "2",
                       "--duration", "5")
    assert code == 1 and doc is not None and doc["best"] is None
    assert doc["configs"] and not any(c["feasible"] for c in doc["configs"])


def test_usage_errors_exit_2() -> None:
    res = CliRunner().invoke(main, ["plan", "--model", "llama-9000", "--hardware", "gh200", "--rps", "1"])
    assert res.exit_code == 2 and "llama-9000" in res.output
    res = CliRunner().invoke(main, ["plan", "--model", "llama-3-70b", "--hardware", "gh200", "--rps", "1",
                                    "--fabric", "pcie"])
    assert res.exit_code == 2 and "valid: nvl2" in res.output


def test_levels_ascend_by_gpu_count_and_divide_by_replica_size() -> None:
    spec = PlanSpec(model="llama-3-70b", hardware="gh200", rps=1.0, max_gpus=8, policies=("lvf",))
    ok, bad = layouts(spec)
    assert [(b["tp"], b["pp"]) for b in bad] == [(1, 1)]
    plan = levels(spec, ok)
    assert [g for g, _ in plan] == [2, 4, 6, 8]
    for g, cands in plan:
        assert all(c.gpus == g for c in cands)


def test_choose_prefers_fewer_gpus_then_attainment_then_latency() -> None:
    def cfg(gpus: int, slo: float, p99: float, tok: float) -> dict:
        return {"feasible": True, "gpus": gpus, "slo_attainment": slo, "ttft_p99_s": p99, "throughput_tok_s": tok}

    cs = [cfg(8, 1.0, 0.1, 900), cfg(4, 0.96, 2.0, 800), cfg(4, 0.97, 3.0, 700), cfg(4, 0.97, 1.0, 600),
          cfg(2, 0.5, 0.1, 100)]
    assert choose(cs, 0.95) is cs[3]
    assert choose(cs, 0.99) is cs[0]
    assert choose(cs, 1.01) is None
    assert Candidate(2, 2, 3, "lvf").gpus == 12


def test_spec_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="slo_target"):
        PlanSpec(model="llama-3-70b", hardware="gh200", rps=1.0, slo_target=1.5)
    with pytest.raises(ValueError, match="policies"):
        PlanSpec(model="llama-3-70b", hardware="gh200", rps=1.0, policies=("fifo",))
