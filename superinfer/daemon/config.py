"""The effective configuration: flags > environment (``SUPERINFER_*``) > profile file > defaults.

Every value carries where it came from (``default``, ``profile:<path>``, ``env:<NAME>``, ``flag:<option>``,
``state:<path>``), which ``superinferd config show`` prints. Profile keys map to environment variables
``SUPERINFER_<SECTION>_<KEY>`` (e.g. ``SUPERINFER_SCHEDULER_ALPHA=2``) and to ``--set section.key=value``
flags; daemon settings (host, port, backend, device, state dir) come from flags, ``SUPERINFER_<NAME>`` or
defaults only. Invariants: a :class:`Config` is fully validated (tenants resolved, the default tenant
exists, every value within its schema); errors raise :class:`~superinfer.daemon.profiles.ProfileError`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from superinfer.core import Params, Tenant, TenantTable
from superinfer.daemon.params import PARAM_KEYS
from superinfer.daemon.parallel import layout_errors
from superinfer.daemon.profiles import Profile, ProfileError, find_profile, load_profile
from superinfer.daemon.schema import SCHEMA, TENANT_KEYS, Key, SchemaError, check_value, parse_text
from superinfer.tuner.fleet import redact

ENV_PREFIX = "SUPERINFER_"

#: daemon settings: not profile keys (one profile serves many hosts), only flags / env / defaults
DAEMON: dict[str, Key] = {
    "host": Key("str", "127.0.0.1", "control API address (loopback by default)"),
    "port": Key("int", 8780, "control API port (and the OpenAI API of both backends)", 0, 65535),
    "backend": Key("choice", "auto", "auto: vllm when a device and the profile's model are there, else sim",
                   choices=("auto", "vllm", "sim")),
    "device": Key("choice", "auto", "device for the probe and vLLM", choices=("auto", "cpu", "cuda")),
    "state_dir": Key("str", "", "pid file, api-token, params.json, state.json"),
    "engine_port": Key("int", 0, "vllm backend: port of the vLLM child on loopback; 0: a free port", 0, 65535),
}


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str


@dataclass
class Config:
    """Resolved settings. ``values[section][key]`` and ``daemon[key]`` are :class:`Setting` s."""

    profile: str
    profile_path: Path
    values: dict[str, dict[str, Setting]]
    daemon: dict[str, Setting]
    tenants: list[Tenant]
    tenant_shares: dict[str, float]
    tenant_source: str
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, section: str, key: str) -> Any:
        return self.values[section][key].value

    def d(self, key: str) -> Any:
        return self.daemon[key].value

    @property
    def state_dir(self) -> Path:
        return Path(self.d("state_dir"))

    def params(self) -> Params:
        """The ``[scheduler]`` knobs (every key of ``PARAM_BOUNDS``) as the core's :class:`Params`."""
        s = self.values["scheduler"]
        return Params().replace(**{k: s[k].value for k in PARAM_KEYS})

    def tenant_table(self) -> TenantTable:
        return TenantTable(self.tenants)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``config show --json`` and ``/v1/config``: ``{value, source}`` per key."""
        out: dict[str, Any] = {"profile": {"name": self.profile, "path": str(self.profile_path)}}
        out["daemon"] = {k: {"value": s.value, "source": s.source} for k, s in self.daemon.items()}
        for section, keys in self.values.items():
            out[section] = {k: {"value": _shown(section, k, s.value), "source": s.source} for k, s in keys.items()}
        out["tenants"] = {
            "source": self.tenant_source,
            "list": [{"name": t.name, "ttft_s": t.ttft_slo, "tbt_s": t.tbt_slo, "weight": t.weight,
                      "max_queue_s": t.max_queue_s if math.isfinite(t.max_queue_s) else None,
                      "max_inflight": t.max_inflight,
                      "priority": t.priority, "share": self.tenant_shares[t.name]} for t in self.tenants],
        }
        return out


def _shown(section: str, key: str, value: Any) -> Any:
    """A value as shown to anyone: a storage URL without its password."""
    spec = SCHEMA.get(section, {}).get(key)
    return redact(value) if spec is not None and spec.kind == "storage" and isinstance(value, str) else value


def default_state_dir(env: dict[str, str] | None = None) -> tuple[str, str]:
    """(directory, source): ``$STATE_DIRECTORY`` under systemd, ``/var/lib/superinfer`` for a system
    service without it, else ``$XDG_STATE_HOME/superinfer`` (default ``~/.local/state``)."""
    env = os.environ if env is None else env
    if env.get("STATE_DIRECTORY"):
        return env["STATE_DIRECTORY"].split(":")[0], "env:STATE_DIRECTORY"
    if env.get("INVOCATION_ID") and os.getuid() == 0:
        return "/var/lib/superinfer", "default (system service)"
    xdg = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(xdg) / "superinfer"), "default ($XDG_STATE_HOME/superinfer)"


def _env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section.upper()}_{key.upper()}"


def parse_sets(items: tuple[str, ...] | list[str]) -> dict[tuple[str, str], str]:
    """``--set section.key=value`` flags -> {(section, key): text}."""
    out: dict[tuple[str, str], str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        section, dot, key = name.strip().partition(".")
        if not sep or not dot:
            raise ProfileError(None, "--set", f"expected section.key=value, got {item!r}")
        if section not in SCHEMA or key not in SCHEMA[section]:
            raise ProfileError(None, f"--set {name}", "unknown key; see `superinferd config show`")
        out[(section, key)] = text
    return out


def resolve(
    profile: str | None,
    *,
    profile_file: str | None = None,
    flags: dict[str, Any] | None = None,
    sets: tuple[str, ...] | list[str] = (),
    env: dict[str, str] | None = None,
) -> Config:
    """Build the effective configuration. ``flags``: daemon settings given on the command line (None =
    not given). Raises :class:`ProfileError` on any invalid input."""
    env = dict(os.environ if env is None else env)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    name = profile or env.get("SUPERINFER_PROFILE") or "chat"
    pfile = profile_file or env.get("SUPERINFER_PROFILE_FILE") or None
    path = find_profile(name, pfile)
    prof = load_profile(path, name if pfile is None else path.stem)
    _check_env(env)
    overrides = parse_sets(sets)

    values: dict[str, dict[str, Setting]] = {}
    for section, keys in SCHEMA.items():
        values[section] = {}
        for key, spec in keys.items():
            setting = Setting(spec.default, "default")
            if key in prof.values.get(section, {}):
                setting = Setting(prof.values[section][key], f"profile:{path}")
            ename = _env_name(section, key)
            if ename in env:
                setting = Setting(_parse(spec, env[ename], f"env {ename}"), f"env:{ename}")
            if (section, key) in overrides:
                setting = Setting(_parse(spec, overrides[(section, key)], f"--set {section}.{key}"),
                                  f"flag:--set {section}.{key}")
            values[section][key] = setting

    daemon: dict[str, Setting] = {}
    for key, spec in DAEMON.items():
        setting = Setting(spec.default, "default")
        if key == "state_dir":
            setting = Setting(*default_state_dir(env))
        ename = ENV_PREFIX + key.upper()
        if ename in env:
            setting = Setting(_parse(spec, env[ename], f"env {ename}"), f"env:{ename}")
        if key in flags:
            try:
                setting = Setting(check_value(spec, flags[key]), f"flag:--{key.replace('_', '-')}")
            except SchemaError as exc:
                raise ProfileError(None, f"--{key.replace('_', '-')}", str(exc)) from None
        daemon[key] = setting
    daemon["state_dir"] = Setting(str(Path(daemon["state_dir"].value).expanduser()), daemon["state_dir"].source)
    if values["engine"]["tiny_model"].value and not values["engine"]["model_path"].value:
        values["engine"]["model_path"] = Setting(str(Path(daemon["state_dir"].value) / TINY_MODEL_DIR),
                                                 f"engine.tiny_model ({values['engine']['tiny_model'].source})")

    tenants, shares, tsource = _resolve_tenants(prof, values)
    _check_names(values)
    _check_layout(values)
    return Config(prof.name, path, values, daemon, tenants, shares, tsource)


TINY_MODEL_DIR = "tiny-llama"  # where engine.tiny_model builds its model in the state dir


def _parse(spec: Key, text: str, where: str) -> Any:
    try:
        return parse_text(spec, text)
    except SchemaError as exc:
        raise ProfileError(None, where, str(exc)) from None


def _check_env(env: dict[str, str]) -> None:
    """Unknown ``SUPERINFER_<SECTION>_*`` variables are errors (a typo must not pass silently)."""
    for ename in env:
        for section, keys in SCHEMA.items():
            prefix = f"{ENV_PREFIX}{section.upper()}_"
            if ename.startswith(prefix) and ename[len(prefix):].lower() not in keys:
                raise ProfileError(None, f"env {ename}", f"unknown key; [{section}] takes {', '.join(sorted(keys))}")


def _resolve_tenants(prof: Profile, values: dict[str, dict[str, Setting]]) -> tuple[list[Tenant], dict[str, float], str]:
    slo = values["slo"]
    default_name = slo["default_tenant"].value
    multiple = float(slo["max_queue_ttft_x"].value)

    def deadline(entry: dict[str, Any], ttft_s: float) -> float:
        """The tenant's ``max_queue_s``, else ``[slo].max_queue_ttft_x`` x its TTFT SLO (0: none)."""
        if "max_queue_s" in entry:
            return float(entry["max_queue_s"])
        return multiple * ttft_s if multiple > 0 else math.inf

    if not prof.tenants:
        ttft = float(slo["ttft_s"].value)
        t = Tenant(default_name, ttft, slo["tbt_s"].value, max_queue_s=deadline({}, ttft))
        return [t], {t.name: 1.0}, "default (one tenant from [slo])"
    tenants, shares = [], {}
    for i, entry in enumerate(prof.tenants):
        try:
            ttft = float(entry.get("ttft_s", slo["ttft_s"].value))
            t = Tenant(entry["name"], ttft, float(entry.get("tbt_s", slo["tbt_s"].value)),
                       float(entry.get("weight", TENANT_KEYS["weight"].default)),
                       int(entry.get("priority", TENANT_KEYS["priority"].default)), max_queue_s=deadline(entry, ttft),
                       max_inflight=int(entry.get("max_inflight", TENANT_KEYS["max_inflight"].default)))
        except ValueError as exc:
            raise ProfileError(prof.path, f"tenants[{i}]", str(exc)) from None
        tenants.append(t)
        shares[t.name] = float(entry.get("share", TENANT_KEYS["share"].default))
    names = [t.name for t in tenants]
    if default_name not in names:
        raise ProfileError(prof.path, "slo.default_tenant",
                           f"expected one of the profile's tenants {names}, got {default_name!r}")
    if sum(shares.values()) <= 0:
        raise ProfileError(prof.path, "tenants[].share", "expected at least one tenant with share > 0")
    # the default tenant first: index 0 is what the twin and the plugin fall back to
    tenants.sort(key=lambda t: t.name != default_name)
    return tenants, shares, f"profile:{prof.path}"


