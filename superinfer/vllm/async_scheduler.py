"""``RotaAsyncScheduler``: the RotaSched plugin under vLLM's asynchronous scheduling (vLLM's default on GPUs).

With async scheduling vLLM's engine schedules step n+1 while the device runs step n
(``EngineCore.step_with_batch_queue``), so the scheduler's host work hides under the device's instead of
following it (docs/costmodel.md, "Host work"). vLLM's ``AsyncScheduler`` advances ``num_computed_tokens`` when
it schedules and counts each token still being sampled in ``num_output_placeholders``. The plugin asks for
nothing else of the mode; this class is :class:`~superinfer.vllm.scheduler.RotaScheduler` over
``AsyncScheduler``, and ``--scheduler-cls superinfer.vllm.RotaScheduler`` gives it when async scheduling is
on. What keeps it right (docs/vllm-plugin.md, "Async scheduling"):

* **Parks and eager syncs copy only settled KV**: :func:`superinfer.vllm.mirror.safe_computed` leaves out the
  tokens of steps in flight, so a victim parked while its step n runs resumes one token (with speculative
  decoding, its drafts) short and recomputes it; its KV copy never claims a position nothing has written
  yet or a rejected draft wrote.
* **A victim's device blocks are not reused under a step still writing them**: with a connector that loads
  KV (``kv_both``) vLLM defers returning them to the pool until the step that last scheduled the victim has
  been processed (``Scheduler.defer_block_free``). The plan reads the pool's free count, which leaves them
  out until then, so an admission that counted on them waits a step (``admissions_refused`` counts it).
* **The tokens a step in flight samples count as tokens** in the plan's table
  (:func:`superinfer.vllm.mirror.refresh_running`), so a decode in flight is one token to go, as in
  synchronous mode. Its output, delivered after a park, is the client's token and counts as one.
* **Step times** are paired with their outputs by the scheduler output, each timed from the later of its
  schedule and the previous output (:mod:`superinfer.vllm.stepfit`).
* The DuplexKV worker still waits on the host for a park's copy before the step that reuses the victims'
  blocks is launched (its device-to-host copy is ordered after the device's queued work): a step that parks
  gives up that one overlap; other steps keep theirs.
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler

from superinfer.vllm.scheduler import RotaScheduler


class RotaAsyncScheduler(RotaScheduler, AsyncScheduler):
    """:class:`RotaScheduler` over vLLM's ``AsyncScheduler`` (module docstring); load it through
    ``superinfer.vllm.RotaScheduler``, which picks it when vLLM schedules asynchronously."""
