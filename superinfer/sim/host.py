"""The twin's host terms: time an engine spends outside its calibrated step (docs/fidelity.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from superinfer.sim.costmodel import StepPrice


@dataclass(frozen=True)
class HostCosts:
    """Host-side time an engine spends outside the calibrated step (each a measured term of the twin;
    ``superinferd bench fidelity`` measures them on a real engine, docs/fidelity.md):

    * ``step_s``: added to every iteration (e.g. the vLLM plugin's table refresh and KV connector hooks,
      beyond the stock scheduler that a calibration already includes);
    * ``plan_s`` + ``plan_per_live_s`` x live requests: added to an iteration that plans (the plugin skips
      the plan where :func:`superinfer.core.nothing_to_plan` holds or the policy's ``only_serves_batch``
      does, and so does this term);
    * ``arrival_s``: per arriving request, serial with the engine loop (input processing between steps);
    * ``new_shape_s``: added to an iteration whose batch size in tokens the engine has not run before (on
      CPU, kernels are set up per shape: a prompt length never seen costs more than the warm fit says), or
      not among the ``shape_capacity`` sizes it ran last (a count, not a time; 0: it keeps every size): the
      set-up is cached, and the least recently run sizes are evicted;
    * ``output_s`` + ``output_per_seq_s`` x scheduled sequences: added to every iteration (the engine's
      output processing after the scheduler's step: detokenising, request outputs, the serving loop);
    * ``waiting_s``: added to an iteration after whose admissions requests still wait (stock vLLM tries the
      head of its waiting queue every step and fails; the plugin checks whether the step only serves its
      batch);
    * ``wake_idle_s`` / ``wake_extra_s``: the first iteration after the engine sat idle (nothing live) costs
      more, the longer the idle time (on CPU: caches and the core go cold); measured points, interpolated
      in log idle time, flat beyond the last point, nothing below the first;
    * ``host_kv``: the KV connector's own time, serial with the step (on CPU the copies are host work): a
      step that parks victims ``park_call_s`` + ``park_block_s`` x their unsynced blocks, each request it
      loads ``load_s`` + ``load_block_s`` x the blocks loaded, a step with eager syncs ``sync_call_s`` +
      ``sync_block_s`` x the blocks. Measured from the plugin's worker (:mod:`superinfer.vllm.kvworker`).
      Only operations that copy blocks cost (as measured). Where any is set (:attr:`prices_kv`) they
      *replace* the cost model's copy pricing for the step;
    * ``resume_s``: per request a step starts swapping in (resumes), beyond the connector's load: on the
      vLLM plugin, the engine's own work to bring a preempted request back (``host_resume``, measured on the
      plugin's steps, :mod:`superinfer.bench.fidelity.steps`).
    """

    step_s: float = 0.0
    plan_s: float = 0.0
    arrival_s: float = 0.0
    new_shape_s: float = 0.0
    plan_per_live_s: float = 0.0
    output_s: float = 0.0
    output_per_seq_s: float = 0.0
    waiting_s: float = 0.0
    wake_idle_s: tuple[float, ...] = ()
    wake_extra_s: tuple[float, ...] = ()
    park_call_s: float = 0.0
    park_block_s: float = 0.0
    load_s: float = 0.0
    load_block_s: float = 0.0
    sync_call_s: float = 0.0
    sync_block_s: float = 0.0
    shape_capacity: float = 0
    resume_s: float = 0.0

    def __post_init__(self) -> None:
        try:
            idle, extra = tuple(self.wake_idle_s), tuple(self.wake_extra_s)
        except TypeError:
            raise ValueError("host costs: wake_idle_s and wake_extra_s must be sequences of seconds, got "
                             f"{self.wake_idle_s!r}, {self.wake_extra_s!r}") from None
        if len(idle) != len(extra) or any(not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)
                                          for v in idle + extra) or any(b <= a for a, b in zip(idle, idle[1:])) \
                or (idle and idle[0] <= 0):
            raise ValueError("host costs: wake_idle_s and wake_extra_s must be as many finite times >= 0, "
                             f"wake_idle_s > 0 and increasing; got {idle!r}, {extra!r}")
        object.__setattr__(self, "wake_idle_s", idle)  # frozen: normalise lists to tuples
        object.__setattr__(self, "wake_extra_s", extra)
        for name in self.__dataclass_fields__:
            if name.startswith("wake_"):
                continue
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"host costs: {name} must be a finite number >= 0 (seconds), got {v!r}")
        if not float(self.shape_capacity).is_integer():
            raise ValueError(f"host costs: shape_capacity must be a whole number of sizes, got {self.shape_capacity!r}")

    @property
    def prices_kv(self) -> bool:
        """Whether the measured connector lines price this twin's copies (``host_kv``)."""
        return any(v > 0 for v in (self.park_call_s, self.park_block_s, self.load_s, self.load_block_s,
                                   self.sync_call_s, self.sync_block_s))

    def kv_s(self, park_blocks: np.ndarray, load_blocks: np.ndarray, sync_blocks: int) -> float:
        """The connector's time in one step that parks victims with ``park_blocks`` unsynced blocks each,
        loads requests ``load_blocks`` blocks each, and syncs ``sync_blocks`` blocks (``host_kv``)."""
        t = 0.0
        parked = int(park_blocks.sum())
        if parked > 0:
            t += self.park_call_s + self.park_block_s * parked
        loads = load_blocks[load_blocks > 0]
        if loads.shape[0]:
            t += self.load_s * loads.shape[0] + self.load_block_s * float(loads.sum())
        if sync_blocks > 0:
            t += self.sync_call_s + self.sync_block_s * sync_blocks
        return t

    def wall_s(self, price: StepPrice, park_blocks: np.ndarray, load_blocks: np.ndarray, sync_blocks: int) -> float:
        """An iteration's compute and copies: the cost model's ``price``, or where the connector's lines are
        measured (:attr:`prices_kv`) the compute plus the connector's time (:meth:`kv_s`), serial with it."""
        if not self.prices_kv:
            return price.step_s
        wall = price.compute_s + self.kv_s(park_blocks, load_blocks, sync_blocks)
        return wall if wall > 0 else price.step_s

    def wake_s(self, idle_s: float) -> float:
        """The extra time of the first iteration after ``idle_s`` seconds with nothing live."""
        if not self.wake_idle_s or idle_s < self.wake_idle_s[0]:
            return 0.0
        return float(np.interp(math.log(idle_s), np.log(self.wake_idle_s), self.wake_extra_s))
