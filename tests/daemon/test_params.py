"""Live params: bounds from the core, and a params file the vLLM plugin accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from superinfer.core import PARAM_BOUNDS, Params, Tenant
from superinfer.daemon.params import ParamError, ParamStore, validate_update
from tests.daemon.conftest import DEFAULTS, knob_values


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


# ---- every knob of the core on every surface ---------------------------------------------------------
# The knobs are whatever superinfer.core.PARAM_BOUNDS holds; nothing below names one, so a knob added to
# the core is checked here without an edit.

KNOBS = list(PARAM_BOUNDS)


def _is_int(key: str) -> bool:
    return isinstance(DEFAULTS[key], int)


class _Backend:
    name, simulation = "sim", True

    def default_b_xfer(self) -> int | None:
        return None

    def counters(self) -> dict[str, int]:
        return {}


def _profile(tmp_path: Path, scheduler: dict[str, float | int]) -> Path:
    path = tmp_path / "knobs.toml"
    path.write_text("[scheduler]\nb_xfer = 64\n" + "".join(f"{k} = {v!r}\n" for k, v in scheduler.items()))
    return path


def test_knob_lists_come_from_the_core() -> None:
    from superinfer.daemon import metrics, startup
    from superinfer.daemon.params import INTEGER_KEYS, INTEGER_PARAM_KEYS, PARAM_DEFAULTS, PARAM_KEYS
    from superinfer.vllm import params as plugin

    assert PARAM_KEYS == tuple(KNOBS) == metrics.PARAM_NAMES == startup.PERSISTED_PARAM_KEYS == plugin.PARAM_KEYS
    assert PARAM_DEFAULTS == {k: DEFAULTS[k] for k in KNOBS}
    assert set(INTEGER_PARAM_KEYS) == {k for k in KNOBS if _is_int(k)} == set(plugin.INTEGER_PARAM_KEYS)
    assert {"min_residency", "max_rotations", "hopeless_last"} <= set(INTEGER_PARAM_KEYS)
    assert set(INTEGER_KEYS) == set(INTEGER_PARAM_KEYS) | {"b_xfer"}
    assert {"slack_gate_s", "rotation_margin_s", "hopeless_last"} <= set(KNOBS)


@pytest.mark.parametrize("key", KNOBS)
def test_every_core_knob_is_accepted_by_every_surface(key: str, tmp_path: Path) -> None:
    """Profile schema, env/--set, Config.params, PUT validation, the store and its params file, the
    plugin's parser, the /metrics gauge, the PUT body schema, state.json, and the bench options."""
    from superinfer.bench.engine.run import bench_vllm
    from superinfer.daemon.api import PARAMS_UPDATE_SCHEMA
    from superinfer.daemon.config import resolve
    from superinfer.daemon.metrics import DaemonMetrics
    from superinfer.daemon.schema import SCHEMA
    from superinfer.daemon.startup import initial_params, persist
    from superinfer.bench.twin.cli import bench_sim
    from superinfer.vllm.params import parse_params

    lo, hi = PARAM_BOUNDS[key]
    pv, uv = knob_values(key)
    # profile schema: bounds from PARAM_BOUNDS, the documented default is the Params default
    spec = SCHEMA["scheduler"][key]
    assert (spec.lo, spec.hi, spec.default, spec.kind) == (lo, hi, DEFAULTS[key], "int" if _is_int(key) else "float")
    assert type(spec.default) is type(DEFAULTS[key]) and spec.help
    for value in (lo, hi):
        cfg = resolve(None, profile_file=str(_profile(tmp_path, {key: value})), env={})
        assert getattr(cfg.params(), key) == value and cfg.values["scheduler"][key].source.startswith("profile:")
    assert getattr(resolve("chat", env={}).params(), key) == DEFAULTS[key]  # unstated: the core's default
    env = {f"SUPERINFER_SCHEDULER_{key.upper()}": str(pv)}
    assert getattr(resolve("chat", env=env).params(), key) == pv
    assert getattr(resolve("chat", env={}, sets=[f"scheduler.{key}={uv}"]).params(), key) == uv
    # PUT validation and the store; the params file is one the plugin accepts
    assert validate_update({key: lo}) == {key: lo} and validate_update({key: hi}) == {key: hi}
    cfg = resolve(None, profile_file=str(_profile(tmp_path, {key: pv})), env={})
    store = initial_params(cfg, _Backend(), None, tmp_path)
    assert store.values[key] == pv and store.snapshot()[key] == pv and store.source == "profile"
    store.update({key: uv}, "test")
    assert store.snapshot()[key] == uv and getattr(store.params(), key) == uv
    on_disk = json.loads((tmp_path / "params.json").read_text())
    assert on_disk[key] == uv and getattr(parse_params(on_disk).params, key) == uv
    # /metrics
    m = DaemonMetrics(["default"], backend="sim", profile="p", model="m", simulation=True)
    m.set_params(store.values, 64, store.version)
    sample = re.search(rf'^superinfer_scheduler_param{{param="{key}"}} (\S+)$', m.render().decode(), re.M)
    assert sample is not None and float(sample.group(1)) == uv
    # PUT body schema (OpenAPI)
    prop = PARAMS_UPDATE_SCHEMA["properties"][key]
    assert (prop["minimum"], prop["maximum"], prop["type"]) == (lo, hi, "integer" if _is_int(key) else "number")
    # state.json: persisted at shutdown, restored at the next start of the same profile
    state = persist(tmp_path / "state.json", cfg, _Backend(), store, 1.0, None)  # type: ignore[arg-type]
    saved = json.loads(state.read_text())
    assert saved["params"][key] == uv and saved["profile_params"][key] == pv
    again = initial_params(cfg, _Backend(), None, tmp_path)
    assert again.values[key] == uv and again.source.startswith("state:")
    # bench options
    assert key in {p.name for p in bench_sim.params} and key in {p.name for p in bench_vllm.params}


