"""The profile schema: every section, key, type, bound and default, in one table.

Invariants: every key a profile may hold is listed here (anything else is an error); every value a
profile, an environment variable or a flag supplies passes :func:`check_value` before use; defaults
themselves pass it (checked at import). Tenants (``[[tenants]]``) are described by :data:`TENANT_KEYS`.
The ``[scheduler]`` knobs are generated from the core's knob table ``superinfer.core.KNOBS`` (bounds, default,
int or float, help), so every live-tunable knob of the core is a profile key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from superinfer.core import ENGINE_POLICIES, KNOB, KNOBS
from superinfer.daemon.params import PARAM_KEYS
from superinfer.sim.grounded import GPU_COSTS
from superinfer.tuner.fleet import check_storage, redact
from superinfer.tuner.space import DEFAULT_KNOBS as TUNER_KNOBS
from superinfer.tuner.space import TUNABLE_BOUNDS


@dataclass(frozen=True)
class Key:
    """One setting. ``kind``: int, float, bool, str, choice, b_xfer (the string "auto" or an int >= 0), knobs
    (a list of knob names of ``PARAM_BOUNDS``), caps (a table knob name -> number > 0) or storage (an Optuna
    storage URL, shown with its password redacted)."""

    kind: str
    default: Any
    help: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo itself is excluded (for "> 0")
    choices: tuple[str, ...] = ()

    def expected(self) -> str:
        """What a valid value looks like, for error messages."""
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "b_xfer":
            return "\"auto\" or an integer >= 0 (blocks per iteration per direction)"
        if self.kind == "knobs":
            return "a non-empty list of knob names (" + ", ".join(TUNABLE_BOUNDS) + ")"
        if self.kind == "caps":
            return "a table of knob name = number > 0 (knobs: " + ", ".join(TUNABLE_BOUNDS) + ")"
        if self.kind == "storage":
            return "sqlite:///PATH, postgresql://user@host/db, journal:PATH, memory, or empty"
        what = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}[self.kind]
        if self.lo is not None and self.hi is not None and not self.lo_open:
            return f"{what} within [{_num(self.lo)}, {_num(self.hi)}]"
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {_num(self.lo)}")
        if self.hi is not None:
            parts.append(f"<= {_num(self.hi)}")
        return what + (" " + " and ".join(parts) if parts else "")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


#: what each scheduler knob does (``superinferd config show``, the API schema): the core's knob table's help
KNOB_HELP: dict[str, str] = {k.name: k.help for k in KNOBS}


def _knob(name: str) -> Key:
    """The profile key of one live knob: bounds, default, kind and help from the core's table (``KNOBS``)."""
    k = KNOB[name]
    return Key("int" if k.kind is int else "float", k.default, k.help, k.lo, k.hi)


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

