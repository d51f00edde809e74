"""The vllm backend's preflight as a specification: what each check refuses, that the value it suggests
is one it accepts, how vLLM's root-cause line is found in its output, and how a failed engine shows in
``/healthz`` and ``/v1/state``. No engine is started here (tests/daemon/test_preflight_cli.py and
test_real_engine_cli.py start the real one)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.daemon.engine_log import MAX_CAUSE, RootCause, exit_text, strip_prefixes
from superinfer.daemon.preflight import GIB, HostFacts, ModelFacts, Problem, check

TINY = ModelFacts("/models/tiny", True, weights=2 << 20, max_position=1024, block_bytes=32 << 10)
BIG = ModelFacts("/models/big", True, weights=16 * GIB, max_position=32768, block_bytes=2 << 20)
ENGINE = {"block_size": 32, "max_model_len": 0, "kv_cache_gib": 1.0, "gpu_memory_utilization": 0.9,
          "dram_gib": 1.0, "num_gpu_blocks_override": 0, "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
          "distributed_executor_backend": "mp", "policy": "lvf"}


def cpu_host(avail_gib: float = 20.0, total_gib: float = 24.0) -> HostFacts:
    return HostFacts("cpu", int(total_gib * GIB), int(avail_gib * GIB))


def gpu_host(free_gib: float = 130.0, total_gib: float = 140.0, n: int = 1, avail_gib: float = 200.0) -> HostFacts:
    return HostFacts("cuda", int(1000 * GIB), int(avail_gib * GIB), ((int(free_gib * GIB), int(total_gib * GIB)),) * n)


def problems(host: HostFacts, model: ModelFacts = TINY, world: int = 1, **engine: Any) -> list[Problem]:
    values = {**ENGINE, **engine}
    return check(lambda section, key: values[key], host, model, world)


def keys(found: list[Problem]) -> list[str]:
    return [p.key for p in found]


def suggested(p: Problem) -> float:
    """The value a problem's message says would work (``try <key> = <value>``)."""
    m = re.search(rf"(?:try|set) {re.escape(p.key)} = ([0-9.]+)", p.message)
    assert m, p.message
    return float(m.group(1))


def test_settings_that_fit_pass() -> None:
    assert problems(cpu_host()) == []
    assert problems(gpu_host(), BIG, kv_cache_gib=0.0, block_size=16, dram_gib=64.0) == []


def test_block_size_follows_the_devices_attention() -> None:
    [p] = problems(cpu_host(), block_size=16)
    assert p.key == "engine.block_size" and "multiple of 32" in p.message and suggested(p) == 32
    assert problems(gpu_host(), BIG, kv_cache_gib=0.0, block_size=16) == []
    assert keys(problems(gpu_host(), BIG, kv_cache_gib=0.0, block_size=24)) == ["engine.block_size"]


def test_max_model_len_beyond_the_model_is_refused_with_the_models_own() -> None:
    [p] = problems(cpu_host(), max_model_len=4096)
    assert p.key == "engine.max_model_len" and "1024" in p.message and suggested(p) == 1024


def test_kv_that_cannot_hold_one_sequence_is_refused() -> None:
    assert problems(cpu_host(), kv_cache_gib=1 / 1024, max_model_len=1024) == []  # 1 MiB: 32 blocks, 1,024 tokens
    [p] = problems(cpu_host(), kv_cache_gib=0.0005, max_model_len=1024)  # 16 blocks: 512 tokens
    assert p.key == "engine.kv_cache_gib" and "512 tokens" in p.message
    assert problems(cpu_host(), kv_cache_gib=suggested(p), max_model_len=1024) == []
    assert problems(cpu_host(), kv_cache_gib=0.0005, max_model_len=1024, num_gpu_blocks_override=16) == []


def test_on_cpu_gpu_memory_utilization_is_a_share_of_host_memory() -> None:
    # the host: 7 GiB of 8.7 available, vLLM's default 0.9 of it for KV
    [p] = problems(cpu_host(avail_gib=7.0, total_gib=8.7), kv_cache_gib=0.0, dram_gib=0.5)
    assert p.key == "engine.gpu_memory_utilization" and "host memory" in p.message
    assert "engine.kv_cache_gib = " in p.message
    fit = float(re.search(r"engine.kv_cache_gib = ([0-9.]+)", p.message).group(1))
    assert fit > 0 and problems(cpu_host(avail_gib=7.0, total_gib=8.7), kv_cache_gib=fit, dram_gib=0.5) == []


