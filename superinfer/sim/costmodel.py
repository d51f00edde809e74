"""Per-iteration cost model of the simulated engine (design §6).

Datasheet lead (no calibration), for one engine iteration that runs ``P`` prompt tokens (prefill chunks)
and ``D`` decoding sequences:

    compute = (2 · N_mm · (P + D)  +  A · (pairs + K_dec)) / (peak_flops · mfu)
    memory  = (W_read(P + D)  +  kv · (K_dec + K_ctx + P + D)) / (hbm_bw · mbu)
    iteration = max(compute, memory) + overhead

* ``N_mm`` active parameters that multiply per token (active minus the input-embedding lookup;
  MoE counts ``experts_per_token`` experts), ``A`` attention FLOPs per (query, key) pair
  (4 · layers · heads · head_dim), ``pairs`` the prefill attention pairs (:func:`attn_pairs`), ``K_dec``
  KV tokens the decoding sequences attend to, ``K_ctx`` earlier-context KV tokens that prefill chunks
  read, ``kv`` KV bytes per token; KV of the new tokens is written once.
* ``W_read(n)``: bytes of weights read: all non-expert weights (minus the embedding table, of which only
  the looked-up rows are read) plus, for MoE, the expected share of experts touched by ``n`` tokens under
  uniform top-k routing, ``1 − (1 − k/E)^n`` of the expert bytes (a full batch touches all experts).

With a calibration (``superinfer.sim.calibration``) the iteration time is the measured linear model
instead, and measured transfer bandwidths / duplex factor replace the datasheet ones. With GPU terms
(``gpu_terms``, fitted to measured operator times: ``superinfer.sim.grounded``) it is the sum of the
fitted operators instead of the roofline.

Transfers of ``h`` host->device and ``d`` device->host blocks: with duplex, both directions run at
``one_way · duplex_factor`` until the shorter finishes, the rest at one-way speed; without duplex they run
one after the other. With ``overlap`` the copies of an iteration run under its compute
(``step = max(compute, transfer)``); without, they are added (``step = compute + transfer``).

The hot-path methods take plain numbers, use precomputed floats and allocate nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from superinfer.core.budget import DEFAULT_ETA, b_xfer_blocks
from superinfer.sim.calibration import Calibration
from superinfer.sim.gputerms import Terms
from superinfer.sim.grounded import GroundedPricer
from superinfer.sim.hardware import HardwareProfile
from superinfer.sim.models import BF16_BYTES, ModelProfile

# Memory vLLM cannot give to the KV cache besides the weights: CUDA context, cuBLAS/NCCL workspaces
# ("non-torch memory" in vLLM's memory profiler log). 1 GiB is an assumption of the right order
# (CUDA context alone is ~0.5 GiB on Hopper); override with ``activation_reserve_bytes``.
NON_TORCH_RESERVE_BYTES = 1 << 30


def attn_pairs(chunk_tokens: int, prior_tokens: int) -> int:
    """Causal (query, key) pairs of a prefill chunk of ``chunk_tokens`` after ``prior_tokens`` of context."""
    return chunk_tokens * prior_tokens + chunk_tokens * (chunk_tokens + 1) // 2


@dataclass(frozen=True)
class StepPrice:
    """What one iteration costs. ``tail_s``: victims' unsynced tails, copied *before* compute (compute
    may reuse their blocks, DuplexKV rule 2); ``background_s``: swap-ins and eager syncs, hidden under
    compute when the engine overlaps; ``step_s``: the iteration's wall time."""

    compute_s: float
    tail_s: float
    background_s: float
    step_s: float


