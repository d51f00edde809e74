"""The command line: JSON shapes scripts rely on, and clear errors with exit code 2 on bad input."""

import json

from click.testing import CliRunner

from superinfer.cli import main

RUN_FIELDS = {
    "policy", "rps", "seed", "arrived", "finished", "ttft_attainment", "tbt_attainment", "ttft_p50_s",
    "ttft_p99_s", "tbt_gap_p99_s", "stall_share", "throughput_tok_s", "goodput_rps", "preemptions",
    "rotations", "max_rotations_per_request", "recompute_fallbacks", "b_xfer_blocks",
    "max_swap_in_blocks_per_iter", "max_swap_out_blocks_per_iter", "hbm_blocks", "max_hbm_blocks_used",
    "bytes_h2d", "bytes_d2h", "sim_s", "wall_s",
}


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_bench_sched_prints_runs_with_median_and_p99():
    r = invoke("bench", "sched", "--sizes", "200,400", "--repeats", "3", "--json")
    assert r.exit_code == 0, r.output
    runs = json.loads(r.output)["runs"]
    assert [x["live_requests"] for x in runs] == [200, 400]
    assert all(x["median_us"] > 0 and x["p99_us"] >= x["median_us"] for x in runs)


def test_bench_sched_rejects_bad_sizes():
    r = invoke("bench", "sched", "--sizes", "10,abc")
    assert r.exit_code == 2 and "expected comma-separated integers" in r.output


def test_bench_sim_json_has_every_field_and_a_summary(tmp_path):
    out = tmp_path / "sim.json"
    r = invoke("bench", "sim", "--workload", "sharegpt", "--rps", "5", "--duration", "3", "--policies",
               "vllm,lvf", "--seeds", "2", "--workers", "1", "--json", str(out), "--plot-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 4
    for run in data["runs"]:
        assert RUN_FIELDS <= set(run), RUN_FIELDS - set(run)
    assert {(s["policy"], s["rps"]) for s in data["summary"]} == {("vllm", 5.0), ("lvf", 5.0)}
    assert all(len(s["ttft_attainment"]["ci95"]) == 2 for s in data["summary"])
    assert (tmp_path / "attainment_llama-3-8b_gh200.png").stat().st_size > 0


def test_bench_sim_bad_policy_and_bad_trace_line_are_clear_errors(tmp_path):
    r = invoke("bench", "sim", "--policies", "vllm,fifo", "--rps", "1", "--duration", "1")
    assert r.exit_code == 2 and "unknown policy ['fifo']" in r.output
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nbroken,line\n"
                     "2023-11-16 18:15:47.1000000,120,30\n")
    r = invoke("bench", "sim", "--workload", str(trace), "--arrival", "trace", "--rps", "1", "--duration", "1",
               "--policies", "vllm", "--seeds", "1", "--workers", "1")
    assert r.exit_code == 2 and "t.csv:3: expected 3 fields" in r.output
    out = tmp_path / "skip.json"
    r = invoke("bench", "sim", "--workload", str(trace), "--arrival", "trace", "--duration", "1", "--rps", "1",
               "--policies", "vllm", "--seeds", "1", "--workers", "1", "--skip-bad", "--json", str(out))
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["runs"][0]["workload_skipped_lines"] == 1


def test_bench_figures_rejects_an_unknown_selection():
    r = invoke("bench", "figures", "--only", "fig99")
    assert r.exit_code == 2 and "expected all|main|ablation|sweeps|report|replot" in r.output