def test_kv_beyond_host_memory_is_refused() -> None:
    [p] = problems(cpu_host(avail_gib=20.0), kv_cache_gib=100000.0)
    assert p.key == "engine.kv_cache_gib" and "20 GiB" in p.message
    assert problems(cpu_host(avail_gib=20.0), kv_cache_gib=suggested(p)) == []


def test_the_host_pool_must_fit_beside_the_engine() -> None:
    # the step 4: the default 64 GiB pool on a 24 GB host
    [p] = problems(cpu_host(avail_gib=22.0), dram_gib=64.0)
    assert p.key == "engine.dram_gib" and "64 GiB" in p.message and "22 GiB available" in p.message
    assert 0 < suggested(p) < 22 and problems(cpu_host(avail_gib=22.0), dram_gib=suggested(p)) == []


@settings(max_examples=300, deadline=None)
@given(avail=st.floats(0.5, 2048.0), dram=st.floats(0.0, 4096.0), kv=st.floats(0.0, 64.0),
       util=st.floats(0.05, 1.0), world=st.integers(1, 4))
def test_every_suggested_value_is_accepted(avail: float, dram: float, kv: float, util: float, world: int) -> None:
    """Property: a suggested value is one that works: applying it removes the problem and brings no other
    about the engine's memory (the pool is sized once the engine fits, so it may follow), and a suggested
    KV size is never 0 (which would mean "let vLLM size it")."""
    host = cpu_host(avail_gib=avail, total_gib=avail * 1.2)
    before = {"kv_cache_gib": kv, "dram_gib": dram, "gpu_memory_utilization": util}
    for p in problems(host, TINY, world, **before):
        if "try " not in p.message and "set " not in p.message:
            continue  # nothing suggested (the model does not fit at all)
        key = "kv_cache_gib" if "engine.kv_cache_gib = " in p.message else p.key.split(".")[1]
        if key == "max_model_len":
            continue  # a shorter sequence length: the operator's call, not a memory setting
        value = float(re.search(rf"engine\.{key} = ([0-9.]+)", p.message).group(1))
        assert key != "kv_cache_gib" or value > 0, p
        after = problems(host, TINY, world, **{**before, key: value})
        assert not set(keys(after)) & {p.key, "engine.kv_cache_gib", "engine.gpu_memory_utilization"}, (p, after)


def test_without_a_host_tier_the_pool_is_not_checked() -> None:
    assert keys(problems(cpu_host(avail_gib=22.0), dram_gib=64.0)) == ["engine.dram_gib"]
    assert problems(cpu_host(avail_gib=22.0), dram_gib=64.0, policy="lvf-hbm") == []


def test_cpu_ranks_each_take_their_kv_and_runtime() -> None:
    # 2 ranks x 2 GiB of KV + 2 x 1.5 GiB of runtime = 7 GiB > 6 GiB: one rank's arithmetic would pass it
    assert problems(cpu_host(avail_gib=6.0), TINY, 1, kv_cache_gib=2.0, dram_gib=0.25) == []
    [p] = problems(cpu_host(avail_gib=6.0), TINY, 2, kv_cache_gib=2.0, dram_gib=0.25)
    assert p.key == "engine.kv_cache_gib" and "x 2 rank(s)" in p.message


def test_a_model_that_cannot_fit_says_so_instead_of_suggesting_zero() -> None:
    [p] = problems(cpu_host(avail_gib=2.0), ModelFacts("/m", True, weights=int(1.9 * GIB), max_position=1024,
                                                       block_bytes=32 << 10))
    assert p.key == "engine.model_path" and "does not fit" in p.message and "= 0" not in p.message


