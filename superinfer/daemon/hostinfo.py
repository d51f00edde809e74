"""What a host has, read without touching a GPU: host memory as vLLM computes it, GPU memory from NVML.

Host memory: on CPU, vLLM's worker reads NUMA node 0 (free + file cache + reclaimable slab,
``vllm/utils/cpu_resource_utils.py``), clamped to the cgroup's limit; on a GPU host the pool competes
with everything on the machine, so ``/proc/meminfo``'s ``MemAvailable``, clamped the same way. The
cgroup is this process's own (``/proc/self/cgroup``), so a systemd ``MemoryMax=`` counts. GPU memory:
``nvidia-smi`` (NVML), never ``torch.cuda``, which would give the daemon a CUDA context (hundreds of MiB
of HBM) on every GPU for its whole life.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

NODE0 = "/sys/devices/system/node/node0/meminfo"


def _meminfo(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.replace("Node 0 ", "").split()
                if len(parts) >= 2 and parts[1].isdigit():
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def _cgroup_dirs() -> list[Path]:
    """This process's cgroup v2 directory and its ancestors (innermost first), else the v1 memory root."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("0::"):
            rel = Path(line[3:].strip() or "/")
            dirs = [Path("/sys/fs/cgroup") / p.relative_to("/") for p in (rel, *rel.parents)]
            return [d for d in dirs if d.exists()]
    return [Path("/sys/fs/cgroup/memory")]


def cgroup_limit() -> tuple[int | None, int]:
    """(the tightest memory limit on this process's cgroups, that cgroup's usage); (None, 0): none."""
    best: tuple[int | None, int] = (None, 0)
    for d in _cgroup_dirs():
        for limit_f, usage_f in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
            try:
                text = (d / limit_f).read_text().strip()
            except OSError:
                continue
            if not text.isdigit() or int(text) >= 1 << 60:
                continue
            try:
                usage = int((d / usage_f).read_text().strip())
            except (OSError, ValueError):
                usage = 0
            if best[0] is None or int(text) - usage < best[0] - best[1]:
                best = (int(text), usage)
    return best


def host_memory(device: str = "cpu") -> tuple[int, int]:
    """(total, available) bytes of host memory for an engine on ``device`` (see the module docstring)."""
    node = _meminfo(NODE0) if device == "cpu" else {}
    if {"MemTotal", "MemFree", "Active(file)", "Inactive(file)", "SReclaimable"} <= set(node):
        total = node["MemTotal"]
        avail = node["MemFree"] + node["Active(file)"] + node["Inactive(file)"] + node["SReclaimable"]
    else:
        mem = _meminfo("/proc/meminfo")
        total, avail = mem.get("MemTotal", 0), mem.get("MemAvailable", mem.get("MemFree", 0))
    limit, usage = cgroup_limit()
    if limit is not None and limit < total:
        total, avail = limit, min(avail, max(0, limit - usage))
    return total, avail


def gpu_memory() -> tuple[tuple[int, int], ...]:
    """(free, total) bytes of every GPU this process may use (``CUDA_VISIBLE_DEVICES`` honoured by
    nvidia-smi's ``--id``); empty when nvidia-smi is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    cmd = [smi, "--query-gpu=memory.free,memory.total", "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        cmd.append(f"--id={visible}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    mib = 1 << 20
    rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
    try:
        return tuple((int(float(f)) * mib, int(float(t)) * mib) for f, t in rows)
    except ValueError:
        return ()
