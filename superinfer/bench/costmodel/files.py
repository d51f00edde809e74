"""Reading Vidur-format GPU profile files (``../shared/data/gpu-profiles/README.md`` says what a row is).

A profile folder holds, at any depth:

* ``compute/<gpu>/<model>/mlp.csv``: one layer's operators on one TP shard
  (:mod:`superinfer.sim.layerops` says what the columns mean), milliseconds;
* ``compute/<gpu>/<model>/attention.csv``: one layer's attention on one TP shard, decode or prefill
  (``superinfer.bench.costmodel.attention`` writes them), milliseconds;
* ``network/<fabric>/all_reduce.csv``: one all-reduce of ``size`` bytes over ``num_workers`` ranks, ms;
* ``cpu/<gpu>/cpu_overheads.csv``: an engine's per-iteration CPU work by batch size and TP degree, ms.

``meta.json``, ``README*`` and ``LICENSE*`` files are skipped; any other file is refused, so a misplaced or misnamed
file is not silently left out of a score. Every value is checked: a bad one raises
:class:`ProfileError` naming the file, the line (1 = the header) and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from superinfer.sim.layerops import GEMMS, OPS, SHAPE_COLUMNS, LayerShard, column

KNOWN = ("mlp.csv", "attention.csv", "all_reduce.csv", "cpu_overheads.csv")
SKIPPED_NAMES = ("meta.json",)
CPU_PARTS = ("schedule", "prepare_inputs_e2e", "sampler_e2e", "process_model_outputs")


class ProfileError(ValueError):
    """A profile file that cannot be read as what its name says."""


@dataclass(frozen=True)
class ComputeRow:
    gpu: str
    model: str
    shard: LayerShard
    ms: dict[str, float]  # median milliseconds per operator (0 for one the model does not have)
    where: str            # file:line


@dataclass(frozen=True)
class AttentionRow:
    gpu: str
    model: str
    shard: LayerShard  # tokens=1: the shape and TP degree
    phase: str         # decode | prefill
    batch: int
    kv_len: int
    ms: float
    where: str


@dataclass(frozen=True)
class AllReduceRow:
    fabric: str
    size_bytes: int
    ranks: int
    devices_per_node: int
    ms: float
    where: str


@dataclass(frozen=True)
class CpuRow:
    gpu: str
    model: str
    batch: int
    tp: int
    ms: float  # schedule + prepare inputs + sampler + process outputs, medians
    where: str


@dataclass
class Profiles:
    compute: list[ComputeRow]
    all_reduce: list[AllReduceRow]
    cpu: list[CpuRow]
    files: list[str]
    attention: list[AttentionRow] = field(default_factory=list)


def _number(rec: dict[str, str], key: str, where: str, *, integer: bool = False) -> float:
    raw = rec.get(key)
    if raw is None or raw == "":
        raise ProfileError(f"{where}: column {key!r} is empty")
    try:
        value = float(raw)
    except ValueError:
        raise ProfileError(f"{where}: column {key!r}: expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"{where}: column {key!r}: expected a finite number >= 0, got {raw!r}")
    if integer:
        if value != int(value) or value <= 0:
            raise ProfileError(f"{where}: column {key!r}: expected an integer > 0, got {raw!r}")
        return int(value)
    return value


def _rows(path: Path, required: list[str]) -> list[tuple[str, dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        missing = [c for c in required if c not in fields]
        if missing:
            raise ProfileError(f"{path}:1: missing column(s) {', '.join(missing)}")
        return [(f"{path}:{reader.line_num}", rec) for rec in reader]


def read_compute(path: Path, gpu: str) -> list[ComputeRow]:
    """A layer's rows. The GEMMs' columns are required; an elementwise operator's columns may be absent
    (phi-2's parallel block has no ``post_attention_layernorm``): it then counts 0 ms."""
    model = path.parent.name
    out = []
    rows = _rows(path, [column(op) for op in GEMMS] + list(SHAPE_COLUMNS))
    present = [op for op in OPS if not rows or column(op) in rows[0][1]]
    for where, rec in rows:
        gated = rec["use_gated_mlp"].strip().lower()
        if gated not in ("true", "false"):
            raise ProfileError(f"{where}: column 'use_gated_mlp': expected True or False, got {rec['use_gated_mlp']!r}")
        ints = {k: _number(rec, k, where, integer=True) for k in SHAPE_COLUMNS if k != "use_gated_mlp"}
        try:
            shard = LayerShard(n_head=ints["n_head"], n_kv_head=ints["n_kv_head"], n_embd=ints["n_embd"],
                               n_expanded_embd=ints["n_expanded_embd"], vocab_size=ints["vocab_size"],
                               gated=gated == "true", tp=ints["num_tensor_parallel_workers"],
                               tokens=ints["num_tokens"])
        except ValueError as exc:
            raise ProfileError(f"{where}: {exc}") from None
        ms = {op: _number(rec, column(op), where) if op in present else 0.0 for op in OPS}
        out.append(ComputeRow(gpu, model, shard, ms, where))
    return out


ATTENTION_SHAPE = ("n_head", "n_kv_head", "n_embd", "num_tensor_parallel_workers", "batch_size", "kv_len")


def read_attention(path: Path, gpu: str) -> list[AttentionRow]:
    out = []
    for where, rec in _rows(path, ["phase", column("attention"), *ATTENTION_SHAPE]):
        if rec["phase"] not in ("decode", "prefill"):
            raise ProfileError(f"{where}: column 'phase': expected decode or prefill, got {rec['phase']!r}")
        v = {k: _number(rec, k, where, integer=True) for k in ATTENTION_SHAPE}
        try:
            shard = LayerShard(n_head=v["n_head"], n_kv_head=v["n_kv_head"], n_embd=v["n_embd"], n_expanded_embd=1,
                               vocab_size=1, gated=True, tp=v["num_tensor_parallel_workers"], tokens=1)
        except ValueError as exc:
            raise ProfileError(f"{where}: {exc}") from None
        out.append(AttentionRow(gpu, path.parent.name, shard, rec["phase"], v["batch_size"], v["kv_len"],
                                _number(rec, column("attention"), where), where))
    return out


def read_all_reduce(path: Path) -> list[AllReduceRow]:
    fabric = path.parent.name
    out = []
    med = "time_stats.all_reduce.median"
    for where, rec in _rows(path, [med, "size", "num_workers", "devices_per_node"]):
        if rec.get("collective", "all_reduce") != "all_reduce":
            raise ProfileError(f"{where}: column 'collective': expected all_reduce, got {rec['collective']!r}")
        out.append(AllReduceRow(fabric, _number(rec, "size", where, integer=True),
                                _number(rec, "num_workers", where, integer=True),
                                _number(rec, "devices_per_node", where, integer=True), _number(rec, med, where), where))
    return out


def read_cpu(path: Path, gpu: str) -> list[CpuRow]:
    cols = [f"{p}_median" for p in CPU_PARTS]
    out = []
    for where, rec in _rows(path, cols + ["model_name", "batch_size", "tensor_parallel_degree"]):
        ms = sum(_number(rec, c, where) for c in cols)
        out.append(CpuRow(gpu, rec["model_name"], _number(rec, "batch_size", where, integer=True),
                          _number(rec, "tensor_parallel_degree", where, integer=True), ms, where))
    return out


def read_profiles(root: Path) -> Profiles:
    """Every profile file under ``root`` (see the module docstring); ProfileError on anything else."""
    if not root.is_dir():
        raise ProfileError(f"{root}: not a folder")
    prof = Profiles([], [], [], [])
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.name
        if name in SKIPPED_NAMES or name.upper().startswith(("README", "LICENSE")):
            continue
        if name not in KNOWN:
            raise ProfileError(f"{path}: unknown profile file (expected one of {', '.join(KNOWN)}; "
                               f"{', '.join(SKIPPED_NAMES)}, README and LICENSE files are skipped)")
        if name == "mlp.csv":
            prof.compute += read_compute(path, path.parent.parent.name)
        elif name == "attention.csv":
            prof.attention += read_attention(path, path.parent.parent.name)
        elif name == "all_reduce.csv":
            prof.all_reduce += read_all_reduce(path)
        else:
            prof.cpu += read_cpu(path, path.parent.name)
        prof.files.append(str(path))
    if not prof.files:
        raise ProfileError(f"{root}: no profile files ({', '.join(KNOWN)}) found")
    return prof