def _check_names(values: dict[str, dict[str, Setting]]) -> None:
    """Names the schema cannot check by type: model, hardware, workload and arrival of the twin."""
    from superinfer.sim.hardware import get_hardware
    from superinfer.sim.models import get_model
    from superinfer.sim.workload.arrivals import parse_arrival
    from superinfer.sim.workload import WorkloadError, servegen
    from superinfer.sim.workload.lengths import LENGTHS

    checks = (("engine", "model", get_model), ("engine", "hardware", get_hardware),
              ("sim", "arrival", parse_arrival))
    for section, key, fn in checks:
        s = values[section][key]
        try:
            fn(s.value)
        except ValueError as exc:
            raise ProfileError(s.source, f"{section}.{key}", str(exc)) from None
    costs = values["engine"]["gpu_costs"]
    if costs.value != "datasheet":
        from superinfer.sim.grounded import grounded_problem

        problem = grounded_problem(get_model(values["engine"]["model"].value),
                                   get_hardware(values["engine"]["hardware"].value))
        if problem:
            raise ProfileError(costs.source, "engine.gpu_costs", problem)
    w = values["sim"]["workload"]
    if w.value.startswith(servegen.PREFIX):
        try:
            servegen.read_servegen(servegen.split_spec(w.value)[0])
        except (WorkloadError, OSError) as exc:
            raise ProfileError(w.source, "sim.workload", str(exc)) from None
    elif w.value not in LENGTHS and not Path(w.value.partition(":")[2] or w.value).exists():
        raise ProfileError(w.source, "sim.workload",
                           f"expected a trace file, servegen:DIR or one of {', '.join(sorted(LENGTHS))}, "
                           f"got {w.value!r}")


def _check_layout(values: dict[str, dict[str, Setting]]) -> None:
    """``[engine]`` tensor x pipeline parallel sizes against the model's shapes (:mod:`.parallel`)."""
    e = values["engine"]
    tp, pp = e["tensor_parallel_size"], e["pipeline_parallel_size"]
    if tp.value * pp.value == 1:
        return
    problems, where = layout_errors(tp.value, pp.value, e["model_path"].value, e["model"].value)
    for name, setting in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp)):
        mine = [p for p in problems if p.startswith(name)]
        if mine:
            raise ProfileError(setting.source, f"engine.{name}", f"{'; '.join(mine)} (shapes from {where})")
