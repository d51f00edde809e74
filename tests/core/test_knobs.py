"""The core's knob table is the one source of every knob's facts; every surface exposes exactly its knobs."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from superinfer.core import (INTEGER_PARAMS, KNOB, KNOBS, PARAM_BOUNDS, PARAM_DEFAULTS, KnobError, Params,
                             check_knob)

NAMES = [k.name for k in KNOBS]


def test_every_knob_is_complete_and_its_default_within_bounds() -> None:
    assert len(set(NAMES)) == len(NAMES) and list(KNOB) == NAMES
    for k in KNOBS:
        assert k.kind in (int, float) and type(k.default) is k.kind, k
        assert k.lo < k.hi and k.lo <= k.default <= k.hi, k
        assert k.help.strip() and k.symbol.strip() and isinstance(k.unit, str), k
        assert k.option == "--" + k.name.replace("_", "-")
    assert {k.name: k.symbol for k in KNOBS if k.symbol != k.name} == {"alpha": "α", "delta_b": "δ_B",
                                                                       "delta_f": "δ_F"}


def test_core_names_and_params_derive_from_the_table() -> None:
    assert PARAM_BOUNDS == {k.name: (k.lo, k.hi) for k in KNOBS} and list(PARAM_BOUNDS) == NAMES
    assert PARAM_DEFAULTS == {k.name: k.default for k in KNOBS}
    assert INTEGER_PARAMS == tuple(k.name for k in KNOBS if k.kind is int)
    field_defaults = {f.name: f.default for f in fields(Params)}
    for k in KNOBS:  # Params has a field per knob, defaulting to the table's default, of its kind
        assert field_defaults[k.name] == k.default and type(field_defaults[k.name]) is k.kind
    assert set(field_defaults) - set(NAMES) == {"sarathi_token_budget"}  # not a live knob


@pytest.mark.parametrize("name", NAMES)
def test_one_validator(name: str) -> None:
    k = KNOB[name]
    assert check_knob(name, k.lo) == k.lo and check_knob(name, k.hi) == k.hi
    for bad, match in ((k.lo - 1, "must be within"), (k.hi + 1, "must be within"), ("1", "must be a number"),
                       (True, "must be a number"), (math.nan, "must be an integer" if k.kind is int else "must be a finite number")):
        with pytest.raises(KnobError, match=f"^{name} {match}") as info:
            check_knob(name, bad)
        assert info.value.key == name and info.value.bound == (k.lo, k.hi)
        with pytest.raises(ValueError, match=f"params: {name} "):
            Params(**{name: bad})
    if k.kind is int:
        assert type(check_knob(name, float(k.hi))) is int
        with pytest.raises(KnobError, match=f"{name} must be an integer"):
            check_knob(name, k.lo + 0.5)


def test_every_surface_exposes_exactly_the_tables_knobs() -> None:
    """The profile schema, the API schema, ``bench sim`` and ``bench vllm``/``bench fidelity``: the table's
    knobs with its bounds and kinds, and its defaults (``bench vllm``: the documented exceptions only)."""
    from superinfer.bench.engine.run import ENGINE_KNOB_DEFAULTS, bench_vllm
    from superinfer.bench.fidelity.run import bench_fidelity
    from superinfer.daemon.api import PARAMS_UPDATE_SCHEMA
    from superinfer.daemon.schema import SCHEMA
    from superinfer.bench.twin.cli import bench_sim

    scheduler = {n: key for n, key in SCHEMA["scheduler"].items() if n in KNOB or n in PARAM_BOUNDS}
    assert list(scheduler) == NAMES
    for k in KNOBS:
        key = scheduler[k.name]
        assert (key.kind, key.default, key.lo, key.hi, key.help) == (k.kind.__name__, k.default, k.lo, k.hi, k.help)
    props = {n: p for n, p in PARAMS_UPDATE_SCHEMA["properties"].items() if n != "b_xfer"}
    assert list(props) == NAMES
    for k in KNOBS:
        p = props[k.name]
        assert (p["minimum"], p["maximum"], p["type"]) == (k.lo, k.hi, "integer" if k.kind is int else "number")
    for command, defaults in ((bench_sim, {}), (bench_vllm, ENGINE_KNOB_DEFAULTS),
                              (bench_fidelity, ENGINE_KNOB_DEFAULTS)):
        opts = {p.name: p for p in command.params if p.name in KNOB}
        assert list(opts) == NAMES, command.name
        for k in KNOBS:
            o = opts[k.name]
            assert o.opts == [k.option] and (o.type.min, o.type.max) == (k.lo, k.hi), (command.name, k.name)
            assert o.default == defaults.get(k.name, k.default), (command.name, k.name)
            assert k.help in (o.help or ""), (command.name, k.name)
    # bench vllm/fidelity: the knobs it leaves unset get the params file's default, the table's; the one it
    # defaults otherwise is delta_f (documented at ENGINE_KNOB_DEFAULTS), so one run of the table's default
    # differs from bench sim's only there
    assert {n: d for n, d in ENGINE_KNOB_DEFAULTS.items() if d is not None} == {"delta_f": 0.0}


def test_dashboard_labels_come_from_the_table() -> None:
    from superinfer.tui.panels import SYMBOL

    assert SYMBOL == {"alpha": "α", "delta_b": "δ_B", "delta_f": "δ_F", "b_xfer": "B_xfer"}
    assert all(SYMBOL[k.name] == k.symbol for k in KNOBS if k.name in SYMBOL)


def test_the_params_file_has_one_owner(tmp_path) -> None:
    """The daemon writes the file with the plugin's own writer; what it writes the plugin parses back."""
    import json

    from superinfer.core import Tenant
    from superinfer.daemon.params import ParamStore
    from superinfer.vllm.params import params_file_data, parse_params

    tenants = [Tenant("chat", 5.0, 0.1, 2.0), Tenant("voice", 1.0, 0.05, 4.0, 1)]
    store = ParamStore(Params(delta_f=-1.0), 32, tenants, tmp_path / "params.json", "test")
    on_disk = json.loads((tmp_path / "params.json").read_text())
    assert on_disk == params_file_data(store.values, tenants) == store.file_data()
    live = parse_params(on_disk)
    assert live.params == Params(delta_f=-1.0) and live.b_xfer == 32 and live.default_tenant.ttft_slo == 5.0
