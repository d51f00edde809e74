"""The twin's GPU cost model scored, as it is, against measured profile rows (no fitting here).

What the twin predicts for each kind of row:

* **compute** (one layer on one TP shard): the twin prices an iteration as a roofline,
  ``max(FLOPs / (peak · mfu), weight bytes / (hbm_bw · mbu))`` (:mod:`superinfer.sim.costmodel`), and has
  no term for norms, RoPE, the activation or residual adds. A row's four GEMMs are priced the same way
  (their FLOPs and weight bytes summed), which is the error reported as ``median_ape_pct``; the measured
  elementwise operators' share of the layer is reported beside it (``elementwise_share_pct``) and the
  whole layer's error as ``layer_median_ape_pct``.
* **all-reduce**: :func:`superinfer.sim.fabric.allreduce_s` on the link the fabric gives that many ranks.
* **attention** (where measured): a roofline of its FLOPs and bytes at ``mfu``/``mbu`` (the twin has no
  separate attention term; this is its share of the iteration roofline).
* **cpu**: the profile's constant per-iteration ``overhead_s``.

With a terms file (:mod:`.fit`) the fitted terms are scored instead, every operator included.

Errors are absolute percentage errors ``|twin − measured| / measured``; ``bias_pct`` is the median
signed error (positive: the twin is too slow). A folder name says which hardware profile and fabric a
file is scored with (:data:`GPU_FOLDERS`, :data:`FABRIC_FOLDERS`); ``hardware`` overrides the GPU's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

import numpy as np

from superinfer.bench.costmodel.files import AllReduceRow, AttentionRow, ComputeRow, CpuRow, ProfileError, Profiles
from superinfer.sim.layerops import ELEMENTWISE, GEMMS, attention_work
from superinfer.sim.fabric import allreduce_s, get_fabric
from superinfer.sim.gputerms import attention_or_gemm
from superinfer.sim.grounded import FABRIC_FOLDERS
from superinfer.sim.hardware import HardwareProfile, get_hardware, hardware_names

#: a profile's GPU folder -> the twin's hardware profile (the shipped A100 rows come from PCIe cards on
#: NVLink bridges, the H100 rows from an SXM part: ../shared/data/gpu-profiles/README.md)
GPU_FOLDERS = {"a100": "a100-pcie", "h100": "h100-sxm", "h200": "h200-sxm", "gh200": "gh200"}
TOKEN_BANDS = ((1, "1-15"), (16, "16-63"), (64, "64-511"), (512, "512-2047"), (2048, "2048+"))
MIB = 1 << 20
SIZE_BANDS = ((0, "<64KiB"), (64 << 10, "64KiB-1MiB"), (MIB, "1-16MiB"), (16 * MIB, ">=16MiB"))


def band(value: int, bands: tuple[tuple[int, str], ...]) -> str:
    label = bands[0][1]
    for low, name in bands:
        if value >= low:
            label = name
    return label


def hardware_for(gpu_folder: str, override: str | None = None) -> HardwareProfile:
    name = override or GPU_FOLDERS.get(gpu_folder.lower(), gpu_folder)
    try:
        return get_hardware(name)
    except ValueError:
        raise ProfileError(f"GPU folder {gpu_folder!r}: no hardware profile of that name; pass --hardware "
                           f"({', '.join(hardware_names())}) or use a folder named {', '.join(GPU_FOLDERS)}") from None


def gemm_layer_s(hw: HardwareProfile, row: ComputeRow) -> float:
    """The twin's roofline over the row's four GEMMs, seconds."""
    flops = sum(row.shard.gemm_flops(op) for op in GEMMS)
    weights = sum(row.shard.weight_bytes(op) for op in GEMMS)
    return max(flops / (hw.peak_bf16_flops * hw.mfu), weights / (hw.hbm_bw * hw.mbu))


def _summary(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    err = (pred - meas) / meas
    ape = np.abs(err) * 100
    return {"rows": int(len(meas)), "median_ape_pct": round(float(np.median(ape)), 2),
            "p90_ape_pct": round(float(np.percentile(ape, 90)), 2), "bias_pct": round(float(np.median(err) * 100), 2)}


def _grouped(items: Iterable[tuple[tuple, float, float, dict]], keys: tuple[str, ...],
             extra: Callable[[list[dict]], dict] | None = None) -> list[dict]:
    groups: dict[tuple, list] = defaultdict(list)
    for key, pred, meas, more in items:
        groups[key].append((pred, meas, more))
    out = []
    for key in sorted(groups, key=lambda k: tuple(str(x).zfill(12) if isinstance(x, int) else str(x) for x in k)):
        rows = groups[key]
        summary = _summary(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))
        out.append({**dict(zip(keys, key)), **summary, **(extra([r[2] for r in rows]) if extra else {})})
    return out


def _terms_for(terms, key: str, section: str, where: str):
    table = getattr(terms, section)
    if key not in table:
        raise ProfileError(f"{where}: the terms file has no {section} entry {key!r} (it has {', '.join(table) or 'none'})")
    return table[key]


def score_compute(rows: list[ComputeRow], hardware: str | None = None, terms=None) -> dict:
    """Errors of the layer's GEMMs (``median_ape_pct``) and of the whole layer (``layer_median_ape_pct``):
    with ``terms`` (a :class:`~.fit.Terms`) its fitted GEMM and elementwise terms, else the twin's
    built-in roofline, which prices the elementwise operators at 0."""
    if not rows:
        return {"rows": 0}
    items, by_model = [], []
    for r in rows:
        meas_gemm = sum(r.ms[op] for op in GEMMS) / 1e3
        meas_ew = sum(r.ms[op] for op in ELEMENTWISE) / 1e3
        if meas_gemm <= 0:
            raise ProfileError(f"{r.where}: the four GEMMs sum to 0 ms")
        if terms is None:
            hw = hardware_for(r.gpu, hardware)
            hw_name = hw.name
            pred = layer_pred = gemm_layer_s(hw, r)
        else:
            gpu = _terms_for(terms, r.gpu, "gpus", r.where)
            hw_name = gpu.hardware
            pred = gpu.layer_s(r.shard, GEMMS)
            layer_pred = gpu.layer_s(r.shard, GEMMS + tuple(op for op in ELEMENTWISE if r.ms[op] > 0))
        layer = meas_gemm + meas_ew
        more = {"ew_share": meas_ew / layer, "layer_ape": abs(layer_pred - layer) / layer,
                "layer_err": (layer_pred - layer) / layer}
        items.append(((r.gpu, hw_name, r.model, r.shard.tp, band(r.shard.tokens, TOKEN_BANDS)), pred, meas_gemm, more))
        by_model.append(((r.gpu, hw_name, r.model), pred, meas_gemm, more))

    def extra(mores: list[dict]) -> dict:
        ape = np.array([m["layer_ape"] for m in mores]) * 100
        return {"elementwise_share_pct": round(float(np.median([m["ew_share"] for m in mores])) * 100, 1),
                "layer_median_ape_pct": round(float(np.median(ape)), 2),
                "layer_p90_ape_pct": round(float(np.percentile(ape, 90)), 2),
                "layer_bias_pct": round(float(np.median([m["layer_err"] for m in mores])) * 100, 2)}

    pred = np.array([i[1] for i in items])
    meas = np.array([i[2] for i in items])
    return {**_summary(pred, meas), **extra([i[3] for i in items]),
            "by_model": _grouped(by_model, ("gpu", "hardware", "model"), extra),
            "groups": _grouped(items, ("gpu", "hardware", "model", "tp", "tokens"), extra)}


def attention_pred_s(r: AttentionRow, hardware: str | None, terms) -> tuple[str, float]:
    """(hardware profile, predicted seconds) of one attention row: the datasheet roofline at mfu/mbu, the
    fitted attention terms, or (terms without attention for this GPU) the grounded twin's assumption,
    the roofline at the fitted GEMM efficiencies."""
    flops, nbytes = attention_work(r.shard, r.phase, r.batch, r.kv_len)
    if terms is None:
        hw = hardware_for(r.gpu, hardware)
        return hw.name, max(flops / (hw.peak_bf16_flops * hw.mfu), nbytes / (hw.hbm_bw * hw.mbu))
    gpu = _terms_for(terms, r.gpu, "gpus", r.where)
    attn = attention_or_gemm(terms.attention.get(r.gpu), gpu)
    return gpu.hardware, attn.attention_s(flops, nbytes, gpu.peak_flops, gpu.hbm_bw)


def score_attention(rows: list[AttentionRow], hardware: str | None = None, terms=None) -> dict:
    if not rows:
        return {"rows": 0}
    items = []
    for r in rows:
        if r.ms <= 0:
            raise ProfileError(f"{r.where}: attention time is 0 ms")
        hw_name, pred = attention_pred_s(r, hardware, terms)
        items.append(((r.gpu, hw_name, r.model, r.shard.tp, r.phase), pred, r.ms / 1e3, {}))
    pred = np.array([i[1] for i in items])
    meas = np.array([i[2] for i in items])
    by_phase = _grouped([((i[0][0], i[0][4]), i[1], i[2], {}) for i in items], ("gpu", "phase"))
    return {**_summary(pred, meas), "by_phase": by_phase,
            "groups": _grouped(items, ("gpu", "hardware", "model", "tp", "phase"))}


def score_all_reduce(rows: list[AllReduceRow], terms=None) -> dict:
    if not rows:
        return {"rows": 0}
    items = []
    for r in rows:
        if r.ms <= 0:
            raise ProfileError(f"{r.where}: all-reduce time is 0 ms")
        if terms is not None:
            fabric_name = "fitted"
            pred = _terms_for(terms, f"{r.fabric}/{r.ranks}", "all_reduce", r.where).all_reduce_s(r.size_bytes)
        else:
            if r.fabric not in FABRIC_FOLDERS:
                raise ProfileError(f"{r.where}: unknown fabric folder {r.fabric!r}; known: {', '.join(FABRIC_FOLDERS)}")
            fabric = get_fabric(*FABRIC_FOLDERS[r.fabric])
            fabric_name = fabric.name
            pred = allreduce_s(r.size_bytes, r.ranks, fabric.link_for_group(0, r.ranks))
        items.append(((r.fabric, fabric_name, r.ranks, band(r.size_bytes, SIZE_BANDS)), pred, r.ms / 1e3,
                      {"small": r.size_bytes < MIB}))
    pred = np.array([i[1] for i in items])
    meas = np.array([i[2] for i in items])
    small = np.array([i[3]["small"] for i in items])
    out = {**_summary(pred, meas), "groups": _grouped(items, ("folder", "fabric", "ranks", "size"))}
    for name, mask in (("below_1MiB", small), ("from_1MiB", ~small)):
        if mask.any():
            out[name] = _summary(pred[mask], meas[mask])
    return out


def score_cpu(rows: list[CpuRow], hardware: str | None = None, terms=None) -> dict:
    if not rows:
        return {"rows": 0}
    if terms is None:
        items = [((r.gpu, r.tp), hardware_for(r.gpu, hardware).overhead_s, r.ms / 1e3, {}) for r in rows]
    else:
        items = [((r.gpu, r.tp), _terms_for(terms, f"{r.gpu}/tp{r.tp}", "cpu", r.where).overhead_s(r.batch),
                  r.ms / 1e3, {}) for r in rows]
    pred = np.array([i[1] for i in items])
    meas = np.array([i[2] for i in items])
    return {**_summary(pred, meas), "groups": _grouped(items, ("gpu", "tp"))}


def score(profiles: Profiles, hardware: str | None = None, terms=None) -> dict:
    """The whole report: ``{"model", "compute", "all_reduce", "cpu", "files"}``; ``terms`` (a
    :class:`~.fit.Terms`) scores fitted terms instead of the twin's built-in profiles."""
    return {"model": "built-in" if terms is None else "fitted terms",
            "compute": score_compute(profiles.compute, hardware, terms),
            "attention": score_attention(profiles.attention, hardware, terms),
            "all_reduce": score_all_reduce(profiles.all_reduce, terms),
            "cpu": score_cpu(profiles.cpu, hardware, terms), "files": profiles.files}
