"""Build a tiny random Llama (config, weights, tokenizer) on disk, with no network.

Used by the ``cpu-demo`` profile (``engine.tiny_model``), the real-engine tests and
``superinferd bench vllm --build-tiny DIR``: vLLM on CPU loads
it in seconds and decodes hundreds of tokens per second, so scheduling behaviour (preemption,
rotation) can be exercised for real without downloading anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["build_tiny_llama", "TINY_CORPUS", "TINY_STAMP"]

_STAMP = TINY_STAMP = "superinfer-tiny.json"  # written last: a directory holding it was built here
_FORMAT = 1

# A small built-in corpus for the tokenizer; any text works, this one gives ordinary English words.
TINY_CORPUS: tuple[str, ...] = (
    "the quick brown fox jumps over the lazy dog",
    "a scheduler decides which request runs in the next iteration",
    "when memory runs out the engine preempts a request and parks its cache",
    "latency objectives for the first token and between tokens must be kept",
    "blocks are copied from device to host and back again while the model computes",
    "every request has a prompt a tenant and a deadline",
    "one two three four five six seven eight nine ten eleven twelve",
    "red green blue yellow black white orange purple brown grey",
    "monday tuesday wednesday thursday friday saturday sunday",
    "north south east west up down left right in out on off",
    "serve rotate swap park resume recompute load save free allocate",
    "large language models generate text one token at a time",
)


def _params(vocab_size: int, seed: int, hidden_size: int, num_hidden_layers: int,
            intermediate_size: int, max_position_embeddings: int, dtype: str) -> dict[str, Any]:
    return {
        "format": _FORMAT,
        "vocab_size": vocab_size,
        "seed": seed,
        "hidden_size": hidden_size,
        "num_hidden_layers": num_hidden_layers,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
        "dtype": dtype,
    }


def parse_tiny_shape(text: str) -> dict[str, int]:
    """``"LAYERS,HIDDEN,INTERMEDIATE"`` (e.g. ``"4,256,768"``) as :func:`build_tiny_llama` keywords; a clear
    ``ValueError`` otherwise."""
    parts = text.split(",")
    try:
        layers, hidden, inter = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"tiny shape: expected LAYERS,HIDDEN,INTERMEDIATE (three integers), got {text!r}") from None
    return {"num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": inter}


def tiny_shape_option(ctx: Any, param: Any, value: str) -> dict[str, int]:
    """click callback of ``--tiny-shape``: :func:`parse_tiny_shape`, its error as a usage error."""
    import click

    try:
        return parse_tiny_shape(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def build_tiny_llama(
    out_dir: Path,
    *,
    vocab_size: int = 512,
    seed: int = 0,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 1024,
    dtype: str = "float32",
) -> Path:
    """Write a tiny random Llama model and tokenizer to ``out_dir`` and return the directory.

    The model has 2 attention heads of dimension ``hidden_size // 2`` and one KV head (vLLM's CPU
    attention rejects head_dim < 32). The tokenizer is a byte-level BPE trained on
    :data:`TINY_CORPUS` up to ``vocab_size`` tokens, with ``<s>``/``</s>``/``<unk>``/``<pad>``.
    Weights are random but deterministic for ``seed``. If ``out_dir`` already holds a model built with
    the same parameters, nothing is rewritten.
    """
    out_dir = Path(out_dir)
    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 byte tokens + merges + specials), got {vocab_size}")
    if hidden_size % 2 or hidden_size // 2 < 32:
        raise ValueError(f"hidden_size must be even with hidden_size/2 >= 32 (head_dim), got {hidden_size}")
    if num_hidden_layers < 1 or intermediate_size < 1 or max_position_embeddings < 1:
        raise ValueError("num_hidden_layers, intermediate_size and max_position_embeddings must be >= 1")
    if dtype not in ("bfloat16", "float32", "float16"):
        raise ValueError(f"dtype must be bfloat16, float16 or float32, got {dtype!r}")

    params = _params(vocab_size, seed, hidden_size, num_hidden_layers, intermediate_size,
                     max_position_embeddings, dtype)
    stamp = out_dir / _STAMP
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == params:
                return out_dir
        except (OSError, ValueError):
            pass  # unreadable stamp: rebuild

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)

    # Tokenizer: byte-level BPE, so any text round-trips; training is deterministic for a corpus.
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(TINY_CORPUS), trainer=trainer)
    bos_id, eos_id, pad_id = (tok.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=max_position_embeddings,
    )

    config = LlamaConfig(
        vocab_size=vocab_size,  # >= the trained vocabulary (BPE may stop short of vocab_size)
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden_size // 2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        tie_word_embeddings=False,
        torch_dtype=dtype,
    )
    torch_dtype = getattr(torch, dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        # Larger-than-default init makes logits spread out, so greedy decoding is not degenerate
        # and near-ties (which could flip under different batch shapes) are rare.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, 0.08)
    model = model.to(torch_dtype)
    model.save_pretrained(out_dir, safe_serialization=True)
    fast.save_pretrained(out_dir)
    # Make the generation config explicit; vLLM reads it for default sampling params.
    stamp.write_text(json.dumps(params, sort_keys=True))
    return out_dir