def test_gpu_ranks_and_free_memory() -> None:
    [p] = problems(gpu_host(n=2), BIG, world=4, kv_cache_gib=0.0, block_size=16, tensor_parallel_size=4)
    assert p.key == "engine.tensor_parallel_size" and "2 CUDA device" in p.message
    # another process holds most of the GPU: 0.9 of 140 GiB is more than the 40 GiB free
    [p] = problems(gpu_host(free_gib=40.0), BIG, kv_cache_gib=0.0, block_size=16)
    assert p.key == "engine.gpu_memory_utilization" and suggested(p) <= 40 / 140
    [p] = problems(gpu_host(), BIG, kv_cache_gib=200.0, block_size=16)
    assert p.key == "engine.kv_cache_gib"
    assert problems(gpu_host(), BIG, kv_cache_gib=suggested(p), block_size=16) == []
    # vLLM claims gpu_memory_utilization of the GPU whatever the KV size: a busy GPU fails with any kv_cache_gib
    [p] = problems(gpu_host(free_gib=40.0), BIG, kv_cache_gib=10.0, block_size=16)
    assert p.key == "engine.gpu_memory_utilization"
    # every rank's GPU is checked, not only the smallest (mixed sizes: the 80 GiB one is the busy one)
    mixed = HostFacts("cuda", 1000 * GIB, 200 * GIB, ((130 * GIB, 140 * GIB), (30 * GIB, 80 * GIB)))
    [p] = problems(mixed, BIG, world=2, kv_cache_gib=0.0, block_size=16, tensor_parallel_size=2)
    assert p.key == "engine.gpu_memory_utilization" and "GPU 1" in p.message
    # no nvidia-smi: GPU memory is unknown, and nothing is claimed about it
    assert problems(HostFacts("cuda", 1000 * GIB, 200 * GIB), BIG, kv_cache_gib=0.0, block_size=16) == []


# -- vLLM's output: the root cause -------------------------------------------------------------------------
ENGINE_CORE_FAILURE = """\
(EngineCore pid=27547) INFO 12-04 16:26:01 [core.py:100] Initializing a V1 LLM engine
(Worker pid=27547) ERROR 12-04 16:26:05 [multiproc_executor.py:1063] WorkerProc hit an exception.
(Worker pid=27547) ERROR 12-04 16:26:05 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=27547) ERROR 12-04 16:26:05 [multiproc_executor.py:1063]   File "vllm/v1/worker/utils.py", line 554, in select_common_block_size
(Worker pid=27547) ERROR 12-04 16:26:05 [multiproc_executor.py:1063]     raise ValueError(
(Worker pid=27547) ERROR 12-04 16:26:05 [multiproc_executor.py:1063] ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).
(EngineCore pid=27546) ERROR 12-04 16:26:05 [core.py:900] EngineCore failed to start.
(EngineCore pid=27546) ERROR 12-04 16:26:05 [core.py:900] Traceback (most recent call last):
(EngineCore pid=27546) ERROR 12-04 16:26:05 [core.py:900] RuntimeError: Worker failed with error 'No common block size'
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

API_SERVER_FAILURE = """\
(APIServer pid=1) WARNING 12-04 16:25:51 [system_utils.py:255] Found ulimit of 20000
Traceback (most recent call last):
  File "vllm/engine/arg_utils.py", line 1955, in create_model_config
    return ModelConfig(
           ^^^^^^^^^^^^
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, Model architectures ['NoSuchForCausalLM'] are not supported for now. Supported: """ + "x" * 2000 + """
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""


def cause_of(text: str) -> str | None:
    rc = RootCause()
    for line in text.splitlines(keepends=True):
        rc.feed(line)
    return rc.line


def test_the_first_tracebacks_exception_is_the_root_cause() -> None:
    assert cause_of(ENGINE_CORE_FAILURE) == "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."


def test_pydantic_detail_is_kept_and_long_lines_are_capped() -> None:
    cause = cause_of(API_SERVER_FAILURE)
    assert cause.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
                            "Value error, Model architectures ['NoSuchForCausalLM'] are not supported")
    assert len(cause) == MAX_CAUSE and cause.endswith("…")


def test_processes_writing_at_once_keep_their_own_tracebacks() -> None:
    interleaved = """\
(Worker pid=7) ERROR 12-04 16:26:05 [m.py:1] Traceback (most recent call last):
(EngineCore pid=6) INFO 12-04 16:26:05 [core.py:1] shutting down workers
(Worker pid=7) ERROR 12-04 16:26:05 [m.py:1]   File "vllm/v1/worker/utils.py", line 554, in select_common_block_size
(EngineCore pid=6) ERROR 12-04 16:26:05 [core.py:9] Traceback (most recent call last):
(EngineCore pid=6) ERROR 12-04 16:26:05 [core.py:9]   File "vllm/v1/engine/core.py", line 1, in run
(Worker pid=7) ERROR 12-04 16:26:05 [m.py:1] torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised
(EngineCore pid=6) ERROR 12-04 16:26:05 [core.py:9] RuntimeError: Engine core initialization failed.
"""
    assert cause_of(interleaved) == "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised"
    assert cause_of("Traceback (most recent call last):\n  File \"x\"\nRayTaskError(ValueError): boom\n") == \
        "RayTaskError(ValueError): boom"


