"""A fleet learns together: the live trials of daemons sharing one storage, one Optuna study per phase.

Every finished trial (accept, reject, rollback) is published (:meth:`Fleet.publish`) as a trial of the
study ``superinfer-fleet/<model>/<phase>`` (``phase``: the traffic phase the arms file names, else
:data:`UNNAMED`): the candidate's knob values (distributions from the tuner's ``TUNABLE_BOUNDS``), its
measured attainment as the value (a rollback: a failed trial, no value), and ``host``, ``verdict``,
``arm``, ``gain`` and the incumbent's attainment as user attributes. :meth:`Fleet.best` returns, for a
phase, the best *accepted* setting another host published: the chooser offers it as the ``fleet`` arm
(``superinfer.tuner.chooser``), so a phase one host explored warm-starts the others.

Clock-agnostic and off the serving path: :meth:`publish` and :meth:`best` only touch memory (a bounded
outbox, a cache); all storage I/O happens in :meth:`sync`, which the caller runs where blocking is
harmless (the daemon: :class:`FleetThread`, a background thread; the twin and the tests: inline, in
virtual time). :meth:`sync` never raises: a storage that fails is reported once (``fleet storage
unreachable: ...; tuning locally, retrying in N s``), retried with exponential backoff
(``retry_s`` doubling up to ``max_retry_s``), and the tuner goes on tuning locally meanwhile. The URL's
password is never shown: :func:`redact` is applied to everything reported.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from superinfer.tuner.space import TUNABLE_BOUNDS, TUNABLE_INTEGER

PREFIX = "superinfer-fleet"
UNNAMED = "unnamed"  # the key of traffic the arms file names no phase for
SCHEMES = ("sqlite:///", "postgresql://", "postgres://", "journal:")
log = logging.getLogger("superinfer.tuner.fleet")
_PASSWORD = (re.compile(r"(://[^/@:\s]*:)[^@\s]*@"), re.compile(r"(password=)[^&\s]*", re.IGNORECASE))


def redact(text: str) -> str:
    """``text`` with the password of any URL (``user:***@``, ``password=***``) hidden."""
    for pat in _PASSWORD:
        text = pat.sub(r"\1***@" if pat is _PASSWORD[0] else r"\1***", text)
    return text


def check_storage(spec: str) -> str:
    """``spec`` if it is a storage the tuner accepts (empty, ``memory``, ``sqlite:///PATH``,
    ``postgresql://...``, ``journal:PATH``); raises ``ValueError`` (password redacted) otherwise."""
    if spec in ("", "memory") or (spec.startswith(SCHEMES) and len(spec) > len("journal:")):
        return spec
    raise ValueError(f"unknown storage {redact(spec)!r}: expected sqlite:///PATH, postgresql://user@host/db, "
                     "journal:PATH, memory, or empty")


def is_shared(spec: str) -> bool:
    """Whether ``spec`` names a storage the fleet publishes to (anything but empty and ``memory``)."""
    return spec not in ("", "memory")


def phase_key(phase: str | None) -> str:
    return phase or UNNAMED


def open_storage(spec: str, timeout_s: float = 5.0) -> Any:
    """An Optuna storage for ``spec`` whose connects and statements give up after ``timeout_s``."""
    import optuna

    if spec.startswith("journal:"):
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(spec[len("journal:"):]))
    if spec.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + spec.split("://", 1)[1]
        args = {"connect_timeout": max(1, int(timeout_s)), "options": f"-c statement_timeout={int(timeout_s * 1000)}"}
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True, "connect_args": args})
    return optuna.storages.RDBStorage(spec, engine_kwargs={"connect_args": {"timeout": timeout_s}})


@dataclass(frozen=True)
class FleetBest:
    """The best accepted setting of a phase another host published: its knobs, attainment, host, and how
    many trials of the phase the fleet holds."""

    params: dict[str, float]
    value: float
    host: str
    trials: int


