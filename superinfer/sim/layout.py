"""A parallel layout (tensor x pipeline) and the rules vLLM imposes on it, as plain arithmetic.

Shared by the twin (:mod:`superinfer.sim.parallel`) and the daemon's ``[engine]`` validation, which reads
the model's shapes from its ``config.json``; no numpy, torch or vLLM here.

vLLM's rules (vllm 0.32/0.33): the attention heads must divide by the tensor-parallel size
(``ModelConfig.verify_with_parallel_config``); KV heads are split when they divide by it and replicated
when it divides by them (``QKVParallelLinear``: ``max(1, kv_heads // tp)`` per rank, the replication
count must be whole); the MLP's intermediate size is split evenly (``MergedColumnParallelLinear``); every
pipeline stage needs at least one layer (``get_pp_indices``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: sizes the planner tries (vLLM accepts others; these are the usual ones)
TP_CHOICES = (1, 2, 4, 8)
PP_CHOICES = (1, 2, 4)


@dataclass(frozen=True)
class Layout:
    """``tp`` ranks shard every layer; ``pp`` stages hold consecutive slices of the layers."""

    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")

    @property
    def world(self) -> int:
        """GPUs of one replica."""
        return self.tp * self.pp

    def __str__(self) -> str:
        return f"TP={self.tp} PP={self.pp}"


def layout_problems(tp: int, pp: int, *, heads: int, kv_heads: int, layers: int,
                    intermediate: int | None = None) -> list[str]:
    """Why vLLM would refuse ``tp`` x ``pp`` for a model of these shapes (empty: it would not)."""
    out: list[str] = []
    if heads % tp:
        out.append(f"tensor_parallel_size {tp} must divide the model's {heads} attention heads")
    if kv_heads % tp and tp % kv_heads:
        out.append(f"tensor_parallel_size {tp} must divide the model's {kv_heads} KV heads or be a multiple of them")
    if intermediate is not None and intermediate % tp:
        out.append(f"tensor_parallel_size {tp} must divide the MLP intermediate size {intermediate}")
    if pp > layers:
        out.append(f"pipeline_parallel_size {pp} exceeds the model's {layers} layers")
    return out


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM's ``get_pp_indices`` splits them: evenly, the remainder to the
    stages before the last (the last one also carries the final norm and the LM head)."""
    if pp < 1 or pp > layers:
        raise ValueError(f"pipeline_parallel_size: expected 1..{layers}, got {pp}")
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads each rank stores: split, or one replicated head when ``tp`` exceeds them (vLLM)."""
    return max(1, kv_heads // tp)
