"""Per-step cost of the scheduler inside a real CPU engine: ``schedule()`` and ``update_from_output()`` timed
around one ``superinferd bench vllm`` run of one policy (stock vLLM's ``Scheduler`` for ``vllm``, else
``RotaScheduler``), optionally with ``RotaScheduler.schedule`` under cProfile. docs/measurements.md, 2026-12-05.

    .venv/bin/python bench/plugin_step_cost.py --policy lvf --rps 3.5 [--profile] [-- extra bench vllm flags]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="lvf")
    ap.add_argument("--rps", default="3.5")
    ap.add_argument("--profile", action="store_true", help="cProfile RotaScheduler.schedule (slows it ~2x)")
    ap.add_argument("--model-dir", default="/tmp/rc/tinym", help="where the tiny Llama is built")
    ap.add_argument("--json", default="/tmp/plugin_step_cost.json")
    ap.add_argument("extra", nargs="*", help="more bench vllm flags, after --")
    a = ap.parse_args()
    from vllm.v1.core.sched.scheduler import Scheduler

    from superinfer.cli import main as cli
    from superinfer.vllm.scheduler import RotaScheduler

    cls = Scheduler if a.policy == "vllm" else RotaScheduler
    prof = cProfile.Profile() if a.profile and cls is RotaScheduler else None
    acc = {"schedule": 0.0, "update": 0.0, "steps": 0}
    schedule, update = cls.schedule, cls.update_from_output

    def timed_schedule(self, *args, **kwargs):
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        try:
            return schedule(self, *args, **kwargs)
        finally:
            if prof is not None:
                prof.disable()
            acc["schedule"] += time.perf_counter() - t
            acc["steps"] += 1

    def timed_update(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return update(self, *args, **kwargs)
        finally:
            acc["update"] += time.perf_counter() - t

    cls.schedule, cls.update_from_output = timed_schedule, timed_update
    try:
        cli(["bench", "vllm", "--build-tiny", a.model_dir, "--workload", "reasoning", "--rps", a.rps,
             "--duration", "30", "--drain", "60", "--policies", a.policy, "--seeds", "1", "--num-blocks", "64",
             "--max-model-len", "1024", "--ttft-slo", "0.5", "--tbt-slo", "0.01", "--json", a.json, *a.extra],
            standalone_mode=False)
    finally:
        n = max(1, acc["steps"])
        print(f"{a.policy}: {acc['steps']} steps, schedule {acc['schedule'] * 1e3 / n:.3f} ms/step, "
              f"update_from_output {acc['update'] * 1e3 / n:.3f} ms/step", file=sys.stderr)
        if prof is not None:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(35)
            print(out.getvalue(), file=sys.stderr)


if __name__ == "__main__":
    main()
