"""Model profiles for the simulator's cost model (design §6).

Every architecture number is copied from the model's Hugging Face ``config.json`` (URL next to each
profile). Parameter counts are *computed* from those shapes (see :func:`_count_params`) and checked in
the tests against the published totals (model cards / papers), so a typo in a shape shows up as a
wrong total. Weights and KV are bf16 (2 bytes per element), as served in the paper.

``kv_bytes_per_token = 2 (K and V) * layers * kv_heads * head_dim * 2 bytes``:
Llama-3-8B 131072, Qwen2.5-32B 262144, Mixtral-8x7B 131072 (design §6); Llama-3-70B and Qwen2.5-72B
327680 (issue 14: they need tensor or pipeline parallelism, ``superinfer.sim.parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

BF16_BYTES = 2


@dataclass(frozen=True)
class ModelProfile:
    """Shapes of a decoder-only transformer, and what the cost model derives from them.

    ``experts``/``experts_per_token`` are 1/1 for dense models. ``qkv_bias`` adds the Q/K/V biases
    (Qwen2). ``tied_embeddings`` shares the input embedding with the LM head.
    """

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_model_len: int
    experts: int = 1
    experts_per_token: int = 1
    qkv_bias: bool = False
    tied_embeddings: bool = False
    published_total_params: float = 0.0  # from the cited model card / paper, for the consistency test
    published_active_params: float = 0.0
    sources: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab",
                    "max_model_len", "experts", "experts_per_token"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model profile {self.name!r}: {key} must be an integer > 0, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"model profile {self.name!r}: heads {self.heads} not a multiple of kv_heads {self.kv_heads}")
        if self.experts_per_token > self.experts:
            raise ValueError(f"model profile {self.name!r}: experts_per_token > experts")

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def attn_params_per_layer(self) -> int:
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias

    @property
    def expert_params(self) -> int:
        """One SwiGLU MLP (gate, up, down)."""
        return 3 * self.hidden * self.intermediate

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden * self.experts if self.experts > 1 else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def _count_params(self, experts_counted: int) -> int:
        per_layer = (self.attn_params_per_layer + experts_counted * self.expert_params
                     + self.router_params_per_layer + 2 * self.hidden)  # two RMSNorms
        return self.layers * per_layer + self.embedding_params + self.lm_head_params + self.hidden

    @property
    def total_params(self) -> int:
        return self._count_params(self.experts)

    @property
    def active_params(self) -> int:
        """Parameters touched by one token (MoE: ``experts_per_token`` experts per layer)."""
        return self._count_params(self.experts_per_token)

    @property
    def matmul_params_per_token(self) -> int:
        """Active parameters that cost 2 FLOPs per token: active minus the input embedding (a lookup).

        The LM head is counted for every token (vLLM computes logits only for sampled positions, so
        this slightly over-counts prefill; < 7 % of Llama-3-8B's FLOPs, and calibration replaces it).
        """
        return self.active_params - self.embedding_params

    @property
    def weight_bytes(self) -> int:
        return self.total_params * BF16_BYTES

    @property
    def expert_weight_bytes(self) -> int:
        """bf16 bytes of all routed experts (0 for dense models)."""
        return self.layers * self.experts * self.expert_params * BF16_BYTES if self.experts > 1 else 0

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * BF16_BYTES

    @property
    def attn_flops_per_pair(self) -> int:
        """FLOPs per (query token, key token) pair: QK^T and PV, 2 FLOPs each, all heads and layers."""
        return 4 * self.layers * self.heads * self.head_dim


MODELS: dict[str, ModelProfile] = {
    "llama-3-8b": ModelProfile(
        name="llama-3-8b", layers=32, hidden=4096, intermediate=14336, heads=32, kv_heads=8,
        head_dim=128, vocab=128256, max_model_len=8192,
        published_total_params=8.03e9, published_active_params=8.03e9,
        sources=(
            "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
            "https://huggingface.co/meta-llama/Meta-Llama-3-8B (model card: 8B; safetensors 8.03B params)",
        ),
    ),
    "qwen2.5-32b": ModelProfile(
        name="qwen2.5-32b", layers=64, hidden=5120, intermediate=27648, heads=40, kv_heads=8,
        head_dim=128, vocab=152064, max_model_len=32768, qkv_bias=True,
        published_total_params=32.8e9, published_active_params=32.8e9,
        sources=(
            "https://huggingface.co/Qwen/Qwen2.5-32B-Instruct/blob/main/config.json",
            "https://huggingface.co/Qwen/Qwen2.5-32B-Instruct (model card: 32.5B params, 31.0B non-embedding;"
            " safetensors 32.8B incl. untied LM head)",
        ),
    ),
    "llama-3-70b": ModelProfile(
        name="llama-3-70b", layers=80, hidden=8192, intermediate=28672, heads=64, kv_heads=8,
        head_dim=128, vocab=128256, max_model_len=8192,
        published_total_params=70.6e9, published_active_params=70.6e9,
        sources=(
            "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
            "https://huggingface.co/meta-llama/Meta-Llama-3-70B (model card: 70B; safetensors 70.6B params)",
        ),
    ),
    "qwen2.5-72b": ModelProfile(
        name="qwen2.5-72b", layers=80, hidden=8192, intermediate=29568, heads=64, kv_heads=8,
        head_dim=128, vocab=152064, max_model_len=32768, qkv_bias=True,
        published_total_params=72.7e9, published_active_params=72.7e9,
        sources=(
            "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct/blob/main/config.json",
            "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct (model card: 72.7B params, 70.0B non-embedding)",
        ),
    ),
    "mixtral-8x7b": ModelProfile(
        name="mixtral-8x7b", layers=32, hidden=4096, intermediate=14336, heads=32, kv_heads=8,
        head_dim=128, vocab=32000, max_model_len=32768, experts=8, experts_per_token=2,
        published_total_params=46.7e9, published_active_params=12.9e9,
        sources=(
            "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
            "Jiang et al., 'Mixtral of Experts', arXiv:2401.04088 (46.7B total, 12.9B active per token)",
        ),
    ),
}


def model_names() -> list[str]:
    return sorted(MODELS)


def get_model(name: str) -> ModelProfile:
    """The profile called ``name`` (case-insensitive). Raises ValueError listing the valid names."""
    key = name.strip().lower() if isinstance(name, str) else name
    try:
        return MODELS[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(model_names())}") from None
