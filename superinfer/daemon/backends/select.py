"""``--backend auto|vllm|sim``: which engine this daemon runs, and why (logged)."""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path

from superinfer.daemon.backends.base import Backend
from superinfer.daemon.config import Config
from superinfer.daemon.errors import StartError

log = logging.getLogger("superinfer.daemon")


def vllm_unavailable(cfg: Config) -> str | None:
    """Why the vllm backend cannot run here (None: it can)."""
    model_path = cfg.get("engine", "model_path")
    if not model_path:
        return "the profile has no engine.model_path (or engine.tiny_model = true)"
    if not Path(model_path).exists() and "/" not in model_path:
        return f"engine.model_path {model_path!r} does not exist"
    try:
        importlib.import_module("vllm")
    except ImportError as exc:
        return f"vLLM is not installed ({exc})"
    try:
        plugin = importlib.import_module("superinfer.vllm")
        getattr(plugin, "RotaScheduler")
        getattr(plugin, "DuplexKVConnector")
    except (ImportError, AttributeError) as exc:
        return f"the superinfer vLLM plugin is not available ({exc})"
    device = cfg.d("device")
    if device == "cpu":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return "no CUDA device (pass --device cpu to serve with the CPU vLLM stack)"


def ensure_tiny_model(cfg: Config) -> None:
    """``engine.tiny_model``: build the tiny random Llama at ``engine.model_path`` unless it is there."""
    if not cfg.get("engine", "tiny_model"):
        return
    from superinfer.daemon.backends.tiny import TINY_STAMP, build_tiny_llama

    path = Path(cfg.get("engine", "model_path")).expanduser()
    fresh = not (path / "config.json").is_file()
    if path.is_dir() and any(path.iterdir()) and not (path / TINY_STAMP).is_file():
        raise StartError(f"engine.tiny_model: {path} holds files the tiny-model builder did not write (a real "
                         "model?); it is left alone: set engine.tiny_model = false to serve it, or point "
                         "engine.model_path at an empty or new directory (an interrupted build: delete the directory)", 2)
    t0 = time.monotonic()
    build_tiny_llama(path)
    if fresh:
        log.info("engine.tiny_model: built a tiny random Llama at %s in %.1f s (its text is gibberish)", path,
                 time.monotonic() - t0)


def preflight_or_raise(cfg: Config) -> None:
    """Run :mod:`superinfer.daemon.preflight`; every problem found is one line of a :class:`StartError` (2)."""
    from superinfer.daemon import preflight

    problems, host, _ = preflight.run(cfg)
    if problems:
        raise StartError("\n".join(f"preflight: {p}" for p in problems) + "\npreflight: nothing was started; "
                         "`superinferd config check` repeats these checks", 2)
    log.info("preflight: %s host, %.1f GiB of memory available: the profile's [engine] settings fit", host.device,
             host.available / (1 << 30))


def select_backend(cfg: Config) -> Backend:
    """The backend for ``--backend``; raises :class:`StartError` (code 2 for configuration problems)."""
    choice = cfg.d("backend")
    if choice in ("vllm", "auto"):
        reason = vllm_unavailable(cfg)
        if reason is None:
            from superinfer.daemon.backends.vllm import VllmBackend

            ensure_tiny_model(cfg)
            preflight_or_raise(cfg)
            return VllmBackend(cfg)
        if choice == "vllm":
            code = 2 if "model_path" in reason else 1
            raise StartError(f"--backend vllm: {reason}", code)
        log.warning("backend auto: vllm unavailable (%s); starting the digital twin (SIMULATION)", reason)
    from superinfer.daemon.backends.sim import SimBackend

    try:
        return SimBackend(cfg)
    except ValueError as exc:
        raise StartError(f"sim backend: {exc}", 2) from None