@pytest.mark.parametrize("key", KNOBS)
def test_out_of_bounds_knob_is_rejected_naming_the_key(key: str, tmp_path: Path) -> None:
    from superinfer.daemon.config import resolve
    from superinfer.daemon.profiles import ProfileError

    lo, hi = PARAM_BOUNDS[key]
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ParamError) as info:
            validate_update({key: bad})
        assert info.value.key == key and info.value.bound == (lo, hi) and key in str(info.value)
        with pytest.raises(ProfileError) as perr:
            resolve(None, profile_file=str(_profile(tmp_path, {key: bad})), env={})
        assert f"scheduler.{key}" in str(perr.value) and "within" in str(perr.value)
    if _is_int(key):
        with pytest.raises(ParamError, match=f"{key} must be an integer"):
            validate_update({key: lo + 0.5})
        with pytest.raises(ProfileError, match=f"scheduler.{key}.*expected an integer"):
            resolve(None, profile_file=str(_profile(tmp_path, {key: lo + 0.5})), env={})


def test_restore_skips_a_changed_profile_and_reads_a_state_saved_before_a_knob_existed(tmp_path: Path) -> None:
    from superinfer.daemon.config import resolve
    from superinfer.daemon.startup import initial_params, persist

    key = "slack_gate_s"
    pv, uv = knob_values(key)
    cfg = resolve(None, profile_file=str(_profile(tmp_path, {key: pv})), env={})
    store = initial_params(cfg, _Backend(), None, tmp_path)
    store.update({key: uv, "alpha": 7.5}, "test")
    persist(tmp_path / "state.json", cfg, _Backend(), store, 1.0, None)  # type: ignore[arg-type]
    # the profile's value of a knob changed: nothing is restored, the profile wins
    changed = resolve(None, profile_file=str(_profile(tmp_path, {key: DEFAULTS[key]})), env={})
    fresh = initial_params(changed, _Backend(), None, tmp_path)
    assert fresh.source == "profile" and fresh.values[key] == DEFAULTS[key] and fresh.values["alpha"] == 3.0
    # a state.json written before the v2 knobs existed (no such keys): alpha comes back, the new knobs
    # keep the profile's values (which state them at their defaults)
    saved = json.loads((tmp_path / "state.json").read_text())
    for part in ("params", "profile_params"):
        saved[part] = {k: v for k, v in saved[part].items() if k not in ("slack_gate_s", "rotation_margin_s",
                                                                          "hopeless_last", "step_slo_share")}
    (tmp_path / "state.json").write_text(json.dumps(saved))
    old = initial_params(changed, _Backend(), None, tmp_path)
    assert old.source.startswith("state:") and old.values["alpha"] == 7.5 and old.values[key] == DEFAULTS[key]
    # a persisted value out of bounds (hand-edited) is ignored, not fatal
    saved["params"]["min_residency"] = 2.5
    (tmp_path / "state.json").write_text(json.dumps(saved))
    assert initial_params(changed, _Backend(), None, tmp_path).source == "profile"
