"""The twin's iteration time from GPU terms fitted to measured operator times (``--gpu-costs grounded``).

The datasheet twin prices a whole iteration as one roofline, ``max(compute, memory) + overhead``. The
grounded one adds up what the engine runs, one operator after another:

    gpu       = layers · layer(T) + embedding(T) + lm_head(S) + attention
    iteration = gpu + host(B)              (the plugin: vLLM scheduling synchronously)
              = max(gpu, host(B))          (stock vLLM: async scheduling, its default)

* ``layer(T)``: the fitted time of one layer's four GEMMs and its norms, RoPE, activation and adds on one
  TP shard at ``T`` batched tokens (:class:`~superinfer.sim.gputerms.GpuTerms`). With the embedding it
  is tabulated by ``T``, and the LM head and CPU by ``S``, each up to the largest seen, so the hot path is
  two array lookups and the attention roofline.
* ``lm_head(S)``: the vocabulary GEMM for the ``S`` sampled rows (decodes, plus one per iteration with
  prefill: a lower bound, as in :mod:`superinfer.sim.parallel`).
* ``attention``: a roofline of its FLOPs and KV bytes with the measured part's fitted attention terms
  (measured on the lent H200 only: decode and causal prefill through SDPA) plus their fixed cost per
  layer; for a part without attention measurements, at its fitted GEMM efficiencies (an assumption).
* ``host(B)``: vLLM's own host work per step (``base + per_seq · B``, ``B`` the sequences in the batch),
  measured by ``superinferd bench overhead`` on vLLM 0.32 (:data:`HOST_LINE`; this project's CPU host). At
  TP ≥ 2 its base grows by what Vidur measured between TP 1 and that TP on its engine (the executor's
  per-step broadcast; Sarathi-Serve with Ray on an A100 host, the only TP measurement). With
  ``cpu_line=False`` (``--gpu-costs grounded-gpu``) the hardware profile's constant overhead instead, to
  show what each part moves.
* **async scheduling**: vLLM (0.32; default on for GPUs) schedules and prepares step n+1 while the GPU runs
  step n, so its host work hides under the GPU's unless it is longer (``max``). The plugin follows vLLM's
  mode (``superinfer.vllm.scheduler.RotaAsyncScheduler``), except that an iteration that parks a victim waits on the
  host for the copy, so it pays its host work after the GPU's (``+``): :func:`superinfer.sim.build.schedules_async`,
  :meth:`~superinfer.sim.costmodel.CostModel.price_step`. ``--host-overlap none`` prices every engine run
  with ``--no-async-scheduling``.

With tensor parallelism, :class:`~superinfer.sim.parallel.ParallelCostModel` adds the all-reduces at the
fitted ``latency + size / bw`` of the fabric and rank count where they were measured (:func:`link_for`),
else NCCL's tuning model as in the datasheet twin.

Which measured part's efficiencies a hardware profile takes is :data:`MEASURED_PART`: each share of the
datasheet peak is applied to that profile's own peaks. MoE models are refused (no expert GEMM profiles).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from superinfer.sim.gputerms import CpuTerms, GpuTerms, LinkTerms, Terms, attention_or_gemm, load
from superinfer.sim.hardware import HardwareProfile
from superinfer.sim.layerops import ELEMENTWISE, GEMMS, shard_of_model
from superinfer.sim.models import BF16_BYTES, ModelProfile

#: terms fitted on the profiles shipped in superinfer/bench/costmodel/profiles
#: (superinferd calibrate --profiles superinfer/bench/costmodel/profiles -o superinfer/sim/gpu_terms.json)
SHIPPED_TERMS = Path(__file__).resolve().parent / "gpu_terms.json"

#: hardware profile -> the measured GPU whose shares of the datasheet peaks it takes
MEASURED_PART = {
    "a100-pcie": "a100",   # measured: A100 80GB PCIe (Vidur)
    "a100-sxm": "a100",    # same die, measured on the PCIe card (the SXM's higher power limit may reach more)
    "h100-sxm": "h100",    # measured: H100 SXM (Vidur)
    "h100-pcie": "h100",   # same die, measured on the SXM part (the PCIe card's 350 W limit may reach less)
    "h200-sxm": "h200",    # measured: the lent H200 SXM (this project, 2026-12-04)
    "h200-pcie": "h200",   # H200 NVL: same die, measured on the SXM part
    "gh200": "h200",       # GH200's GPU is the same Hopper die with HBM3e: measured on the H200 SXM
}
#: a measured all-reduce folder -> the twin's (hardware profile, fabric) it was measured on
#: (../shared/data/gpu-profiles/README.md: *_dgx are NVSwitch nodes, *_pairwise_nvlink PCIe cards in
#: NVLink-bridged pairs)
FABRIC_FOLDERS = {"a100_pairwise_nvlink": ("a100-pcie", "nvlink-bridge"),
                  "h100_pairwise_nvlink": ("h100-pcie", "nvlink-bridge"),
                  "a100_dgx": ("a100-sxm", "dgx-a100"), "h100_dgx": ("h100-sxm", "dgx-h100")}
#: fabrics priced with another fabric's measurements over the same kind of link: H200 HGX and GH200 NVL2
#: pairs talk over NVLink 4 as DGX H100 does
FABRIC_STAND_INS = {("h200-sxm", "dgx-h200"): "h100_dgx", ("gh200", "nvl2"): "h100_dgx"}

#: how the twin prices GPU iterations: the datasheet roofline; fitted GPU terms with the fitted CPU line;
#: fitted GPU terms with the hardware profile's constant overhead
GPU_COSTS = ("datasheet", "grounded", "grounded-gpu")

#: Vidur's CPU lines (by TP) whose growth with TP is added to vLLM's measured TP-1 line
CPU_SOURCE = "a100"
#: vLLM's host work per step, measured here (superinferd bench overhead --build-tiny DIR --json FILE)
HOST_LINE = Path(__file__).resolve().parent / "vllm_host.json"


@lru_cache(maxsize=4)
def shipped_terms(path: str = str(SHIPPED_TERMS)) -> Terms:
    return load(path)


def gpu_cost_terms(gpu_costs: str) -> tuple[Terms | None, bool]:
    """``(gpu_terms, cpu_line)`` for a :data:`GPU_COSTS` choice, as the cost models take them; ValueError
    naming the choices otherwise."""
    if gpu_costs not in GPU_COSTS:
        raise ValueError(f"gpu_costs: expected one of {', '.join(GPU_COSTS)}, got {gpu_costs!r}")
    return (None if gpu_costs == "datasheet" else shipped_terms()), gpu_costs == "grounded"


def grounded_problem(model: ModelProfile, hardware: HardwareProfile) -> str | None:
    """Why grounded costs cannot price ``model`` on ``hardware`` (None: they can)."""
    if model.experts > 1:
        return f"{model.name}: grounded GPU costs have no expert (MoE) GEMM profiles; use datasheet costs"
    if hardware.name not in MEASURED_PART:
        return (f"no measured GPU terms for hardware {hardware.name!r} "
                f"(grounded costs cover {', '.join(sorted(MEASURED_PART))})")
    return None


def terms_for(hardware: HardwareProfile, terms: Terms) -> GpuTerms:
    """The measured part's terms moved onto ``hardware``'s datasheet peaks."""
    part = MEASURED_PART.get(hardware.name)
    if part is None or part not in terms.gpus:
        raise ValueError(f"no measured GPU terms for hardware {hardware.name!r} "
                         f"(grounded costs cover {', '.join(sorted(MEASURED_PART))})")
    return replace(terms.gpus[part], hardware=hardware.name, peak_flops=hardware.peak_bf16_flops,
                   hbm_bw=hardware.hbm_bw)


def link_for(terms: Terms, hardware: str, fabric: str, ranks: int) -> LinkTerms | None:
    """The fitted all-reduce of ``ranks`` ranks on (``hardware``, ``fabric``), measured there or on a
    stand-in (:data:`FABRIC_STAND_INS`); None where nothing was measured (NCCL's tuning model prices it)."""
    folder = FABRIC_STAND_INS.get((hardware, fabric))
    if folder is None:
        folder = next((f for f, hf in FABRIC_FOLDERS.items() if hf == (hardware, fabric)), None)
    return None if folder is None else terms.all_reduce.get(f"{folder}/{ranks}")


@lru_cache(maxsize=4)
def host_line(path: str = str(HOST_LINE)) -> CpuTerms:
    """vLLM's measured host line from a ``bench overhead`` JSON file; ValueError naming the file otherwise."""
    try:
        with open(path) as f:
            fit = json.load(f)["fit"]
        base, per_seq = fit["base_s"], fit["per_seq_s"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a `bench overhead` result with fit.base_s and fit.per_seq_s ({exc})") from None
    for name, v in (("base_s", base), ("per_seq_s", per_seq)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ValueError(f"{path}: fit.{name}: expected seconds in [0, 1), got {v!r}")
    return CpuTerms(base_s=float(base), per_seq_s=float(per_seq), rows=0)


def cpu_for(terms: Terms, tp: int, host: CpuTerms | None = None) -> CpuTerms:
    """The host line at ``tp``: ``host`` (default :func:`host_line`) with its base raised by the growth Vidur
    measured from TP 1 to the largest measured TP degree <= ``tp``."""
    host = host_line() if host is None else host
    lines = {int(k.split("/tp")[1]): v for k, v in terms.cpu.items() if k.startswith(f"{CPU_SOURCE}/tp")}
    fits = [d for d in lines if d <= tp]
    if tp <= 1 or 1 not in lines or not fits:
        return host
    grow = max(lines[max(fits)].base_s - lines[1].base_s, 0.0)
    return replace(host, base_s=host.base_s + grow)


class GroundedPricer:
    """Iteration compute time of ``model`` on one of ``tp`` ranks of ``hardware`` (see the module docstring)."""

    def __init__(self, model: ModelProfile, tp: int, hardware: HardwareProfile, terms: Terms,
                 overhead_s: float, cpu_line: bool = True) -> None:
        problem = grounded_problem(model, hardware)
        if problem:
            raise ValueError(problem)
        self.gpu = terms_for(hardware, terms)
        self.attn = terms.attention.get(MEASURED_PART[hardware.name])
        self.cpu = cpu_for(terms, tp) if cpu_line else None
        self.overhead_s = overhead_s
        s1 = shard_of_model(model, tp, 1)
        self.layers = model.layers
        self._gemm_nk = np.array([s1.gemm(op)[1:] for op in GEMMS], dtype=float)
        ew = [op for op in ELEMENTWISE if op != "emb"]
        self._ew_w = np.array([s1.weight_bytes(op) for op in ew], dtype=float)
        self._ew_a = np.array([s1.activation_bytes(op) for op in ew], dtype=float)
        self._emb_a = float(s1.activation_bytes("emb"))
        self._vocab, self._hidden = s1.vocab, model.hidden
        g, a = self.gpu, attention_or_gemm(self.attn, self.gpu)
        self._attn_s_per_pair = 4.0 * model.layers * s1.heads * model.head_dim / (g.peak_flops * a.eff_flops)
        self._attn_s_per_kv = 2.0 * model.layers * s1.kv_heads * model.head_dim * BF16_BYTES / (g.hbm_bw * a.eff_bw)
        self._attn_fixed_s = model.layers * a.fixed_s
        # hot-path tables, grown on demand: by batched tokens (layers + embedding) and by sampled rows
        # (LM head; host work), so one iteration is three lookups and a roofline
        self._by_tokens = np.zeros(1, dtype=float)
        self._by_rows = np.zeros(1, dtype=float)
        self._host_rows = np.zeros(1, dtype=float)

    def layers_s(self, tokens: np.ndarray) -> np.ndarray:
        """layers x one layer's GEMMs and elementwise operators (the embedding excluded), per token count."""
        t = tokens[:, None].astype(float)
        n, k = self._gemm_nk[:, 0], self._gemm_nk[:, 1]
        gemm = self.gpu.gemm_s(2.0 * t * n * k, (n * k + t * k + t * n) * BF16_BYTES).sum(axis=1)
        ew = self.gpu.elementwise_s(self._ew_w + self._ew_a * t).sum(axis=1)
        return self.layers * (gemm + ew)

    def _tokens_table(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`layers_s` + the embedding, for each batched token count (0 for none)."""
        out = self.layers_s(tokens) + self.gpu.elementwise_s(self._emb_a * tokens)
        out[tokens == 0] = 0.0
        return out

    def _rows_table(self, rows: np.ndarray) -> np.ndarray:
        """The LM head over ``rows`` sampled rows (0 for none)."""
        r = rows.astype(float)
        lm_n, h = self._vocab, self._hidden
        lm_head = self.gpu.gemm_s(2.0 * r * lm_n * h, (lm_n * h + r * (h + lm_n)) * BF16_BYTES)
        return np.where(rows > 0, lm_head, 0.0)

    def _host_table(self, rows: np.ndarray) -> np.ndarray:
        """The host's work for a batch of ``rows`` sequences: the measured line, or the constant overhead."""
        if self.cpu is None:
            return np.full(len(rows), self.overhead_s)
        return self.cpu.base_s + self.cpu.per_seq_s * rows.astype(float)

    def parts_s(self, prefill_tokens: int, prefill_attn_pairs: float, decode_seqs: int,
                decode_kv_tokens: int, prefill_ctx_tokens: int = 0) -> tuple[float, float]:
        """``(gpu, host)`` seconds of one iteration; ``(0, 0)`` when nothing runs."""
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0, 0.0
        rows = decode_seqs + (1 if prefill_tokens > 0 else 0)  # sampled rows = sequences in the batch
        if tokens >= len(self._by_tokens):
            self._by_tokens = self._tokens_table(np.arange(max(2 * len(self._by_tokens), tokens + 1, 1024)))
        if rows >= len(self._by_rows):
            grown = np.arange(max(2 * len(self._by_rows), rows + 1, 256))
            self._by_rows, self._host_rows = self._rows_table(grown), self._host_table(grown)
        compute = self._attn_s_per_pair * (prefill_attn_pairs + decode_kv_tokens)
        memory = self._attn_s_per_kv * (decode_kv_tokens + prefill_ctx_tokens + tokens)
        attention = self._attn_fixed_s + (compute if compute > memory else memory)
        return float(self._by_tokens[tokens] + self._by_rows[rows]) + attention, float(self._host_rows[rows])
