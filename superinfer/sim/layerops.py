"""The operators of one transformer layer on one tensor-parallel shard, as profile files name them.

One row of a Vidur-format ``mlp.csv`` (see ``../shared/data/gpu-profiles/README.md``) times these
operators for a layer shape (``n_head``, ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``vocab_size``,
``use_gated_mlp``), a token count and a TP degree. :class:`LayerShard` derives from such a row what each
operator does on one rank, the way vLLM shards it (``QKVParallelLinear``, ``RowParallelLinear``,
``MergedColumnParallelLinear``, ``VocabParallelEmbedding``): heads, the MLP's intermediate size and the
vocabulary split ``tp`` ways; KV heads split, or one replicated per rank when ``tp`` exceeds them; norms
replicated. Per operator it gives the GEMM's (M, N, K) or, for elementwise operators, the bytes moved.
Pure arithmetic: the profiler builds its tensors from it and the scorer prices it, so both agree on what
a row means.
"""

from __future__ import annotations

from dataclasses import dataclass

#: every operator of a row, in the order Vidur's files list them
OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = tuple(op for op in OPS if op not in GEMMS)
STATS = ("min", "max", "mean", "median", "std")
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
                 "num_tokens", "num_tensor_parallel_workers")
ELEM_BYTES = 2  # fp16 / bf16 activations and weights


def column(op: str, stat: str = "median") -> str:
    """The CSV column of one statistic of one operator (milliseconds)."""
    return f"time_stats.{op}.{stat}"


def header() -> list[str]:
    """A profile file's columns, in Vidur's order."""
    return [column(op, s) for op in OPS for s in STATS] + list(SHAPE_COLUMNS)


@dataclass(frozen=True)
class LayerShard:
    """One rank's share of one layer: the full model's shape, the TP degree and the batch's tokens."""

    n_head: int
    n_kv_head: int
    n_embd: int
    n_expanded_embd: int
    vocab_size: int
    gated: bool
    tp: int
    tokens: int

    def __post_init__(self) -> None:
        for key in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "tp", "tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{key}: expected an integer > 0, got {value!r}")
        if self.n_head % self.tp:
            raise ValueError(f"n_head {self.n_head} is not divisible by tp {self.tp}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_kv_head {self.n_kv_head}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def heads(self) -> int:
        return self.n_head // self.tp

    @property
    def kv_heads(self) -> int:
        return max(1, self.n_kv_head // self.tp)

    @property
    def inter(self) -> int:
        return -(-self.n_expanded_embd // self.tp)

    @property
    def vocab(self) -> int:
        return -(-self.vocab_size // self.tp)

    def gemm(self, op: str) -> tuple[int, int, int]:
        """(M, N, K) of a GEMM operator: ``[M, K] @ [K, N]``, M the tokens."""
        hd, h = self.head_dim, self.n_embd
        if op == "attn_pre_proj":
            return self.tokens, (self.heads + 2 * self.kv_heads) * hd, h
        if op == "attn_post_proj":
            return self.tokens, h, self.heads * hd
        if op == "mlp_up_proj":
            return self.tokens, (2 if self.gated else 1) * self.inter, h
        if op == "mlp_down_proj":
            return self.tokens, h, self.inter
        raise ValueError(f"{op!r} is not a GEMM; GEMMs: {', '.join(GEMMS)}")

    def gemm_flops(self, op: str) -> int:
        m, n, k = self.gemm(op)
        return 2 * m * n * k

    def weight_bytes(self, op: str) -> int:
        """Bytes of the operator's weight on this rank (what decode streams from HBM)."""
        if op in GEMMS:
            _, n, k = self.gemm(op)
            return n * k * ELEM_BYTES
        if op in ("input_layernorm", "post_attention_layernorm"):
            return self.n_embd * ELEM_BYTES
        return 0

    def activation_bytes(self, op: str) -> int:
        """Bytes of activations the operator reads and writes (each once)."""
        t, h = self.tokens, self.n_embd
        if op in GEMMS:
            m, n, k = self.gemm(op)
            return (m * k + m * n) * ELEM_BYTES
        if op == "emb":
            return 2 * t * h * ELEM_BYTES  # the looked-up rows read, the hidden states written
        if op in ("input_layernorm", "post_attention_layernorm"):
            return 2 * t * h * ELEM_BYTES
        if op == "attn_rope":
            return 2 * t * (self.heads + self.kv_heads) * self.head_dim * ELEM_BYTES  # q and k, in place
        if op == "mlp_act":
            read = (2 if self.gated else 1) * self.inter
            return t * (read + self.inter) * ELEM_BYTES
        if op == "add":
            return 3 * t * h * ELEM_BYTES
        raise ValueError(f"unknown operator {op!r}; operators: {', '.join(OPS)}")

    def bytes_moved(self, op: str) -> int:
        return self.weight_bytes(op) + self.activation_bytes(op)

    def shape_row(self) -> dict[str, object]:
        """The row's shape columns (the full model's shape, as Vidur writes it)."""
        return {"n_head": self.n_head, "n_kv_head": self.n_kv_head, "n_embd": self.n_embd,
                "n_expanded_embd": self.n_expanded_embd, "vocab_size": self.vocab_size,
                "use_gated_mlp": self.gated, "num_tokens": self.tokens, "num_tensor_parallel_workers": self.tp}


def shard_of_model(model, tp: int, tokens: int) -> LayerShard:
    """The shard of a :class:`superinfer.sim.models.ModelProfile` (SwiGLU models: gated)."""
    if model.heads * model.head_dim != model.hidden:
        raise ValueError(f"{model.name}: heads x head_dim != hidden; the profile format cannot express it")
    return LayerShard(n_head=model.heads, n_kv_head=model.kv_heads, n_embd=model.hidden,
                      n_expanded_embd=model.intermediate, vocab_size=model.vocab, gated=True, tp=tp, tokens=tokens)


def attention_work(shard: LayerShard, phase: str, batch: int, kv_len: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one layer's attention on ``shard``: ``decode``, ``batch`` one-token queries over
    ``kv_len`` cached tokens each; ``prefill``, ``batch`` causal sequences of ``kv_len`` tokens. FLOPs are
    QK^T and PV (4 per query-key pair and head dimension, causal pairs only); bytes are K and V read once
    plus the queries read and the output written."""
    hd = shard.head_dim
    if phase == "decode":
        pairs, queries = batch * kv_len, batch
    elif phase == "prefill":
        pairs, queries = batch * kv_len * (kv_len + 1) // 2, batch * kv_len
    else:
        raise ValueError(f"phase: expected decode or prefill, got {phase!r}")
    flops = 4.0 * pairs * shard.heads * hd
    nbytes = (2.0 * batch * kv_len * shard.kv_heads * hd + 2.0 * queries * shard.heads * hd) * ELEM_BYTES
    return flops, nbytes
