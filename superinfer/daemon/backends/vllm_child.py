"""The vLLM child process of the ``vllm`` backend: its command line, its output, its end, its counters.

Invariants: the child listens on loopback only and dies with the daemon (``PR_SET_PDEATHSIG``); it leads
its own process group, so a terminal's Ctrl-C reaches only the daemon (which drains first) and
:meth:`EngineChild.stop` ends vLLM's engine core and workers with it, even when the server itself died
(they would otherwise live on, holding the model's memory); every
line it writes reaches the daemon's stderr (:class:`~superinfer.daemon.engine_log.OutputPump`), and
:meth:`EngineChild.failure` names the engine's own root cause, not only its exit status; the plugin's
counters are read from ``<state-dir>/engine-stats.json``, which RotaScheduler rewrites atomically.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from superinfer.daemon import parallel
from superinfer.daemon.engine_log import OutputPump, exit_text
from superinfer.vllm.params import PluginWiring, plugin_wiring

STATS_FILE = "engine-stats.json"
QUEUES_STALE_S = 5.0  # the plugin publishes each second while requests run, and when the last one leaves
GROUP_GRACE_S = 10.0  # how long vLLM's own processes may take to exit after the server, before SIGKILL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _lower_session_group(nice: int) -> None:
    """With the kernel's autogroup scheduling (``sched_autogroup_enabled``), CPU is shared between sessions
    first and a process's nice value counts only inside its own session: the child leads a session of its
    own, so its group's nice (``/proc/self/autogroup``) is what lowers it against the daemon."""
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass  # no autogroup (a kernel without it, or a container that hides it): the nice value alone counts


def served_default(model_path: str) -> str:
    """The default served model name: a local model directory's name (for a Hugging Face cache snapshot,
    ``.../models--org--name/snapshots/<sha>``, the model's id ``org/name``), else the model id as given."""
    p = Path(model_path).expanduser()
    if not p.is_dir():
        return model_path
    p = p.resolve()
    if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
        return "/".join(p.parent.parent.name.split("--")[1:])
    return p.name


#: ``[engine] async_scheduling`` as vLLM flags: ``auto`` leaves the choice to vLLM (on for GPUs, off on CPU); the
#: plugin follows either mode (superinfer.vllm.scheduler.RotaAsyncScheduler)
ASYNC_FLAGS: dict[str, list[str]] = {"auto": [], "on": ["--async-scheduling"], "off": ["--no-async-scheduling"]}