class CostModel:
    """Iteration and transfer times for one (model, hardware, block size), optionally calibrated.

    Call :meth:`iteration_s` and :meth:`transfer_s` every simulated iteration, and :meth:`step_s` to
    combine them; everything else is setup.
    """

    __slots__ = ("model", "hardware", "block_size", "calibration", "overlap", "duplex", "block_bytes",
                 "h2d_bw", "d2h_bw", "duplex_factor", "overhead_s", "_fit", "_grounded", "async_host",
                 "_s_per_mm_token", "_s_per_pair", "_s_dense_weights", "_s_expert_weights",
                 "_log_expert_miss", "_moe", "_s_per_kv_token",
                 "_h2d_s_per_block", "_d2h_s_per_block", "_h2d_dup_s_per_block", "_d2h_dup_s_per_block")

    def __init__(self, model: ModelProfile, hardware: HardwareProfile, block_size: int,
                 calibration: Calibration | None = None, *, overlap: bool = True, duplex: bool = True,
                 gpu_terms: Terms | None = None, cpu_line: bool = True, async_host: bool = False) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size: expected an integer > 0, got {block_size!r}")
        if calibration is not None and gpu_terms is not None:
            raise ValueError("give a calibration (a measured engine) or GPU terms, not both")
        self.model = model
        self.hardware = hardware
        self.block_size = block_size
        self.calibration = calibration
        self.overlap = bool(overlap)
        self.duplex = bool(duplex)
        self.async_host = bool(async_host)  # grounded costs: host work hidden under the GPU's (max, not +)
        self.block_bytes = block_size * model.kv_bytes_per_token

        # --- datasheet roofline constants
        flops = hardware.peak_bf16_flops * hardware.mfu
        bw = hardware.hbm_bw * hardware.mbu
        self._s_per_mm_token = 2.0 * model.matmul_params_per_token / flops
        self._s_per_pair = model.attn_flops_per_pair / flops
        read_bytes = model.weight_bytes - (0 if model.tied_embeddings else model.embedding_params * BF16_BYTES)
        self._moe = model.experts > 1
        self._s_dense_weights = (read_bytes - model.expert_weight_bytes) / bw
        self._s_expert_weights = model.expert_weight_bytes / bw
        self._log_expert_miss = (math.log1p(-model.experts_per_token / model.experts)
                                 if self._moe and model.experts_per_token < model.experts else float("-inf"))
        self._s_per_kv_token = model.kv_bytes_per_token / bw
        self.overhead_s = hardware.overhead_s

        # --- calibration overrides
        h2d, d2h, dup = hardware.h2d_bw, hardware.d2h_bw, hardware.duplex_factor
        if calibration is not None:
            c = calibration.coefficients
            self._fit = c.iteration_s
            self.overhead_s = c.overhead_s
            t = calibration.transfer
            h2d = t.h2d_gb_s * 1e9 if t.h2d_gb_s is not None else h2d
            d2h = t.d2h_gb_s * 1e9 if t.d2h_gb_s is not None else d2h
            dup = t.duplex_factor if t.duplex_factor is not None else dup
        else:
            self._fit = None
        self._grounded = (GroundedPricer(model, 1, hardware, gpu_terms, self.overhead_s, cpu_line)
                          if gpu_terms is not None else None)
        self.h2d_bw, self.d2h_bw, self.duplex_factor = h2d, d2h, dup
        self._h2d_s_per_block = self.block_bytes / h2d
        self._d2h_s_per_block = self.block_bytes / d2h
        self._h2d_dup_s_per_block = self.block_bytes / (h2d * dup)
        self._d2h_dup_s_per_block = self.block_bytes / (d2h * dup)

    # ---- hot path ------------------------------------------------------------------------------
    def iteration_s(self, prefill_tokens: int, prefill_attn_pairs: float, decode_seqs: int,
                    decode_kv_tokens: int, prefill_ctx_tokens: int = 0) -> float:
        """Compute time of one iteration (no transfers). 0.0 when nothing is scheduled.

        ``prefill_tokens``: prompt tokens run this iteration (sum of chunk sizes);
        ``prefill_attn_pairs``: sum of :func:`attn_pairs` over the chunks; ``decode_seqs``: sequences
        decoding one token; ``decode_kv_tokens``: sum of their context lengths (KV tokens read);
        ``prefill_ctx_tokens``: sum of the chunks' earlier context (KV read by prefill).
        """
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        if self._grounded is not None:
            gpu, host = self._grounded.parts_s(prefill_tokens, prefill_attn_pairs, decode_seqs, decode_kv_tokens,
                                               prefill_ctx_tokens)
            return self.with_host(gpu, host)
        if self._fit is not None:
            return self._fit(prefill_tokens, prefill_attn_pairs, decode_seqs, decode_kv_tokens, prefill_ctx_tokens)
        compute = self._s_per_mm_token * tokens + self._s_per_pair * (prefill_attn_pairs + decode_kv_tokens)
        weights = self._s_dense_weights
        if self._moe:
            weights += self._s_expert_weights * -math.expm1(self._log_expert_miss * tokens)
        memory = weights + self._s_per_kv_token * (decode_kv_tokens + prefill_ctx_tokens + tokens)
        return (compute if compute > memory else memory) + self.overhead_s

    def with_host(self, gpu_s: float, host_s: float) -> float:
        """An iteration of ``gpu_s`` on the GPU and ``host_s`` on the CPU: overlapped under async scheduling."""
        if self.async_host:
            return gpu_s if gpu_s > host_s else host_s
        return gpu_s + host_s

    def transfer_s(self, h2d_blocks: int, d2h_blocks: int) -> float:
        """Wall time to copy ``h2d_blocks`` in and ``d2h_blocks`` out (duplex if this model has it)."""
        if h2d_blocks <= 0:
            return d2h_blocks * self._d2h_s_per_block if d2h_blocks > 0 else 0.0
        if d2h_blocks <= 0:
            return h2d_blocks * self._h2d_s_per_block
        if not self.duplex:
            return h2d_blocks * self._h2d_s_per_block + d2h_blocks * self._d2h_s_per_block
        th = h2d_blocks * self._h2d_dup_s_per_block
        td = d2h_blocks * self._d2h_dup_s_per_block
        if th <= td:  # h2d finishes first; the rest of d2h then runs alone at one-way speed
            return th + (d2h_blocks - th / self._d2h_dup_s_per_block) * self._d2h_s_per_block
        return td + (h2d_blocks - td / self._h2d_dup_s_per_block) * self._h2d_s_per_block

    def step_s(self, compute_s: float, transfer_s: float) -> float:
        """Iteration wall time: copies hidden under compute (overlap) or added after it."""
        if self.overlap:
            return compute_s if compute_s > transfer_s else transfer_s
        return compute_s + transfer_s

    def price_step(self, tokens: np.ndarray, computed: np.ndarray, decode: np.ndarray, h2d_blocks: int,
                   tail_blocks: int, sync_blocks: int, parks_wait: bool = False) -> StepPrice:
        """Price one iteration: scheduled ``tokens`` per sequence over ``computed`` tokens of context,
        ``decode`` marking the one-token decodes (the rest are prefill chunks), and its copies. An
        iteration in which nothing can run (everything waits on the link) still lets time pass.
        ``parks_wait``: the host waits for a park's copy before it launches the iteration (the DuplexKV
        worker), so under async scheduling an iteration that parks (``tail_blocks``) pays its host work after
        the GPU's, as synchronous scheduling does."""
        pre_k, pre_c = tokens[~decode], computed[~decode]
        counts = (int(pre_k.sum()), float((pre_k * pre_c + pre_k * (pre_k + 1) // 2).sum()), int(decode.sum()),
                  int(computed[decode].sum()), int(pre_c.sum()))
        if parks_wait and tail_blocks > 0 and self.async_host:
            self.async_host = False  # this iteration only: its host work follows the GPU's (with_host)
            try:
                compute_s = self.iteration_s(*counts)
            finally:
                self.async_host = True
        else:
            compute_s = self.iteration_s(*counts)
        background = self.transfer_s(h2d_blocks, sync_blocks)
        tail = self.transfer_s(0, tail_blocks)
        step = tail + self.step_s(compute_s, background)
        if step <= 0.0:
            step = self.overhead_s if self.overhead_s > 0 else 1e-3
        return StepPrice(compute_s, tail, background, step)

    # ---- capacities and budget -----------------------------------------------------------------
    def activation_reserve_bytes(self, max_num_batched_tokens: int) -> int:
        """Estimated peak non-KV, non-weight HBM use (vLLM's profile run at the largest batch).

        One layer's activations at ``max_num_batched_tokens`` tokens: the SwiGLU gate/up outputs and the
        activated product (3 · intermediate · experts_per_token) plus ~4 hidden-sized buffers (residual,
        norm output, attention output, projection), bf16; plus :data:`NON_TORCH_RESERVE_BYTES`.
        """
        m = self.model
        per_token = (3 * m.intermediate * m.experts_per_token + 4 * m.hidden) * BF16_BYTES
        return int(max_num_batched_tokens) * per_token + NON_TORCH_RESERVE_BYTES

    def hbm_kv_blocks(self, max_num_batched_tokens: int = 8192,
                      activation_reserve_bytes: int | None = None) -> int:
        """KV blocks that fit in HBM: ``(hbm · util − weights − reserve) // block_bytes``."""
        reserve = (self.activation_reserve_bytes(max_num_batched_tokens)
                   if activation_reserve_bytes is None else int(activation_reserve_bytes))
        free = self.hardware.hbm_bytes * self.hardware.gpu_memory_utilization - self.model.weight_bytes - reserve
        if free < self.block_bytes:
            raise ValueError(
                f"model {self.model.name} ({self.model.weight_bytes / 1e9:.1f} GB bf16) leaves no KV space on "
                f"{self.hardware.name} ({self.hardware.hbm_bytes / 1e9:.0f} GB x "
                f"{self.hardware.gpu_memory_utilization} utilisation, {reserve / 1e9:.1f} GB reserve)")
        return int(free // self.block_bytes)

    def dram_blocks(self, pool_bytes: float | None = None) -> int:
        """KV blocks in a host DRAM pool of ``pool_bytes`` (default: all the profile's DRAM)."""
        pool = self.hardware.dram_bytes if pool_bytes is None else pool_bytes
        if not (isinstance(pool, (int, float)) and math.isfinite(pool) and pool >= 0):
            raise ValueError(f"pool_bytes: expected a number >= 0, got {pool_bytes!r}")
        if pool > self.hardware.dram_bytes:
            raise ValueError(f"pool_bytes {pool / 1e9:.1f} GB exceeds {self.hardware.name}'s "
                             f"{self.hardware.dram_bytes / 1e9:.0f} GB of host DRAM")
        return int(pool // self.block_bytes)

    @property
    def duplex_bw(self) -> float:
        """Per-direction bytes/s while both directions run (calibrated if available)."""
        return min(self.h2d_bw, self.d2h_bw) * self.duplex_factor

    def default_b_xfer(self, iteration_s: float, eta: float = DEFAULT_ETA) -> int:
        """Design §4 budget for this hardware: ``floor(eta · duplex_bw · iteration_s / block_bytes)``."""
        return b_xfer_blocks(self.duplex_bw, iteration_s, self.block_bytes, eta)