SCHEMA: dict[str, dict[str, Key]] = {
    "engine": {
        "model": Key("str", "llama-3-8b", "model profile of the twin and of the probe's block size "
                     "(superinfer.sim.models: llama-3-8b, qwen2.5-32b, mixtral-8x7b)"),
        "model_path": Key("str", "", "vLLM model (local directory or name); empty: the vllm backend is unavailable"),
        "served_model_name": Key("str", "", "model name clients send; empty: the model directory's name (vllm) or "
                                  "'superinfer-sim:<model>'"),
        "hardware": Key("str", "gh200", "the twin's hardware profile (superinfer.sim.hardware)"),
        "gpu_costs": Key("choice", "datasheet", "how the twin prices an iteration: the datasheet roofline, or terms "
                         "fitted to measured GPUs with vLLM's measured host work (grounded) or with a constant "
                         "overhead (grounded-gpu); docs/costmodel.md", choices=GPU_COSTS),
        "block_size": Key("int", 16, "tokens per KV block", 1, 1024),
        "max_num_seqs": Key("int", 256, "most sequences in one iteration", 1, 1 << 20),
        "max_num_batched_tokens": Key("int", 8192, "token budget of one iteration", 1, 1 << 24),
        "max_model_len": Key("int", 0, "vLLM max_model_len; 0: the model's own", 0, 1 << 24),
        "dram_gib": Key("float", 64.0, "host DRAM pool for parked KV (GiB); 0: no host tier (vLLM runs without the "
                        "DuplexKV connector)", 0, 1 << 20),
        "tiny_model": Key("bool", False, "serve a tiny random Llama, built offline in seconds at engine.model_path "
                          "(empty: <state-dir>/tiny-llama) when absent: demos and CPU hosts (its text is gibberish)"),
        "kv_cache_gib": Key("float", 0.0, "vLLM KV cache per rank (GiB, --kv-cache-memory-bytes); 0: vLLM sizes it "
                            "from gpu_memory_utilization (on CPU: that share of host memory)", 0, 1 << 20),
        "gpu_memory_utilization": Key("float", 0.9, "vLLM on GPU: share of HBM vLLM may use", 0, 1, lo_open=True),
        "num_gpu_blocks_override": Key("int", 0, "vLLM: fix the number of device KV blocks; 0: measured", 0, 1 << 30),
        "dtype": Key("choice", "auto", "vLLM dtype", choices=("auto", "float32", "bfloat16", "float16")),
        "async_scheduling": Key("choice", "auto", "vLLM schedules the next step while the device runs this one, "
                                "hiding the scheduler's host work: auto: vLLM's choice (on for GPUs, off on CPU); "
                                "on; off (--no-async-scheduling; the twin then adds the host work after the GPU's)",
                                choices=("auto", "on", "off")),
        "enforce_eager": Key("bool", False, "vLLM: no CUDA graphs / torch.compile"),
        "drain_timeout_s": Key("float", 30.0, "on SIGTERM, how long in-flight requests may finish", 0, 86400, lo_open=True),
        "startup_timeout_s": Key("float", 900.0, "vllm backend: how long model loading may take", 0, 86400, lo_open=True),
        "max_inflight": Key("int", 4096, "requests the daemon holds at once; more get 503", 1, 1 << 24),
        "cpu_nice": Key("int", 5, "vLLM on CPU: the engine's nice value above the daemon's, so the daemon "
                        "(deadlines, streams, /v1/state) keeps its share of cores the engine's threads fill; 0: "
                        "the same priority", 0, 19),
    },
    "slo": {
        "ttft_s": Key("float", 5.0, "time-to-first-token SLO of the default tenant (s)", 0, 3600, lo_open=True),
        "tbt_s": Key("float", 0.1, "time-between-tokens SLO of the default tenant (s)", 0, 3600, lo_open=True),
        "window_s": Key("float", 60.0, "window of the attainment and percentiles in /v1/state (s)", 0, 86400, lo_open=True),
        "default_tenant": Key("str", "default", "tenant of requests that name none"),
        "max_queue_ttft_x": Key("float", 0.0, "every tenant's first-token deadline as a multiple of its TTFT SLO, "
                                "unless the tenant sets max_queue_s: a request still without a first token that "
                                "long after it arrived is shed (HTTP 503 with Retry-After); 0: no deadline",
                                0, 1000),
        "shed_at_admission": Key("bool", False, "also shed a request at once when its predicted wait for a first "
                                 "token (waiting requests / measured first-token rate under load) passes its "
                                 "deadline (HTTP 503 with Retry-After, reason predicted)"),
        "unknown_tenant": Key("choice", "default", "a request naming an unknown tenant: serve it as the "
                              "default tenant, or reject it (HTTP 400)", choices=("default", "reject")),
    },
    "scheduler": {
        "policy": Key("choice", "lvf", "scheduling policy (lvf = RotaSched v2, lvf-paper = the paper's RotaSched; "
                      "others are baselines, twin only)",
                      choices=ENGINE_POLICIES),
        **{name: _knob(name) for name in PARAM_KEYS},
        "b_xfer": Key("b_xfer", "auto", "transfer budget; auto: vllm from the startup probe, sim from the twin's hardware"),
        "probe_size_mb": Key("int", 8, "startup probe: MiB per direction (small keeps startup fast)", 1, 1 << 16),
        "probe_repeats": Key("int", 3, "startup probe: repeats (median)", 1, 100),
        "iteration_s": Key("float", 0.05, "iteration time B_xfer is sized for (s)", 0, 10, lo_open=True),
        "eta": Key("float", 0.8, "share of an iteration copies may use", 0, 1, lo_open=True),
    },
    "tuner": {
        "mode": Key("choice", "shadow", "online tuner: off; shadow (decides and logs, writes nothing: the default of a "
                    "profile that does not say); advise (also publishes its candidate); auto (runs trials, writes params "
                    "as source 'tuner'; the shipped profiles measured safe say so)",
                    choices=("off", "shadow", "advise", "auto")),
        "window_s": Key("float", 120.0, "measurement window (s of arrivals)", 0, 86400, lo_open=True),
        "warmup_s": Key("float", 20.0, "after each change, arrivals this long are not counted (s)", 0, 3600),
        "min_requests": Key("int", 200, "decided requests a window needs (fewer: low load, frozen)", 1, 1 << 30),
        "max_window_s": Key("float", 900.0, "on sparse traffic a window grows to 1.25 min_requests / rate, at most "
                            "this (never below window_s); frozen (low load) only when this cannot hold min_requests",
                            0, 86400, lo_open=True),
        "cooldown_s": Key("float", 60.0, "after a decision, no new trial before this (s)", 0, 86400),
        "trust_region": Key("float", 0.5, "initial radius of local steps, as a share of the step caps", 0, 1, lo_open=True),
        "knobs": Key("knobs", tuple(TUNER_KNOBS), "the knobs the tuner moves (names from [scheduler]; b_xfer "
                     "only up to the host's measured budget, and not where there is no host tier)"),
        "step_caps": Key("caps", {}, "most one decision moves a knob, e.g. {step_slo_share = 0.5}; unset knobs: "
                         "the tuner's defaults"),
        "guard_margin": Key("float", 0.05, "roll back when a tenant's attainment is significantly more than this "
                            "below the incumbent's", 0, 1),
        "alpha": Key("float", 0.05, "one-sided level of the accept test", 0, 0.5, lo_open=True),
        "max_rollbacks_per_hour": Key("int", 3, "freeze after this many rollbacks in an hour", 1, 1000),
        "explore_budget": Key("float", 0.01, "local steps may lose at most this share of the attainment over the "
                              "last hour (realised losses); 0: only the arms file's settings are tried", 0, 1),
        "jump_gain": Key("float", 0.1, "a phase's arm is adopted without a trial when the arms file's study "
                         "measured at least this gain over the incumbent's setting in that phase; 1: never", 0, 1,
                         lo_open=True),
        "futility_margin": Key("float", 0.1, "a local step more than this below the incumbent after the first half "
                               "of its trial is rejected at once; 1: never", 0, 1, lo_open=True),
        "arm_test": Key("choice", "unless_worse", "verdict on an arms-file setting: unless_worse (adopted unless "
                        "the trial shows it worse) or noninferiority (the trial must show it is not worse)",
                        choices=("unless_worse", "noninferiority")),
        "arms_file": Key("str", "", "arms from `superinferd tune` (per-phase settings); empty: none"),
        "storage": Key("storage", "", "Optuna storage: sqlite:///..., postgresql://..., journal:PATH, memory; "
                       "empty: sqlite in <state-dir>/tuner.db. Anything but empty and memory is also the fleet's: "
                       "daemons naming the same one share their live trials (a PostgreSQL server holds only the "
                       "fleet's studies; the local search stays in <state-dir>/tuner.db)"),
        "seed": Key("int", 0, "seed of the bandit and the local search", 0, 1 << 31),
    },
    "load": {
        "rps": Key("float", 0.0, "requests per second the daemon sends itself through its own OpenAI endpoint (a "
                   "demo of a real engine; superinfer.daemon.selfload); 0: off", 0, 1e4),
        "prompt_words": Key("int", 24, "load: words per prompt, uniform in [n/2, n]", 1, 1 << 20),
        "max_tokens": Key("int", 256, "load: output tokens per request, uniform in [n/4, n] (EOS ignored)", 1, 1 << 20),
        "max_inflight": Key("int", 64, "load: most of its requests open at once (arrivals beyond are skipped)", 1, 1 << 20),
        "seed": Key("int", 0, "load: seed", 0, 1 << 31),
    },
    "sim": {
        "workload": Key("str", "chat", "twin replay: synthetic name (chat, code, sharegpt, lmsys, long-context) or trace path"),
        "arrival": Key("str", "poisson", "twin replay arrivals: poisson, gamma:<b>, hawkes[:n[:decay]]"),
        "rps": Key("float", 2.0, "twin replay rate (req/s); 0: no replay, HTTP requests only", 0, 1e6),
        "chunk_s": Key("float", 300.0, "the replay is generated chunk by chunk, each this long (s), seed+1 each", 0, 86400, lo_open=True),
        "seed": Key("int", 0, "replay seed", 0, 1 << 31),
    },
}