def test_a_ready_engine_forgets_what_it_printed_while_loading() -> None:
    rc = RootCause()
    rc.feed("(EngineCore pid=6) ERROR 12-04 10:00:00 [s.py:1] RotaScheduler: core plan failed once\n")
    rc.reset()
    rc.feed("Traceback (most recent call last):\n")
    rc.feed("MemoryError: out of host memory\n")
    assert rc.line == "MemoryError: out of host memory"


def test_without_a_traceback_the_first_error_line_is_said() -> None:
    assert cause_of("(APIServer pid=3) INFO 12-04 10:00:00 [a.py:1] hello\n"
                    "(APIServer pid=3) ERROR 12-04 10:00:01 [b.py:2] cannot bind port 8000\n"
                    "(APIServer pid=3) ERROR 12-04 10:00:02 [b.py:3] second\n") == "cannot bind port 8000"
    assert cause_of("plain output\n") is None


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120), max_size=40))
def test_any_output_is_read_without_error_and_the_cause_is_bounded(lines: list[str]) -> None:
    cause = cause_of("\n".join(lines))
    assert cause is None or 0 < len(cause) <= MAX_CAUSE


def test_prefixes_and_exit_text() -> None:
    assert strip_prefixes("(EngineCore_DP0 pid=12) ERROR 12-04 16:26:05 [core.py:900] boom\n") == ("boom", "ERROR")
    assert strip_prefixes("plain") == ("plain", None)
    assert exit_text(1) == "exited with 1"
    assert exit_text(-9).startswith("was killed by SIGKILL (out of memory?")


# -- a failed engine in /healthz and /v1/state ---------------------------------------------------------------
def test_a_failed_engine_says_its_error_in_healthz_and_state(tmp_path: Path) -> None:
    from superinfer.daemon.api import build_app
    from superinfer.daemon.backends.sim import SimBackend
    from superinfer.daemon.config import resolve
    from superinfer.daemon.params import ParamStore
    from superinfer.daemon.server import Daemon
    from tests.daemon.conftest import TEST_PROFILE

    (tmp_path / "p.toml").write_text(TEST_PROFILE)
    cfg = resolve(None, profile_file=str(tmp_path / "p.toml"), flags={"state_dir": str(tmp_path / "state")},
                  env={"XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_STATE_HOME": str(tmp_path / "s")})
    d = Daemon(cfg, SimBackend(cfg))
    d.store = ParamStore(cfg.params(), 256, cfg.tenants, tmp_path / "params.json", "test")
    app = build_app(d)

    async def get(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get(path)

    r = asyncio.run(get("/healthz"))
    assert r.status_code == 503 and r.json()["status"] == "starting" and "error" not in r.json()
    d.failure = "vLLM exited with 1 while loading /m: ValueError: No common block size for 16"
    r = asyncio.run(get("/healthz"))
    assert r.status_code == 503 and r.json() == {**r.json(), "status": "failed", "error": d.failure}
    s = asyncio.run(get("/v1/state")).json()
    assert s["status"] == "failed" and s["error"] == d.failure


def test_a_kv_size_is_suggested_only_where_host_memory_holds_it() -> None:
    """A KV cache too small for one sequence on a host that cannot hold a larger one: the advice is a shorter
    max_model_len (or none), never a KV size that would then not fit (found by the property above: 0.25 GiB
    suggested for 2 ranks with 0.498 GiB of room)."""
    tiny_kv = 64 * 1024 / GIB  # holds fewer tokens than one max_model_len sequence
    for world in (1, 2):
        room_gib = 0.2 * world  # less than the smallest suggestion (0.25 GiB) per rank
        host = cpu_host(avail_gib=room_gib + 1.5 * world + 2 / 1024, total_gib=64.0)  # weights 2 MiB, 1.5 GiB a rank
        found = [p for p in problems(host, TINY, world, kv_cache_gib=tiny_kv) if "max_model_len sequence" in p.message]
        assert found and all("engine.kv_cache_gib = " not in p.message for p in found), found
