"""Tensor and pipeline parallelism on the twin (issue 14): per-rank compute and memory, and collectives.

:class:`ParallelCostModel` is a :class:`~superinfer.sim.costmodel.CostModel` for one engine spread over
``tp x pp`` GPUs, priced per rank the way vLLM splits the work:

* **Tensor parallelism** (Megatron-style, vLLM's ``ColumnParallelLinear``/``RowParallelLinear``): every
  rank holds ``1/tp`` of the attention heads, of the MLP's intermediate dimension (of every expert, for
  MoE), of the vocabulary (embedding and LM head); norms are replicated; KV heads are split, or one is
  replicated per rank when ``tp`` exceeds them. The per-rank shard is a :class:`ModelProfile` of those
  shapes, so the datasheet roofline of the base model prices one rank's compute and HBM traffic.
* Each traversal adds, in series with compute (vLLM does not overlap them): ``2·layers + 1``
  all-reduces of the ``T x hidden`` activations (after attention, after the MLP, after the vocab-parallel
  embedding) and one all-gather of the sampled rows' logits (``seqs x vocab``), bf16, over the TP group's
  link (:mod:`superinfer.sim.fabric`).
* **Pipeline parallelism**: stage ``s`` holds vLLM's slice of the layers (:func:`stage_layers`), the
  embedding on the first stage and the LM head on the last. vLLM keeps ``pp`` micro-batches in flight
  (V1's batch queue), so a PP engine is simulated as ``pp`` virtual engines (:mod:`superinfer.sim.fleet`),
  each running one micro-batch whose iteration is a full traversal: the sum of the stages (= the model's
  cost on one TP group) plus ``pp - 1`` hops that send the hidden states and the residual (``2·T·hidden``
  bf16, split over the TP ranks and all-gathered on arrival). Stage imbalance and bubbles are not
  modelled (optimistic); the KV pool is split evenly between the micro-batches (pessimistic).
* **Memory per rank**: weights of the heaviest stage's shard; KV blocks = the fewest any rank can hold
  (vLLM takes the minimum over workers); a block holds that rank's KV heads for its stage's layers.
  ``block_bytes`` is that per-rank block: every rank copies its own shard over its own host link at the
  same time (each GPU has its own link: GH200 C2C, one PCIe x16 per card).
* With ``pp`` virtual engines sharing each GPU's host link, each gets ``1/pp`` of it.

A calibration measures one device's step; it is refused for ``tp x pp > 1`` (nothing here re-prices it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from superinfer.sim.costmodel import CostModel
from superinfer.sim.fabric import Fabric, allgather_s, allreduce_s, get_fabric, send_s
from superinfer.sim.gputerms import Terms
from superinfer.sim.grounded import GroundedPricer, link_for
from superinfer.sim.hardware import HardwareProfile
from superinfer.sim.layout import Layout, kv_heads_per_rank, layout_problems, stage_layers
from superinfer.sim.models import BF16_BYTES, ModelProfile

#: activations cross the links in the model's dtype (bf16)
ACT_BYTES = BF16_BYTES


def rank_shard(model: ModelProfile, tp: int) -> ModelProfile:
    """The part of every layer one of ``tp`` ranks holds, as a model profile (all layers)."""
    problems = layout_problems(tp, 1, heads=model.heads, kv_heads=model.kv_heads, layers=model.layers,
                               intermediate=model.intermediate)
    if problems:
        raise ValueError(f"{model.name}: " + "; ".join(problems))
    if tp == 1:
        return model
    return replace(model, name=f"{model.name}/tp{tp}", heads=model.heads // tp,
                   kv_heads=kv_heads_per_rank(model.kv_heads, tp), intermediate=model.intermediate // tp,
                   vocab=-(-model.vocab // tp), published_total_params=0.0, published_active_params=0.0)


def stage_params(shard: ModelProfile, pp: int) -> list[int]:
    """Parameters each pipeline stage of one TP rank holds (``shard`` from :func:`rank_shard`)."""
    per_layer = (shard.attn_params_per_layer + shard.experts * shard.expert_params
                 + shard.router_params_per_layer + 2 * shard.hidden)
    head = shard.vocab * shard.hidden + shard.hidden  # LM head (a copy of the embedding when tied) + final norm
    if pp == 1:
        return [shard.total_params]
    parts = stage_layers(shard.layers, pp)
    out = [n * per_layer for n in parts]
    out[0] += shard.embedding_params
    out[-1] += head
    return out


@dataclass(frozen=True)
class Comm:
    """Collective seconds of one traversal, split for reporting (``comm_s`` sums them)."""

    tp_s: float
    pp_s: float

    @property
    def comm_s(self) -> float:
        return self.tp_s + self.pp_s


class ParallelCostModel(CostModel):
    """One engine on ``layout.tp x layout.pp`` GPUs of ``hardware`` connected by ``fabric``.

    ``iteration_s`` is one micro-batch's full traversal (compute of one TP rank over all layers plus the
    collectives); ``hbm_kv_blocks`` the per-rank pool (split it between the ``pp`` virtual engines);
    ``transfer_s`` one virtual engine's copies at ``1/pp`` of each rank's host link.
    """

    def __init__(self, model: ModelProfile, hardware: HardwareProfile, block_size: int, layout: Layout,
                 fabric: Fabric | None = None, *, overlap: bool = True, duplex: bool = True,
                 gpu_terms: Terms | None = None, cpu_line: bool = True, async_host: bool = False) -> None:
        problems = layout_problems(layout.tp, layout.pp, heads=model.heads, kv_heads=model.kv_heads,
                                   layers=model.layers, intermediate=model.intermediate)
        if problems:
            raise ValueError(f"{model.name} at {layout}: " + "; ".join(problems))
        shard = rank_shard(model, layout.tp)
        super().__init__(shard, hardware, block_size, None, overlap=overlap, duplex=duplex, async_host=async_host)
        self.fabric = fabric if fabric is not None else get_fabric(hardware.name)
        self.tp_allreduce = None  # fitted all-reduce of the TP group (grounded costs, where measured)
        if gpu_terms is not None:  # one rank's shard of the full model, TP-aware
            self._grounded = GroundedPricer(model, layout.tp, hardware, gpu_terms, self.overhead_s, cpu_line)
            self.tp_allreduce = link_for(gpu_terms, hardware.name, self.fabric.name, layout.tp)
        self.full_model = model
        self.layout = layout
        self.stage_layers = stage_layers(model.layers, layout.pp)
        self.stage_params = stage_params(shard, layout.pp)
        # per-rank block: this rank's KV heads for its stage's layers (the heaviest stage's)
        self.kv_bytes_per_token_rank = 2 * max(self.stage_layers) * shard.kv_heads * shard.head_dim * BF16_BYTES
        self.block_bytes = block_size * self.kv_bytes_per_token_rank
        share = 1.0 / layout.pp
        self._set_link(hardware.h2d_bw * share, hardware.d2h_bw * share, hardware.duplex_factor)
        self.tp_link = self.fabric.link_for_group(0, layout.tp)
        self.hop_links = [self.fabric.link_for_group(s * layout.tp, 2 * layout.tp) for s in range(layout.pp - 1)]
        self._allreduces = 2 * model.layers + 1

    def _set_link(self, h2d: float, d2h: float, dup: float) -> None:
        self.h2d_bw, self.d2h_bw, self.duplex_factor = h2d, d2h, dup
        self._h2d_s_per_block = self.block_bytes / h2d
        self._d2h_s_per_block = self.block_bytes / d2h
        self._h2d_dup_s_per_block = self.block_bytes / (h2d * dup)
        self._d2h_dup_s_per_block = self.block_bytes / (d2h * dup)

    # ---- collectives -----------------------------------------------------------------------------
    def comm(self, tokens: int, seqs: int) -> Comm:
        """Collective time of one traversal with ``tokens`` batched tokens of ``seqs`` sequences."""
        tp, hidden = self.layout.tp, self.full_model.hidden
        act = tokens * hidden * ACT_BYTES
        tp_s = 0.0
        if tp > 1:
            each = (allreduce_s(act, tp, self.tp_link) if self.tp_allreduce is None
                    else self.tp_allreduce.all_reduce_s(act))
            tp_s = (self._allreduces * each
                    + allgather_s(seqs * self.full_model.vocab * ACT_BYTES, tp, self.tp_link))
        pp_s = 0.0
        for link in self.hop_links:  # hidden states + residual, split over the TP ranks, gathered after
            pp_s += send_s(2 * act / tp, link) + allgather_s(2 * act, tp, self.tp_link)
        return Comm(tp_s, pp_s)

    def iteration_s(self, prefill_tokens: int, prefill_attn_pairs: float, decode_seqs: int,
                    decode_kv_tokens: int, prefill_ctx_tokens: int = 0) -> float:
        """One rank's compute over all layers plus the traversal's collectives; 0.0 when nothing runs.
        Sampled rows are counted as the decodes plus one per iteration with prefill (a lower bound)."""
        tokens = prefill_tokens + decode_seqs
        if self._grounded is not None:  # the collectives are GPU time: the host overlaps (or follows) both
            gpu, host = self._grounded.parts_s(prefill_tokens, prefill_attn_pairs, decode_seqs, decode_kv_tokens,
                                               prefill_ctx_tokens)
            if gpu > 0.0 and self.layout.world > 1:
                gpu += self.comm(tokens, decode_seqs + (1 if prefill_tokens > 0 else 0)).comm_s
            return self.with_host(gpu, host)
        base = super().iteration_s(prefill_tokens, prefill_attn_pairs, decode_seqs, decode_kv_tokens,
                                   prefill_ctx_tokens)
        if base <= 0.0 or self.layout.world == 1:
            return base
        return base + self.comm(tokens, decode_seqs + (1 if prefill_tokens > 0 else 0)).comm_s

    # ---- capacities ------------------------------------------------------------------------------
    def weight_bytes_per_rank(self) -> int:
        """bf16 weights of the heaviest stage's shard (what must fit on every GPU)."""
        return max(self.stage_params) * BF16_BYTES

    def hbm_kv_blocks(self, max_num_batched_tokens: int = 8192,
                      activation_reserve_bytes: int | None = None) -> int:
        """KV blocks every rank can hold: the minimum over stages of ``(hbm·util − stage weights −
        reserve) // stage block bytes``. Raises ValueError when some stage's weights leave no room."""
        reserve = (self.activation_reserve_bytes(max_num_batched_tokens)
                   if activation_reserve_bytes is None else int(activation_reserve_bytes))
        usable = self.hardware.hbm_bytes * self.hardware.gpu_memory_utilization
        per_layer_token = 2 * self.model.kv_heads * self.model.head_dim * BF16_BYTES
        blocks = None
        for n_layers, params in zip(self.stage_layers, self.stage_params):
            free = usable - params * BF16_BYTES - reserve
            block = self.block_size * per_layer_token * n_layers
            if free < block:
                raise ValueError(
                    f"weights do not fit: {self.full_model.name} at {self.layout} needs "
                    f"{params * BF16_BYTES / 1e9:.1f} GB of weights + {reserve / 1e9:.1f} GB reserve per GPU, "
                    f"{self.hardware.name} offers {usable / 1e9:.1f} GB ({self.hardware.hbm_bytes / 1e9:.0f} GB x "
                    f"{self.hardware.gpu_memory_utilization})")
            n = int(free // block)
            blocks = n if blocks is None else min(blocks, n)
        return int(blocks)

    def kv_tokens(self, max_num_batched_tokens: int = 8192) -> int:
        """Tokens of KV the engine holds (every rank holds the same tokens)."""
        return self.hbm_kv_blocks(max_num_batched_tokens) * self.block_size


def feasibility(model: ModelProfile, hardware: HardwareProfile, layout: Layout, *, block_size: int = 16,
                max_num_batched_tokens: int = 8192, max_model_len: int | None = None,
                fabric: Fabric | None = None) -> str | None:
    """None when ``layout`` can serve ``model`` on ``hardware``; else why not (the planner lists it)."""
    problems = layout_problems(layout.tp, layout.pp, heads=model.heads, kv_heads=model.kv_heads,
                               layers=model.layers, intermediate=model.intermediate)
    if problems:
        return "; ".join(problems)
    cm = ParallelCostModel(model, hardware, block_size, layout, fabric)
    try:
        blocks = cm.hbm_kv_blocks(max_num_batched_tokens)
    except ValueError as exc:
        return str(exc)
    need = max_model_len or model.max_model_len
    per_engine = blocks // layout.pp * block_size
    if per_engine < need:
        return (f"KV cache holds {per_engine} tokens per micro-batch engine, fewer than one sequence of "
                f"max_model_len {need}")
    return None


def layout_summary(cm: ParallelCostModel, max_num_batched_tokens: int = 8192) -> dict[str, float | int | str]:
    """What one replica looks like, for reports (``plan --json``, docs)."""
    blocks = cm.hbm_kv_blocks(max_num_batched_tokens)
    return {
        "weights_gb_per_gpu": round(cm.weight_bytes_per_rank() / 1e9, 2),
        "kv_blocks_per_gpu": blocks,
        "kv_tokens": blocks * cm.block_size,
        "block_bytes_per_gpu": cm.block_bytes,
        "tp_link": cm.tp_link.name if cm.layout.tp > 1 else "",
        "pp_links": ",".join(link.name for link in cm.hop_links),
        "fabric": cm.fabric.name,
        "decode_step_s_256x1024": round(cm.iteration_s(0, 0.0, 256, 256 * 1024), 6),
    }
