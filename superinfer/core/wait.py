"""The wait a request arriving now would have for its first token, predicted from measurements only.

Little's law at the queue: the requests now waiting for a first token (the new one included) divided by the
rate at which waiting requests have been getting their first token. That rate is measured over the last
``first_tokens`` first tokens and counts **busy time** only (time with at least one request waiting), so a
quiet spell does not pass for a slow engine: it is the engine's first-token service rate under load,
whatever the policy and the request sizes. Counting the last N first tokens (not the last N seconds) lets
it follow a slow engine and a fast one alike: when a queue builds, the rate falls to the service rate
within N first tokens. Evidence older than ``max_age_s`` is forgotten; with fewer than ``first_tokens``
first tokens to go on there is no prediction.

It serves shedding at admission in the twin (:class:`superinfer.sim.engine.Simulator`) and at the daemon's
door (:mod:`superinfer.daemon.admission`): one predictor, so what the twin measures is what the daemon does.
Thread-safe: the daemon's ``sim`` backend observes from its engine thread while its door reads.
"""

from __future__ import annotations

import threading
from collections import deque


class WaitPredictor:
    """The first-token service rate under load, and the wait it predicts (module docstring).

    Invariant: ``_busy_s`` and ``_firsts`` are the sums of the ``(t, busy_s, firsts)`` spans in ``_spans``,
    the shortest run of latest spans that holds ``first_tokens`` first tokens (all of them while fewer),
    none older than ``max_age_s`` before the latest observation."""

    def __init__(self, first_tokens: int = 16, max_age_s: float = 300.0) -> None:
        if first_tokens < 1 or not max_age_s > 0:
            raise ValueError(f"first_tokens must be >= 1 and max_age_s > 0, got {first_tokens!r}, {max_age_s!r}")
        self.first_tokens, self.max_age_s = first_tokens, max_age_s
        self._lock = threading.Lock()
        self._spans: deque[tuple[float, float, int]] = deque()
        self._busy_s, self._firsts = 0.0, 0
        self._t: float | None = None
        self.waiting = 0

    def observe(self, now: float, waiting: int, first_tokens: int = 0) -> None:
        """At ``now``: ``first_tokens`` requests got their first token since the last call, and ``waiting``
        are waiting for one now."""
        with self._lock:
            busy = (now - self._t) if self._t is not None and self.waiting > 0 and now > self._t else 0.0
            if busy > 0 or first_tokens:
                self._spans.append((now, busy, first_tokens))
                self._busy_s += busy
                self._firsts += first_tokens
            while self._spans and (self._spans[0][0] < now - self.max_age_s
                                   or self._firsts - self._spans[0][2] >= self.first_tokens):
                _, b, f = self._spans.popleft()
                self._busy_s -= b
                self._firsts -= f
            self._t, self.waiting = now, max(0, waiting)

    def rate(self) -> float | None:
        """First tokens per second of busy time over the last ``first_tokens`` of them; None with fewer."""
        with self._lock:
            if self._firsts < self.first_tokens or self._busy_s <= 0:
                return None
            return self._firsts / self._busy_s

    def predicted_wait_s(self) -> float | None:
        """How long a request arriving now would wait for its first token: (waiting + 1) / rate."""
        r = self.rate()
        return None if r is None else (self.waiting + 1) / r

    def refuse(self, deadline_s: float) -> bool:
        """Whether a request with this first-token deadline should be shed at admission."""
        wait = self.predicted_wait_s()
        return wait is not None and wait > deadline_s
