"""What the vllm backend gives vLLM for each scheduling policy: the core policy in the DuplexKV connector's
settings, or (``lvf-hbm``) no connector and the policy in the plugin's environment. No engine is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superinfer.daemon.backends.vllm_child import vllm_command, wiring
from superinfer.vllm.params import ENV_PARAMS_FILE, ENV_POLICY


def profile(policy: str, dram_gib: float = 1.0, async_scheduling: str = "auto"):
    """``get(section, key)`` of a profile with ``policy`` and a host pool of ``dram_gib``."""
    values = {("engine", "async_scheduling"): async_scheduling, ("scheduler", "policy"): policy, ("engine", "dram_gib"): dram_gib, ("engine", "block_size"): 32,
              ("engine", "max_num_seqs"): 8, ("engine", "max_num_batched_tokens"): 512, ("engine", "dtype"): "float32",
              ("engine", "gpu_memory_utilization"): 0.9, ("engine", "kv_cache_gib"): 0.5, ("engine", "max_model_len"): 0,
              ("engine", "num_gpu_blocks_override"): 0, ("engine", "enforce_eager"): True}
    return lambda s, k: values[(s, k)]


def command(policy: str, dram_gib: float = 1.0) -> list[str]:
    return vllm_command(profile(policy, dram_gib), "/m/tiny", "tiny", 8000, Path("/s/params.json"), 32768,
                        1, 1, 1, "mp")


def connector(cmd: list[str]) -> dict | None:
    return json.loads(cmd[cmd.index("--kv-transfer-config") + 1]) if "--kv-transfer-config" in cmd else None


@pytest.mark.parametrize("policy, core", [("lvf", "lvf"), ("vllm", "fcfs"), ("lvf-nooverlap", "lvf"),
                                          ("lvf-paper", "lvf-paper"), ("sarathi", "sarathi")])
def test_the_connector_carries_the_core_policy(policy: str, core: str) -> None:
    cmd = command(policy)
    extra = connector(cmd)["kv_connector_extra_config"]
    assert extra["policy"] == core and extra["host_blocks"] == (1 << 30) // 32768
    assert extra["params_file"] == "/s/params.json"
    assert wiring(profile(policy), Path("/s/params.json")).env == {}
    assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == str(1 << 29)


@pytest.mark.parametrize("mode, flags", [("auto", []), ("on", ["--async-scheduling"]),
                                         ("off", ["--no-async-scheduling"])])
def test_async_scheduling_is_vllm_s_choice_unless_the_profile_says(mode: str, flags: list[str]) -> None:
    """The plugin follows either mode (RotaScheduler gives RotaAsyncScheduler), so ``auto`` passes no flag: on a GPU
    vLLM schedules asynchronously, on a CPU it does not."""
    cmd = vllm_command(profile("lvf", async_scheduling=mode), "/m/tiny", "tiny", 8000, Path("/s/params.json"), 32768,
                       1, 1, 1, "mp")
    assert [f for f in cmd if "async-scheduling" in f] == flags


def test_lvf_hbm_runs_without_a_connector() -> None:
    cmd = command("lvf-hbm")
    assert connector(cmd) is None and "superinfer.vllm.RotaScheduler" in cmd
    assert wiring(profile("lvf-hbm"), Path("/s/p.json")).env == {ENV_POLICY: "lvf", ENV_PARAMS_FILE: "/s/p.json"}


def test_no_host_pool_means_no_connector() -> None:
    """``engine.dram_gib = 0``: the connector would need at least one host block; the engine runs without it."""
    assert connector(command("lvf", dram_gib=0.0)) is None
    assert wiring(profile("lvf", 0.0), Path("/p")).env[ENV_POLICY] == "lvf"
    assert wiring(profile("vllm", 0.0), Path("/p")).env[ENV_POLICY] == "fcfs"


def test_the_scheduler_reads_the_names_the_wiring_writes() -> None:
    pytest.importorskip("vllm")
    from superinfer.vllm import scheduler

    assert scheduler.ENV_POLICY == ENV_POLICY and scheduler.ENV_PARAMS_FILE == ENV_PARAMS_FILE


def test_a_cpu_engine_runs_below_the_daemons_priority(tmp_path) -> None:
    """engine.cpu_nice: the child (and what it starts) runs at the daemon's nice value + cpu_nice."""
    import io
    import os
    import sys

    from superinfer.daemon.backends.vllm_child import EngineChild

    out = io.BytesIO()
    child = EngineChild(tmp_path / "stats.json", sink=out)
    script = "import os; print('nice', os.nice(0)); os.path.exists('/proc/self/autogroup') and " \
             "print(open('/proc/self/autogroup').read())"
    child.spawn([sys.executable, "-c", script], dict(os.environ), nice=3)
    child.proc.wait(timeout=60)
    child.pump.join(10)
    assert f"nice {os.nice(0) + 3}".encode() in out.getvalue()
    if os.path.exists("/proc/self/autogroup"):  # its own session's group is lowered too: CPU is shared by group
        assert b"/autogroup-" in out.getvalue() and b" nice 3" in out.getvalue(), out.getvalue()
