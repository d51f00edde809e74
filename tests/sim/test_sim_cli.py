"""`bench sim` options that set the twin's KV capacity explicitly."""

import json

from click.testing import CliRunner

from superinfer.cli import main


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_bench_sim_hbm_and_dram_blocks(tmp_path):
    out = tmp_path / "sim.json"
    r = invoke("bench", "sim", "--workload", "sharegpt", "--rps", "4", "--duration", "3", "--policies", "vllm,lvf",
               "--seeds", "1", "--workers", "1", "--hbm-blocks", "96", "--dram-blocks", "300", "--json", str(out))
    assert r.exit_code == 0, r.output
    runs = {x["policy"]: x for x in json.loads(out.read_text())["runs"]}
    assert runs["vllm"]["hbm_blocks"] == runs["lvf"]["hbm_blocks"] == 96
    assert runs["lvf"]["dram_blocks"] == 300 and runs["vllm"]["dram_blocks"] == 0
    assert max(x["max_hbm_blocks_used"] for x in runs.values()) <= 96
    r = invoke("bench", "sim", "--hbm-blocks", "0", "--rps", "1", "--duration", "1")
    assert r.exit_code == 2 and "--hbm-blocks" in r.output
    r = invoke("bench", "sim", "--dram-blocks", "10", "--dram-gib", "1", "--rps", "1", "--duration", "1")
    assert r.exit_code == 2 and "at most one of --dram-gib and --dram-blocks" in r.output


def test_bench_sim_replays_a_trace_at_its_own_times(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": t, "input_length": 40, "output_length": 8} for t in (0, 700, 1300, 2900)]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "sim.json"
    r = invoke("bench", "sim", "--workload", f"mooncake:{trace}", "--arrival", "trace", "--rps", "trace",
               "--duration", "4", "--policies", "vllm", "--seeds", "1", "--workers", "1", "--json", str(out))
    assert r.exit_code == 0, r.output
    run = json.loads(out.read_text())["runs"][0]
    assert run["arrived"] == 4 and run["rps"] == 1.0
    r = invoke("bench", "sim", "--rps", "trace", "--duration", "1")
    assert r.exit_code == 2 and "needs --arrival trace" in r.output


def _knob_args():
    """A value other than the default for every knob of superinfer.core.PARAM_BOUNDS, as options."""
    from dataclasses import fields

    from superinfer.core import PARAM_BOUNDS, Params

    defaults = {f.name: f.default for f in fields(Params)}
    values = {}
    for key, (lo, hi) in PARAM_BOUNDS.items():
        is_int = isinstance(defaults[key], int)
        values[key] = next(v for v in ((int(c) if is_int else float(c)) for c in (lo, hi, (lo + hi) / 2))
                           if v != defaults[key])
    args = [a for k, v in values.items() for a in ("--" + k.replace("_", "-"), str(v))]
    return values, args


def test_bench_sim_takes_every_knob(tmp_path, monkeypatch):
    """--slack-gate-s, --rotation-margin-s, --hopeless-last (and every other knob of the core) reach the
    twin's Params and the JSON's config."""
    from superinfer.bench.twin import cli

    seen = []
    real = cli.run_grid
    monkeypatch.setattr(cli, "run_grid", lambda specs, workers: (seen.extend(specs), real(specs, workers))[1])
    values, args = _knob_args()
    assert {"slack_gate_s", "rotation_margin_s", "hopeless_last"} <= set(values)
    out = tmp_path / "sim.json"
    r = invoke("bench", "sim", "--workload", "sharegpt", "--rps", "2", "--duration", "2", "--policies", "lvf",
               "--seeds", "1", "--workers", "1", "--json", str(out), *args)
    assert r.exit_code == 0, r.output
    assert seen and all(getattr(s.params, k) == v for s in seen for k, v in values.items())
    config = json.loads(out.read_text())["config"]
    assert {k: config[k] for k in values} == values


def test_bench_sim_rejects_out_of_bounds_knobs_naming_them():
    from superinfer.core import PARAM_BOUNDS

    for key, (lo, hi) in PARAM_BOUNDS.items():
        for bad in (lo - 1, hi + 1):
            r = invoke("bench", "sim", "--rps", "1", "--duration", "1", "--" + key.replace("_", "-"), str(bad))
            assert r.exit_code == 2, (key, r.output)
            assert "--" + key.replace("_", "-") in r.output or key in r.output, r.output
    r = invoke("bench", "sim", "--rps", "1", "--duration", "1", "--hopeless-last", "0.5")
    assert r.exit_code == 2 and "--hopeless-last" in r.output


def test_a_failing_summary_never_loses_the_runs(tmp_path, monkeypatch):
    """The runs are the measurement; a summary (or plot) that fails is reported, exit 1, runs still written."""
    import superinfer.bench.twin.cli as sim_cli

    def broken(runs):
        raise KeyError("engine_counters")

    monkeypatch.setattr(sim_cli, "summarise", broken)
    out = tmp_path / "sim.json"
    r = CliRunner().invoke(main, ["bench", "sim", "--workload", "sharegpt", "--rps", "4", "--duration", "2",
                                  "--policies", "vllm,lvf", "--seeds", "1", "--workers", "1", "--json", str(out)])
    assert r.exit_code == 1 and "the runs are written unsummarised" in r.output
    doc = json.loads(out.read_text())
    assert {x["policy"] for x in doc["runs"]} == {"vllm", "lvf"} and "KeyError" in doc["summary_error"]
