"""``[load]``: traffic the daemon sends itself, through its own OpenAI endpoint, for demos of a real engine.

The twin replays a workload inside the engine (``[sim]``); a real engine only serves what arrives over
HTTP, so a demo host with no clients would show nothing. With ``load.rps > 0`` the daemon runs this
client against its own ``/v1/completions`` on loopback: Poisson arrivals, streamed completions of
prompts drawn from a small word list, output lengths uniform in [``max_tokens``/4, ``max_tokens``]
(``ignore_eos``, so the lengths hold), tenants by their ``share``. Everything it sends is served, timed
and counted like any client's request (it *is* a client's request).

Invariants: at most ``load.max_inflight`` of its requests are open at once (arrivals beyond that are
skipped and counted, so an overloaded engine is not buried deeper); it stops sending when the daemon
drains; it never raises into the serving loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

log = logging.getLogger("superinfer.daemon")

WORDS = ("the quick brown fox jumps over the lazy dog a scheduler decides which request runs next when memory "
         "runs out the engine parks its cache latency objectives for the first token and between tokens blocks "
         "are copied from device to host and back while the model computes").split()


class SelfLoad:
    """One client loop; :meth:`run` until cancelled."""

    def __init__(self, url: str, model: str, tenants: list[tuple[str, float]], *, rps: float, prompt_words: int,
                 max_tokens: int, max_inflight: int, seed: int) -> None:
        if rps <= 0:
            raise ValueError(f"load.rps: expected > 0, got {rps}")
        self.url, self.model, self.rps = url, model, rps
        self.names = [n for n, s in tenants if s > 0]
        self.weights = [s for _, s in tenants if s > 0]
        self.prompt_words, self.max_tokens, self.max_inflight = prompt_words, max_tokens, max_inflight
        self.rng = random.Random(seed)
        self.counts = {"sent": 0, "completed": 0, "refused": 0, "errors": 0, "skipped": 0}
        self._open: set[asyncio.Task] = set()

    def body(self) -> dict[str, Any]:
        n = self.rng.randint(max(1, self.prompt_words // 2), self.prompt_words)
        return {"model": self.model, "prompt": " ".join(self.rng.choice(WORDS) for _ in range(n)),
                "max_tokens": self.rng.randint(max(1, self.max_tokens // 4), self.max_tokens), "stream": True,
                "temperature": 1.0, "ignore_eos": True,
                "vllm_xargs": {"tenant": self.rng.choices(self.names, self.weights)[0]}}

    async def run(self, admitting: Any) -> None:
        """Send until ``admitting()`` is false, then wait for the open requests; cancelled: drop them."""
        import httpx

        async with httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(None, connect=10.0)) as client:
            try:
                while True:
                    await asyncio.sleep(self.rng.expovariate(self.rps))
                    if not admitting():
                        break
                    if len(self._open) >= self.max_inflight:
                        self.counts["skipped"] += 1
                        continue
                    task = asyncio.create_task(self._one(client, self.body()))
                    self._open.add(task)
                    task.add_done_callback(self._open.discard)
                await asyncio.gather(*self._open, return_exceptions=True)  # the drain lets them finish
            finally:
                for task in list(self._open):
                    task.cancel()

    async def _one(self, client: Any, body: dict[str, Any]) -> None:
        import httpx

        self.counts["sent"] += 1
        try:
            async with client.stream("POST", "/v1/completions", json=body) as r:
                async for _ in r.aiter_lines():
                    pass
                key = "completed" if r.status_code == 200 else "refused" if r.status_code in (429, 503) else "errors"
                self.counts[key] += 1
        except httpx.HTTPError as exc:
            self.counts["errors"] += 1
            if self.counts["errors"] <= 3:
                log.warning("load: request failed: %s: %s", type(exc).__name__, exc)
