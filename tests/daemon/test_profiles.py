"""Profiles: the bundled ones are valid; broken ones exit 2 naming file and key; precedence and search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superinfer.daemon.config import resolve
from superinfer.daemon.profiles import ProfileError, available_profiles, bundled_dir, load_profile
from tests.daemon.conftest import base_env, run_cli
from tests.daemon.profiles import write_profile

pytestmark = pytest.mark.timeout(120)

BUNDLED = sorted(bundled_dir().glob("*.toml"))


def test_bundled_profiles_exist() -> None:
    assert {p.stem for p in BUNDLED} >= {"chat", "voice", "batch", "multitenant"}


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_every_bundled_profile_is_valid(path: Path) -> None:
    load_profile(path)
    cfg = resolve(path.stem, env={})
    assert cfg.profile_path == path
    cfg.params()
    cfg.tenant_table()


def test_profile_slos() -> None:
    chat = resolve("chat", env={})
    assert (chat.tenants[0].ttft_slo, chat.tenants[0].tbt_slo) == (5.0, 0.1)
    assert resolve("voice", env={}).tenants[0].tbt_slo == 0.05
    assert resolve("batch", env={}).tenants[0].ttft_slo > 60
    multi = resolve("multitenant", env={})
    assert len(multi.tenants) == 3
    assert len({(t.ttft_slo, t.tbt_slo) for t in multi.tenants}) == 3
    assert len({t.weight for t in multi.tenants}) == 3
    assert multi.tenants[0].name == multi.get("slo", "default_tenant")


BROKEN = [
    ("[engine]\nmax_num_seqs = 4\nbogus = 1\n", "engine.bogus", "unknown key"),
    ("[enigne]\nmax_num_seqs = 4\n", "enigne", "unknown section"),
    ("[engine]\nmax_num_seqs = \"4\"\n", "engine.max_num_seqs", "expected an integer"),
    ("[engine]\nmax_num_seqs = 0\n", "engine.max_num_seqs", "within [1, 1048576], got 0"),
    ("[slo]\nttft_s = 0\n", "slo.ttft_s", "> 0"),
    ("[slo]\ntbt_s = -0.1\n", "slo.tbt_s", "> 0"),
    ("[slo]\nunknown_tenant = \"drop\"\n", "slo.unknown_tenant", "one of 'default', 'reject'"),
    ("[scheduler]\nalpha = 101.0\n", "scheduler.alpha", "within [0, 100]"),
    ("[scheduler]\nb_xfer = \"lots\"\n", "scheduler.b_xfer", "\"auto\" or an integer"),
    ("[scheduler]\npolicy = \"random\"\n", "scheduler.policy", "one of"),
    ("[tuner]\nenabled = true\n", "tuner.enabled", "unknown key"),
    ("[tuner]\nmode = \"on\"\n", "tuner.mode", "one of 'off', 'shadow', 'advise', 'auto'"),
    ("[tuner]\nknobs = [\"alpha\", \"speed\"]\n", "tuner.knobs", "a non-empty list of knob names"),
    ("[tuner]\nknobs = []\n", "tuner.knobs", "a non-empty list of knob names"),
    ("[tuner]\nstep_caps = {alpha = 0.0}\n", "tuner.step_caps", "number > 0"),
    ("[tuner]\nstep_caps = {speed = 1.0}\n", "tuner.step_caps", "knob name"),
    ("[tuner]\ntrust_region = 1.5\n", "tuner.trust_region", "> 0 and <= 1"),
    ("[tuner]\nmin_requests = 0\n", "tuner.min_requests", "within [1,"),
    ("[tuner]\nstorage = \"mysql://fleet:s3cret@db/x\"\n", "tuner.storage", "expected sqlite:///PATH, postgresql://"),
    ("[tuner]\nstorage = \"tuner.db\"\n", "tuner.storage", "journal:PATH, memory, or empty"),
    ("[[tenants]]\nname = \"a\"\n[[tenants]]\nname = \"a\"\n", "tenants[1].name", "duplicate tenant 'a'"),
    ("[[tenants]]\nname = \"a\"\nweight = 0.5\n", "tenants[0].weight", "within [1, 1000000], got 0.5"),
    ("[[tenants]]\nname = \"a\"\nttft_s = 0.0\n", "tenants[0].ttft_s", "> 0"),
    ("[[tenants]]\nname = \"a\"\ncolour = \"red\"\n", "tenants[0].colour", "unknown key"),
    ("[[tenants]]\nttft_s = 1.0\n", "tenants[0].name", "missing"),
    ("[[tenants]]\nname = \"a b\"\n", "tenants[0].name", "expected a name"),
    ("[slo]\ndefault_tenant = \"x\"\n[[tenants]]\nname = \"a\"\n", "slo.default_tenant", "expected one of"),
    ("[engine]\nmodel = \"gpt-9\"\n", "engine.model", "gpt-9"),
    ("[engine\nmax_num_seqs = 4\n", None, "invalid TOML"),
    ("[engine]\ngpu_costs = \"measured\"\n", "engine.gpu_costs", "one of 'datasheet', 'grounded', 'grounded-gpu'"),
    ("[engine]\nmodel = \"mixtral-8x7b\"\ngpu_costs = \"grounded\"\n", "engine.gpu_costs", "no expert (MoE) GEMM"),
    # RotaSched v2 knobs: bounds from superinfer.core.PARAM_BOUNDS, integers where Params has an int
    ("[scheduler]\nslack_gate_s = 4000.0\n", "scheduler.slack_gate_s", "within [-3600, 3600], got 4000.0"),
    ("[scheduler]\nrotation_margin_s = -0.5\n", "scheduler.rotation_margin_s", "within [0, 60], got -0.5"),
    ("[scheduler]\nhopeless_last = 2\n", "scheduler.hopeless_last", "within [0, 1], got 2"),
    ("[scheduler]\nhopeless_last = 0.5\n", "scheduler.hopeless_last", "expected an integer"),
    ("[scheduler]\nslack_gate = 1.0\n", "scheduler.slack_gate", "unknown key"),
]


@pytest.mark.parametrize("text,key,expected", BROKEN, ids=[b[1] or "syntax" for b in BROKEN])
def test_broken_profile_rejected_in_process(tmp_path: Path, text: str, key: str | None, expected: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        resolve(None, profile_file=str(path), env={})
    msg = str(info.value)
    assert str(path) in msg or (key or "").startswith("engine.model"), msg
    if key:
        assert key in msg, msg
    assert expected in msg, msg


@pytest.mark.parametrize("case", [0, 3, 11, 12], ids=["unknown-key", "bound", "duplicate-tenant", "weight"])
def test_broken_profile_exit_2_and_nothing_starts(tmp_path: Path, case: int) -> None:
    text, key, _ = BROKEN[case]
    path = tmp_path / "broken.toml"
    path.write_text(text)
    env = base_env(tmp_path)
    state = tmp_path / "state"
    for cmd in (["config", "show", "--profile-file", str(path)],
                ["start", "--backend", "sim", "--port", "0", "--state-dir", str(state), "--profile-file", str(path)]):
        r = run_cli(*cmd, env=env)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert str(path) in r.stderr and key in r.stderr, r.stderr
    assert not state.exists()  # nothing started, nothing written


def test_unknown_profile_and_bad_env_exit_2(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    r = run_cli("config", "show", "--profile", "nope", env=env)
    assert r.returncode == 2 and "no profile 'nope'" in r.stderr and "looked in" in r.stderr
    r = run_cli("config", "show", "--profile", "chat", env={**env, "SUPERINFER_SCHEDULER_ALPHA": "much"})
    assert r.returncode == 2 and "SUPERINFER_SCHEDULER_ALPHA" in r.stderr and "expected a number" in r.stderr
    r = run_cli("config", "show", "--profile", "chat", env={**env, "SUPERINFER_SLO_TTFT": "1"})
    assert r.returncode == 2 and "SUPERINFER_SLO_TTFT" in r.stderr and "unknown key" in r.stderr


def test_precedence_flags_env_profile_defaults(tmp_path: Path) -> None:
    env = {"SUPERINFER_SCHEDULER_ALPHA": "4.5", "SUPERINFER_SCHEDULER_DELTA_B": "0.25", "SUPERINFER_PORT": "9999"}
    cfg = resolve("chat", env=env, flags={"port": 1234}, sets=["scheduler.delta_b=0.5"])
    s = cfg.values["scheduler"]
    assert (s["alpha"].value, s["alpha"].source) == (4.5, "env:SUPERINFER_SCHEDULER_ALPHA")
    assert (s["delta_b"].value, s["delta_b"].source) == (0.5, "flag:--set scheduler.delta_b")
    assert s["delta_f"].source.startswith("profile:") and s["delta_f"].value == 0.5
    assert s["probe_repeats"].source == "default"
    assert (cfg.d("port"), cfg.daemon["port"].source) == (1234, "flag:--port")
    assert resolve("chat", env=env).daemon["port"].source == "env:SUPERINFER_PORT"
    assert resolve("chat", env={"STATE_DIRECTORY": "/var/lib/superinfer"}).d("state_dir") == "/var/lib/superinfer"
    assert resolve("chat", env={"XDG_STATE_HOME": "/x/state"}).d("state_dir") == "/x/state/superinfer"


def test_config_show_json_lists_every_value_and_source(tmp_path: Path) -> None:
    env = {**base_env(tmp_path), "SUPERINFER_ENGINE_MAX_NUM_SEQS": "7"}
    r = run_cli("config", "show", "--profile", "multitenant", "--json", "--port", "1", "--set", "slo.window_s=5",
                env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["engine"]["max_num_seqs"] == {"value": 7, "source": "env:SUPERINFER_ENGINE_MAX_NUM_SEQS"}
    assert data["slo"]["window_s"] == {"value": 5.0, "source": "flag:--set slo.window_s"}
    assert data["daemon"]["port"]["source"] == "flag:--port"
    assert data["slo"]["unknown_tenant"]["source"].startswith("profile:")
    assert data["engine"]["dram_gib"]["source"] == "default"
    assert [t["name"] for t in data["tenants"]["list"]] == ["chat", "voice", "bulk"]
    for section in ("engine", "slo", "scheduler", "tuner", "sim", "daemon"):
        assert all({"value", "source"} == set(v) for v in data[section].values())
    text = run_cli("config", "show", "--profile", "chat", env=base_env(tmp_path))
    assert text.returncode == 0 and "alpha" in text.stdout and "# profile:" in text.stdout


def test_search_path_user_profile_shadows_bundled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "xdg" / "superinfer" / "profiles"
    user.mkdir(parents=True)
    write_profile(user / "chat.toml", base={}, slo={"ttft_s": 2.5})
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cfg = resolve("chat", env={})
    assert cfg.profile_path == user / "chat.toml" and cfg.tenants[0].ttft_slo == 2.5
    assert available_profiles()["chat"] == user / "chat.toml"
    assert available_profiles()["voice"].parent == bundled_dir()
    with pytest.raises(ProfileError, match="expected a profile name"):
        resolve("../etc/passwd", env={})


def test_v2_knobs_in_a_profile_env_and_set(tmp_path: Path) -> None:
    """The RotaSched v2 knobs are [scheduler] keys like the others: profile, env, --set, config show."""
    from dataclasses import fields

    from superinfer.core import PARAM_BOUNDS, Params

    path = write_profile(tmp_path / "v2.toml", base={}, scheduler={
        "policy": "lvf-paper", "slack_gate_s": -3600.0, "rotation_margin_s": 0.25, "hopeless_last": 0})
    cfg = resolve(None, profile_file=str(path), env={"SUPERINFER_SCHEDULER_ROTATION_MARGIN_S": "0.5"},
                  sets=["scheduler.hopeless_last=1"])
    p, s = cfg.params(), cfg.values["scheduler"]
    assert cfg.get("scheduler", "policy") == "lvf-paper"
    assert (p.slack_gate_s, s["slack_gate_s"].source) == (-3600.0, f"profile:{path}")
    assert (p.rotation_margin_s, s["rotation_margin_s"].source) == (0.5, "env:SUPERINFER_SCHEDULER_ROTATION_MARGIN_S")
    assert (p.hopeless_last, s["hopeless_last"].source) == (1, "flag:--set scheduler.hopeless_last")
    # unstated knobs: the core's defaults, source "default"
    defaults = {f.name: f.default for f in fields(Params)}
    plain = resolve(None, profile_file=str(tmp_path / "v2.toml"), env={})
    for key in PARAM_BOUNDS:
        if key not in ("slack_gate_s", "rotation_margin_s", "hopeless_last"):
            assert (getattr(plain.params(), key), plain.values["scheduler"][key].source) == (defaults[key], "default")
    with pytest.raises(ProfileError, match="SUPERINFER_SCHEDULER_HOPELESS_LAST.*expected an integer"):
        resolve("chat", env={"SUPERINFER_SCHEDULER_HOPELESS_LAST": "yes"})
    with pytest.raises(ProfileError, match="scheduler.slack_gate_s.*within"):
        resolve("chat", env={}, sets=["scheduler.slack_gate_s=1e9"])
    r = run_cli("config", "show", "--profile", "chat", "--json", env=base_env(tmp_path))
    assert r.returncode == 0, r.stderr
    sched = json.loads(r.stdout)["scheduler"]
    for key in PARAM_BOUNDS:  # every knob is listed; those chat.toml leaves unset show the core's default
        assert sched[key]["source"] != "default" or sched[key]["value"] == defaults[key], key
    assert all(sched[k]["source"] == "default" for k in ("slack_gate_s", "rotation_margin_s", "hopeless_last"))


def test_tuner_storage_password_is_never_shown(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[tuner]\nstorage = "mysql://fleet:s3cret@db/x"\n')
    with pytest.raises(ProfileError) as info:
        resolve(None, profile_file=str(bad), env={})
    assert "tuner.storage" in str(info.value) and "s3cret" not in str(info.value)
    good = tmp_path / "good.toml"
    good.write_text('[tuner]\nstorage = "postgresql://fleet:s3cret@db.example/superinfer"\n')
    cfg = resolve(None, profile_file=str(good), env={})
    assert cfg.get("tuner", "storage").endswith("s3cret@db.example/superinfer")  # the daemon still has it
    assert cfg.as_dict()["tuner"]["storage"]["value"] == "postgresql://fleet:***@db.example/superinfer"
    r = run_cli("config", "show", "--profile-file", str(good), env=base_env(tmp_path))
    assert r.returncode == 0 and "fleet:***@db.example" in r.stdout and "s3cret" not in r.stdout + r.stderr


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_every_bundled_profile_ships_the_tuner_deciding_as_its_measurement_says(path: Path) -> None:
    """Issue 30 item 6: ``auto`` only where ``bench tuner --profile`` (its own traffic and twin, the tuner cold
    against the static knobs, 5 seeds x 1 h) gave the verdict ``auto``; ``shadow`` otherwise, and for a profile
    with no twin measurement (the real engine's ``cpu-demo``). Never ``off``: a profile that does not state its
    mode gets the default, ``shadow``."""
    mode = resolve(path.stem, env={}).get("tuner", "mode")
    assert mode in ("auto", "shadow")
    measured = Path(__file__).resolve().parents[2] / "bench" / "results" / "tuner_profiles" / f"{path.stem}.json"
    if measured.exists():
        res = json.loads(measured.read_text())
        assert res["settings"]["profile"] == path.stem and res["settings"]["seeds"] >= 5
        assert mode == res["verdict"], f"{path.stem} ships {mode!r}; its measurement says {res['verdict']!r}"
    else:
        assert mode == "shadow", f"{path.stem} ships {mode!r} with no measurement in {measured}"
    assert "tuner" in path.read_text(), f"{path.stem}: say in the profile why its tuner runs as it does"


def test_a_profile_s_twin_prices_as_its_engine_gpu_costs_say(tmp_path: Path) -> None:
    """The sim backend, `superinferd tune` and `bench tuner --profile` share twin_of: the key reaches its cost model,
    and the host work hides under the GPU's unless the profile turns async scheduling off."""
    from superinfer.daemon.profile_twin import twin_of

    for costs, grounded, mode in (("datasheet", False, "auto"), ("grounded", True, "auto"), ("grounded", True, "off")):
        path = tmp_path / f"{costs}-{mode}.toml"
        path.write_text(f"[engine]\nmodel = \"qwen2.5-32b\"\ngpu_costs = \"{costs}\"\nasync_scheduling = \"{mode}\"\n")
        cm, _ = twin_of(resolve(None, profile_file=str(path), env={}))
        assert (cm._grounded is not None) is grounded and cm.async_host is (mode != "off")