class Fleet:
    """One host's link to the fleet's studies (see the module docstring). ``host``: this host's id (its
    own trials are never offered back to it); ``opener``: ``spec -> storage`` (tests inject failures)."""

    def __init__(self, storage: str, model: str, host: str, *, retry_s: float = 5.0, max_retry_s: float = 300.0,
                 refresh_s: float = 5.0, timeout_s: float = 5.0, max_outbox: int = 1000,
                 opener: Callable[[str], Any] | None = None) -> None:
        if not is_shared(check_storage(storage)):
            raise ValueError(f"fleet storage: expected a database, got {storage!r}")
        if not 0 < retry_s <= max_retry_s:
            raise ValueError(f"fleet retry: expected 0 < retry_s <= max_retry_s, got {retry_s}, {max_retry_s}")
        self.spec, self.model, self.host = storage, model, host
        self.url = redact(storage)
        self.retry_s, self.max_retry_s, self.refresh_s, self.timeout_s = retry_s, max_retry_s, refresh_s, timeout_s
        self._opener = opener or (lambda s: open_storage(s, timeout_s))
        self._lock = threading.Lock()
        self._outbox: deque[tuple[str, Any]] = deque(maxlen=max_outbox)
        self._best: dict[str, FleetBest] = {}
        self._seen: set[tuple[str, int]] = set()
        self._storage: Any = None
        self._studies: dict[str, Any] = {}
        self.connected: bool | None = None  # None: not tried yet
        self.last_error: str | None = None
        self.published = self.imported = self.dropped = 0
        self._delay, self._next_try, self._next_refresh = retry_s, float("-inf"), float("-inf")

    def study_name(self, phase: str) -> str:
        return f"{PREFIX}/{self.model}/{phase}"

    # ---- the tuner's side: memory only, never blocks on the storage ---------------------------------
    def publish(self, phase: str, setting: Mapping[str, float], verdict: str, value: float | None,
                incumbent: float | None, gain: float | None, arm: str) -> None:
        """Queue one finished trial of ``phase`` (``value`` None: a failed trial, e.g. a rollback)."""
        try:
            import optuna

            params = {k: (int(round(v)) if k in TUNABLE_INTEGER else float(v)) for k, v in setting.items()
                      if k in TUNABLE_BOUNDS}
            dists = {k: optuna.distributions.IntDistribution(int(TUNABLE_BOUNDS[k][0]), int(TUNABLE_BOUNDS[k][1]))
                     if k in TUNABLE_INTEGER else optuna.distributions.FloatDistribution(*map(float, TUNABLE_BOUNDS[k]))
                     for k in params}
            attrs = {"host": self.host, "verdict": verdict, "arm": arm, "gain": gain, "incumbent_value": incumbent}
            state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
            trial = optuna.trial.create_trial(params=params, distributions=dists, value=value, state=state,
                                              user_attrs=attrs)
        except Exception as exc:  # noqa: BLE001 - a record that cannot be built is dropped, never raised
            log.warning("fleet: cannot record a %s trial of phase %s: %s", verdict, phase, exc)
            return
        with self._lock:
            if len(self._outbox) == self._outbox.maxlen:
                self.dropped += 1  # the oldest is pushed out while the storage is down
            self._outbox.append((phase, trial))

    def best(self, phase: str) -> FleetBest | None:
        """The best accepted setting another host published for ``phase``, as of the last refresh."""
        with self._lock:
            return self._best.get(phase)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"storage": self.url, "host": self.host, "connected": self.connected,
                    "last_error": self.last_error, "published": self.published, "imported": self.imported,
                    "pending": len(self._outbox), "dropped": self.dropped, "retry_s": round(self._delay, 3),
                    "phases": {p: {"params": b.params, "value": round(b.value, 4), "host": b.host, "trials": b.trials}
                               for p, b in sorted(self._best.items())}}

    # ---- the I/O side: the caller's thread, its clock ----------------------------------------------
    def sync(self, now: float) -> bool:
        """Publish what is queued and, every ``refresh_s``, re-read every phase's best; True when the
        storage answered. Never raises; while failing, does nothing before the backoff's next try."""
        if now < self._next_try:
            return False
        try:
            if self._storage is None:
                self._storage = self._opener(self.spec)
            self._flush()
            if now >= self._next_refresh:
                self._refresh()
                self._next_refresh = now + self.refresh_s
        except Exception as exc:  # noqa: BLE001 - any storage failure: tune locally, retry later
            self._failed(now, exc)
            return False
        if self.connected is False:
            log.info("fleet storage %s reachable again: sharing trials", self.url)
        with self._lock:
            self.connected, self.last_error, self._delay = True, None, self.retry_s
        return True

    def _failed(self, now: float, exc: BaseException) -> None:
        msg = redact(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")[:300]
        pw = re.search(r"://[^/@:\s]*:([^@\s]+)@", self.spec)
        if pw:
            msg = msg.replace(pw.group(1), "***")
        if self.connected is not False:
            log.warning("fleet storage unreachable: %s (%s); tuning locally, retrying in %g s", self.url, msg,
                        self._delay)
        else:
            log.debug("fleet storage still unreachable: %s; retrying in %g s", msg, self._delay)
        self._close()
        with self._lock:
            self.connected, self.last_error = False, msg
            self._next_try = now + self._delay
            self._delay = min(self.max_retry_s, self._delay * 2)

    def _close(self) -> None:
        engine = getattr(self._storage, "engine", None)
        if engine is not None:
            try:
                engine.dispose()
            except Exception:  # noqa: BLE001 - closing a broken pool may fail too
                pass
        self._storage, self._studies = None, {}

    def _study(self, phase: str) -> Any:
        if phase not in self._studies:
            import optuna

            self._studies[phase] = optuna.create_study(storage=self._storage, study_name=self.study_name(phase),
                                                       direction="maximize", load_if_exists=True)
        return self._studies[phase]

    def _flush(self) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    return
                phase, trial = self._outbox[0]
            self._study(phase).add_trial(trial)
            with self._lock:
                if self._outbox and self._outbox[0][1] is trial:
                    self._outbox.popleft()
                self.published += 1

    def _refresh(self) -> None:
        import optuna

        prefix = f"{PREFIX}/{self.model}/"
        best: dict[str, FleetBest] = {}
        new = 0
        for s in self._storage.get_all_studies():
            if not s.study_name.startswith(prefix):
                continue
            phase = s.study_name[len(prefix):]
            trials = self._storage.get_all_trials(s._study_id, deepcopy=False,
                                                  states=(optuna.trial.TrialState.COMPLETE,))
            top = None
            for t in trials:
                host = t.user_attrs.get("host")
                if host == self.host:
                    continue
                if (phase, t._trial_id) not in self._seen:
                    self._seen.add((phase, t._trial_id))
                    new += 1
                if t.user_attrs.get("verdict") == "accept" and t.value is not None and (top is None or t.value > top.value):
                    top = t
            if top is not None:
                best[phase] = FleetBest({k: float(v) for k, v in top.params.items()}, float(top.value),
                                        str(top.user_attrs.get("host")), len(trials))
        with self._lock:
            self._best, self.imported = best, self.imported + new


class FleetThread:
    """Runs :meth:`Fleet.sync` every ``period_s`` on ``clock`` in a daemon thread (the daemon's side)."""

    def __init__(self, fleet: Fleet, clock: Callable[[], float], period_s: float = 1.0) -> None:
        self.fleet, self.clock, self.period_s = fleet, clock, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="superinfer-fleet", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.fleet.sync(self.clock())
            self._stop.wait(self.period_s)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Ask the thread to stop; waits at most ``timeout_s`` (a storage call in flight is abandoned)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.info("fleet: a storage call is still in flight at shutdown; not waiting for it")