#: keys of one ``[[tenants]]`` entry; None default: inherit from ``[slo]``
TENANT_KEYS: dict[str, Key] = {
    "name": Key("str", None, "tenant name ([A-Za-z0-9_.-], up to 64 characters)"),
    "ttft_s": Key("float", None, "TTFT SLO (s); default [slo].ttft_s", 0, 3600, lo_open=True),
    "tbt_s": Key("float", None, "TBT SLO (s); default [slo].tbt_s", 0, 3600, lo_open=True),
    "weight": Key("float", 1.0, "VLT weight (>= 1)", 1, 1e6),
    "priority": Key("int", 0, "priority for the priority baseline (lower first)", -1000, 1000),
    "share": Key("float", 1.0, "twin replay: relative share of requests", 0, 1e6),
    "max_queue_s": Key("float", None, "first-token deadline (s): a request still without a first token this long "
                       "after it arrived is shed (HTTP 503 with Retry-After); default [slo].max_queue_ttft_x x ttft_s",
                       0, 86400, lo_open=True),
    "max_inflight": Key("int", 0, "most requests of this tenant in flight at once (0: no limit); one more is "
                        "refused at once with HTTP 429 and Retry-After (its share of the host)", 0, 1 << 20),
}


class SchemaError(ValueError):
    """A value does not match its key; ``expected`` says what would."""

    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(f"expected {expected}, got {value!r}")
        self.expected = expected
        self.value = value


