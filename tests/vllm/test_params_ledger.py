"""The live params file and the scheduler-side host ledger, without an engine."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest

from superinfer.core import PARAM_BOUNDS, Params
from superinfer.vllm.params import INTEGER_PARAM_KEYS, PARAM_KEYS, ParamSource, parse_params, write_params


def _bump(path: Path) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_params_file_reload_and_keep_last_good(tmp_path: Path) -> None:
    pf = tmp_path / "p.json"
    write_params(pf, {"alpha": 5.0, "b_xfer": 12, "tenants": {"voice": {"ttft_slo": 1.0, "weight": 2.0}}})
    src = ParamSource(pf, check_every_s=0.0)
    live = src.current()
    assert live.params.alpha == 5.0 and live.b_xfer == 12 and live.tenants[0].name == "voice"
    pf.write_text(json.dumps({"alpha": 1000.0}))  # out of PARAM_BOUNDS
    _bump(pf)
    assert src.current().params.alpha == 5.0 and src.rejected == 1
    pf.write_text("{not json")
    _bump(pf)
    assert src.current().params.alpha == 5.0 and src.rejected == 2
    write_params(pf, {"alpha": 0.5, "delta_f": -1.0})
    _bump(pf)
    live = src.current()
    assert live.params.alpha == 0.5 and live.params.delta_f == -1.0 and live.b_xfer == 64
    assert src.reloads == 2 and live.version == 2
    pf.unlink()
    assert src.current().params.alpha == 0.5  # a missing file keeps the values too


@pytest.mark.parametrize("data, match", [
    ({"alpah": 1.0}, "unknown key"),
    ({"alpha": "3"}, "must be a number"),
    ({"b_xfer": -1}, "b_xfer"),
    ({"b_xfer": 1.5}, "b_xfer"),
    ({"min_residency": 2.5}, "integer"),
    ({"hopeless_last": 0.5}, "hopeless_last must be an integer"),
    ({"hopeless_last": 2}, "hopeless_last must be within"),
    ({"slack_gate_s": 3601.0}, "slack_gate_s must be within"),
    ({"rotation_margin_s": -1}, "rotation_margin_s must be within"),
    ({"slack_gate_s": "1"}, "slack_gate_s must be a number"),
    ({"max_rotations": float("inf")}, "max_rotations must be an integer"),
    ({"ttft_slo": 0}, "ttft_slo"),
    ({"tenants": {"x": {"colour": 1}}}, "tenant 'x'"),
    ([1, 2], "JSON object"),
])
def test_params_validation_names_the_key(data: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_params(data)


KNOBS = list(PARAM_BOUNDS)
DEFAULTS = {f.name: f.default for f in fields(Params)}


@pytest.mark.parametrize("key", KNOBS)
def test_params_file_takes_every_core_knob(key: str) -> None:
    """Every knob of superinfer.core.PARAM_BOUNDS: both bounds accepted (ints where Params has an int),
    just outside rejected naming the key; missing keys keep the Params default."""
    lo, hi = PARAM_BOUNDS[key]
    is_int = isinstance(DEFAULTS[key], int)
    assert (key in INTEGER_PARAM_KEYS) == is_int and key in PARAM_KEYS
    for value in (lo, hi):
        got = getattr(parse_params({key: value}).params, key)
        assert got == value and isinstance(got, int) == is_int
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ValueError, match=f"{key} must be within"):
            parse_params({key: bad})
    if is_int:
        assert type(getattr(parse_params({key: float(hi)}).params, key)) is int  # 1.0 in JSON is fine
        with pytest.raises(ValueError, match=f"{key} must be an integer"):
            parse_params({key: lo + 0.5})
    assert getattr(parse_params({}).params, key) == DEFAULTS[key]


def test_v2_knobs_reload_and_keep_last_good(tmp_path: Path) -> None:
    pf = tmp_path / "p.json"
    write_params(pf, {"slack_gate_s": -3600.0, "rotation_margin_s": 0.5, "hopeless_last": 0})
    src = ParamSource(pf, check_every_s=0.0)
    p = src.current().params
    assert (p.slack_gate_s, p.rotation_margin_s, p.hopeless_last) == (-3600.0, 0.5, 0)
    pf.write_text(json.dumps({"slack_gate_s": 1.0, "hopeless_last": 3}))  # hopeless_last out of bounds
    _bump(pf)
    assert src.current().params.slack_gate_s == -3600.0 and src.rejected == 1
    write_params(pf, {"hopeless_last": 1})
    _bump(pf)
    p = src.current().params
    assert p.hopeless_last == 1 and p.slack_gate_s == DEFAULTS["slack_gate_s"]  # a new file, not a patch


def test_bench_vllm_has_an_option_for_every_knob() -> None:
    from click.testing import CliRunner

    from superinfer.bench.engine.run import bench_vllm

    opts = {p.name: p for p in bench_vllm.params}
    assert set(PARAM_BOUNDS) <= set(opts)
    for key in ("slack_gate_s", "rotation_margin_s", "hopeless_last"):
        assert opts[key].default is None  # unset: the params file's (the core's) default
        r = CliRunner().invoke(bench_vllm, ["--build-tiny", "x", "--" + key.replace("_", "-"),
                                            str(PARAM_BOUNDS[key][1] + 1)])
        assert r.exit_code == 2 and "--" + key.replace("_", "-") in r.output, r.output


def test_ledger_tail_only_parking_and_fallback() -> None:
    pytest.importorskip("vllm")
    from superinfer.vllm.ledger import HostLedger

    led = HostLedger(capacity=6, block_size=4, async_load=False)
    # a running request with 10 computed tokens: 2 full blocks get eager syncs
    assert led.plan_sync("a", [7, 8, 9], 10, 5) == 2
    meta = led.build_meta()
    assert meta.syncs == [("a", 0, 7), ("a", 1, 8)] and led.free == 4
    assert led.counts("a") == (2, 0, 2)  # issued, not yet confirmed (rule 1)
    led.on_worker(meta.step, [])
    assert led.counts("a") == (2, 2, 0)
    # preempted: only the partial tail block is copied
    assert led.preempt("a", [7, 8, 9], 10, d2h_budget=8) == (10, 1)
    meta = led.build_meta()
    assert meta.swap_outs == [("a", [7, 8, 9], 2)] and led.free == 3
    assert led.matched("a", 0) == (10, False)
    led.after_alloc("a", [1, 2, 3], 10)
    assert led.build_meta().loads == [("a", [1, 2, 3], False)]
    assert led.counts("a") == (3, 2, 2 - 2)  # full blocks stay synced, the stale tail does not
    # a second request whose tail does not fit the pool falls back to its synced prefix (counted)
    assert led.plan_sync("b", [4, 5, 6, 10], 16, 8) == 3  # pool has 3 free
    led.on_worker(led.build_meta().step, [])
    assert led.preempt("b", [4, 5, 6, 10], 16, d2h_budget=8) == (12, 0)
    assert led.stats["recompute_fallbacks"] == 1 and led.stats["fallback_tokens"] == 4
    led.finished("a")
    led.finished("b")
    assert led.free == led.capacity and led.build_meta().drops == ["a", "b"]


def test_connector_default_load_is_sync_on_cpu() -> None:
    """On a CPU engine async loads only add empty steps (the copy thread competes with the engine loop)."""
    from types import SimpleNamespace

    from superinfer.vllm.connector import default_load

    assert default_load(SimpleNamespace(device_config=SimpleNamespace(device_type="cpu"))) == "sync"
    assert default_load(SimpleNamespace(device_config=SimpleNamespace(device_type="cuda"))) == "async"
    assert default_load(SimpleNamespace()) == "async"
