"""``superinferd probe --json`` and ``superinferd bench kv --json`` at small sizes (fields, not speed)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from superinfer.cli import main
from superinfer.core.budget import b_xfer_blocks

PROBE_FIELDS = {
    "device", "backend", "block_bytes", "h2d_gbps", "d2h_gbps", "duplex_h2d_gbps", "duplex_d2h_gbps",
    "duplex_factor", "iteration_s", "b_xfer_blocks",
}


def test_probe_json_fields_and_budget() -> None:
    res = CliRunner().invoke(main, ["probe", "--json", "--size-mb", "4", "--repeats", "1", "--device", "cpu",
                                    "--iteration-s", "0.1"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert PROBE_FIELDS <= set(data)
    assert data["device"] == "cpu" and data["backend"] == "torch" and "DRAM" in data["note"]
    assert data["block_bytes"] == 131072 * 16  # llama-3-8b, 16-token blocks
    assert 0 < data["duplex_factor"] <= 1
    slower = min(data["duplex_h2d_gbps"], data["duplex_d2h_gbps"]) * 1e9
    # rounding of the printed GB/s can move the floor by at most one block
    assert abs(data["b_xfer_blocks"] - b_xfer_blocks(slower, 0.1, data["block_bytes"])) <= 1


def test_probe_text_and_bad_options() -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["probe", "--size-mb", "4", "--repeats", "1", "--model", "qwen2.5-32b"])
    assert res.exit_code == 0 and "B_xfer" in res.output
    assert runner.invoke(main, ["probe", "--model", "nope"]).exit_code == 2
    assert runner.invoke(main, ["probe", "--block-size", "0"]).exit_code == 2
    assert runner.invoke(main, ["probe", "--size-mb", "1", "--model", "qwen2.5-32b"]).exit_code == 2


def test_bench_kv_json_rows() -> None:
    res = CliRunner().invoke(main, ["bench", "kv", "--json", "--total-mb", "8", "--repeats", "1"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    names = [r["row"] for r in data["rows"]]
    yardstick = ["plain_copy"] if data["device"] == "cpu" else []  # the CPU-only row (a lent H200 has none)
    assert names == ["naive", "merged_4mb", "merged_kernel", "full_duplex", *yardstick, "ideal"]
    for row in data["rows"]:
        assert {"ms", "gbps", "ratio_to_ideal"} <= set(row) and row["ms"] > 0
        if row["row"] != "ideal" and yardstick:
            assert "ratio_to_copy" in row
    assert data["bytes_each_way"] == 8 << 20 and data["segments_per_block"] == 64
    assert "merged_of_copy" in data and data["note"]


def test_bench_kv_rejects_bad_sizes() -> None:
    assert CliRunner().invoke(main, ["bench", "kv", "--total-mb", "0"]).exit_code == 2