def check_value(key: Key, value: Any) -> Any:
    """Return ``value`` (ints widened to float for float keys) or raise :class:`SchemaError`."""
    kind = key.kind
    if kind == "knobs":
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value or \
                any(not isinstance(k, str) or k not in TUNABLE_BOUNDS for k in value) or len(set(value)) != len(value):
            raise SchemaError(key.expected(), value)
        return tuple(value)
    if kind == "caps":
        if not isinstance(value, dict) or any(k not in TUNABLE_BOUNDS or isinstance(v, bool) or not isinstance(v, (int, float))
                                              or not math.isfinite(v) or v <= 0 for k, v in value.items()):
            raise SchemaError(key.expected(), value)
        return {k: float(v) for k, v in value.items()}
    if kind == "storage":
        if not isinstance(value, str):
            raise SchemaError(key.expected(), value)
        try:
            return check_storage(value)
        except ValueError:
            raise SchemaError(key.expected(), redact(value)) from None
    if kind == "b_xfer":
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SchemaError(key.expected(), value)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise SchemaError(key.expected(), value)
        return value
    if kind in ("str", "choice"):
        if not isinstance(value, str) or (kind == "choice" and value not in key.choices):
            raise SchemaError(key.expected(), value)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind == "float" else int):
        raise SchemaError(key.expected(), value)
    if kind == "float":
        value = float(value)
        if not math.isfinite(value):
            raise SchemaError(key.expected(), value)
    if key.lo is not None and (value <= key.lo if key.lo_open else value < key.lo):
        raise SchemaError(key.expected(), value)
    if key.hi is not None and value > key.hi:
        raise SchemaError(key.expected(), value)
    return value


def parse_text(key: Key, text: str) -> Any:
    """Parse an environment variable or ``--set`` value for ``key``; raises :class:`SchemaError`."""
    text = text.strip()
    try:
        if key.kind == "int":
            value: Any = int(text)
        elif key.kind == "float":
            value = float(text)
        elif key.kind == "bool":
            low = text.lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(text)
            value = low in ("1", "true", "yes", "on")
        elif key.kind == "b_xfer":
            value = text if text == "auto" else int(text)
        elif key.kind == "knobs":
            value = [k.strip() for k in text.split(",") if k.strip()]
        elif key.kind == "caps":
            value = {k.strip(): float(v) for k, _, v in (item.partition("=") for item in text.split(",") if item.strip())}
        else:
            value = text
    except ValueError:
        raise SchemaError(key.expected(), text) from None
    return check_value(key, value)


for _section, _keys in SCHEMA.items():  # the defaults obey their own schema
    for _name, _key in _keys.items():
        check_value(_key, _key.default)
