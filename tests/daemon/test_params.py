"""Live params: bounds from the core, and a params file the vLLM plugin accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superinfer.core import PARAM_BOUNDS, Params, Tenant
from superinfer.daemon.params import ParamError, ParamStore, validate_update


def test_bounds_come_from_the_core() -> None:
    for key, (lo, hi) in PARAM_BOUNDS.items():
        validate_update({key: lo})
        validate_update({key: hi})
        with pytest.raises(ParamError) as info:
            validate_update({key: hi + 1})
        assert info.value.key == key and info.value.bound == (lo, hi) and str(hi) in str(info.value)


def test_store_writes_a_file_the_plugin_accepts(tmp_path: Path) -> None:
    from superinfer.vllm.params import parse_params

    tenants = [Tenant("chat", 5.0, 0.1, 2.0), Tenant("voice", 1.0, 0.05, 4.0, 1)]
    store = ParamStore(Params(), 64, tenants, tmp_path / "params.json", "test")
    seen: list[dict] = []
    store.listeners.append(seen.append)
    snap = store.update({"alpha": 6.0, "b_xfer": 10}, "test")
    assert snap["version"] == 2 and seen[-1]["alpha"] == 6.0
    live = parse_params(json.loads((tmp_path / "params.json").read_text()))
    assert live.params.alpha == 6.0 and live.b_xfer == 10
    assert {t.name: (t.ttft_slo, t.tbt_slo, t.weight, t.priority) for t in live.tenants} == {
        "chat": (5.0, 0.1, 2.0, 0), "voice": (1.0, 0.05, 4.0, 1)}
    with pytest.raises(ParamError):
        store.update({"alpha": -1}, "test")
    assert store.version == 2 and json.loads((tmp_path / "params.json").read_text())["alpha"] == 6.0