def vllm_command(get: Any, model_path: str, served: str, port: int, params_file: Path, block_bytes: int | None,
                 world: int, tp: int, pp: int, executor: str) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server ...`` for the profile's ``[engine]`` (``get(section, key)``)."""
    g = get
    # dram_gib is the whole engine's pool: each of the world's workers gets its share
    host_blocks = max(1, int(g("engine", "dram_gib") * (1 << 30)) // (world * block_bytes)) if block_bytes else None
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--served-model-name", served, "--host", "127.0.0.1", "--port", str(port)]
    cmd += wiring(g, params_file, host_blocks).cli_args()
    cmd += ASYNC_FLAGS[g("engine", "async_scheduling")]
    cmd += ["--block-size", str(g("engine", "block_size")),
           "--max-num-seqs", str(g("engine", "max_num_seqs")),
           "--max-num-batched-tokens", str(g("engine", "max_num_batched_tokens")),
           "--dtype", g("engine", "dtype"), "--gpu-memory-utilization", str(g("engine", "gpu_memory_utilization"))]
    if g("engine", "kv_cache_gib"):
        cmd += ["--kv-cache-memory-bytes", str(int(g("engine", "kv_cache_gib") * (1 << 30)))]
    if g("engine", "max_model_len"):
        cmd += ["--max-model-len", str(g("engine", "max_model_len"))]
    if g("engine", "num_gpu_blocks_override"):
        cmd += ["--num-gpu-blocks-override", str(g("engine", "num_gpu_blocks_override"))]
    if g("engine", "enforce_eager"):
        cmd.append("--enforce-eager")
    return cmd + parallel.vllm_args(tp, pp, executor)


def wiring(get: Any, params_file: Path, host_blocks: int | None = None) -> PluginWiring:
    """The plugin for the profile's policy: the DuplexKV connector only with a host pool (``engine.dram_gib``
    > 0) and a policy that keeps one (not ``lvf-hbm``); else the policy and params file in the environment."""
    return plugin_wiring(get("scheduler", "policy"), params_file, host_tier=get("engine", "dram_gib") > 0,
                         host_blocks=host_blocks)


class EngineChild:
    """One vLLM process: started by :meth:`spawn`, stopped by :meth:`stop`."""

    def __init__(self, stats_path: Path, sink: Any = None) -> None:
        """``sink``: where the child's output goes (a binary file; None: the daemon's stderr)."""
        self.sink = sink
        self.proc: subprocess.Popen | None = None
        self.pump: OutputPump | None = None
        self.stats_path = stats_path
        self._stopped = False

    def spawn(self, cmd: list[str], env: dict[str, str], nice: int = 0) -> None:
        """Start vLLM; ``nice`` > 0 lowers its CPU priority (and its processes') below the daemon's."""
        env = {**env, "SUPERINFER_STATS_FILE": str(self.stats_path), "PYTHONUNBUFFERED": "1"}
        self.stats_path.unlink(missing_ok=True)  # a previous run's counters are not this one's

        def before_exec() -> None:  # in the child, between fork and exec (after setsid)
            _die_with_parent()
            if nice > 0:
                os.nice(nice)
                _lower_session_group(nice)

        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=before_exec, start_new_session=True)
        self.pump = OutputPump(self.proc.stdout, self.sink)

    def ready(self) -> None:
        """The engine serves: what it printed while loading is no longer a cause of what comes next."""
        if self.pump is not None:
            self.pump.cause.reset()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def failure(self, during: str = "") -> str:
        """``vLLM exited with 1 while loading M: ValueError: ...``: the exit and the engine's root cause."""
        if self.pump is not None:
            self.pump.join(5.0)  # the last lines of a dying child carry the cause
        text = f"vLLM {exit_text(self.proc.returncode)}" if self.proc is not None else "vLLM did not start"
        text += f" {during}" if during else ""
        cause = self.pump.cause.line if self.pump is not None else None
        return f"{text}: {cause}" if cause else f"{text} (no error line in its output)"

    def stats(self) -> dict[str, Any] | None:
        """The plugin's last published counters (None before the first publication)."""
        try:
            data = json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the child's process group; False when nothing of it is left."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    async def stop(self) -> None:
        """SIGTERM the server and its group, wait; then whatever of the group is left gets SIGKILL. Once:
        a second call would signal a process group id the system may have given to someone else."""
        if self.proc is None or self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                await asyncio.to_thread(self.proc.wait, 10)
        else:
            self._signal_group(signal.SIGTERM)  # the server died: its engine core and workers did not
        deadline = time.monotonic() + GROUP_GRACE_S
        while self._signal_group(0) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self._signal_group(signal.SIGKILL)


def plugin_view(stats: dict[str, Any] | None, now: float | None = None) -> dict[str, Any]:
    """RotaScheduler's published counters as ``/v1/state`` names them (the twin's: a rotation is a victim
    whose KV was parked in DRAM, a swap-in a parked request loaded back). Empty before the first
    publication; keys the plugin did not publish are left out, and so are queues and the VLT ranking published
    more than :data:`QUEUES_STALE_S` ago (vLLM's own counts are fresher then; the ranking is the last plan's)."""
    if not stats:
        return {}
    now = time.time() if now is None else now
    sched, ledger = stats.get("scheduler") or {}, stats.get("ledger") or {}
    out: dict[str, Any] = {"counters": {"preemptions": int(sched.get("preemptions", 0)),
                                        "rotations": int(ledger.get("parks", 0)),
                                        "recompute_fallbacks": int(ledger.get("recompute_fallbacks", 0)),
                                        "swap_ins": int(ledger.get("loads", 0)),
                                        "h2d_blocks": int(ledger.get("swap_in_blocks", 0)),
                                        "d2h_blocks": int(ledger.get("swap_out_blocks", 0)) + int(ledger.get("sync_blocks", 0))}}
    fresh = now - float(stats.get("published_at") or 0) <= QUEUES_STALE_S
    if isinstance(stats.get("queues"), dict) and fresh:
        out["queues"] = {k: int(stats["queues"].get(k, 0)) for k in ("waiting", "rotary", "running")}
    if isinstance(stats.get("ranking"), list) and fresh:
        out["ranking"] = [r for r in stats["ranking"] if isinstance(r, dict)]
    if "host_capacity" in stats:
        out["dram"] = {"used": int(stats["host_capacity"]) - int(stats.get("host_free", 0)),
                       "total": int(stats["host_capacity"])}
    return out
