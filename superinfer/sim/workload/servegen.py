"""ServeGen production traffic, per client (``--workload servegen:DIR``).

The files (``../shared/data/servegen/README.md``; Alibaba ServeGen, arXiv 2505.09999, Apache-2.0) hold, per
client ``i``, ``chunk-i-trace.csv`` (one 600 s window per line: ``start_s, rate, cv, pattern, shape,
scale``) and ``chunk-i-dataset.json`` (per dataset window, PMFs of input and output tokens written as
Python-literal dicts). A workload is made as ServeGen makes it: per client and window, inter-arrival
times from the window's fitted distribution and lengths from the PMFs of the latest dataset window at or
before it; the service's traffic is the sum over clients.

Choices (stated, not ServeGen's code): the fitted ``shape`` is kept (it sets the burstiness, cv) and the
scale is set so the mean inter-arrival is ``1 / rate`` (the files' scales are fits to unscaled gaps and
do not match the windows' rates); each window's process restarts at the window's start; ``rps``
rescales every client's rate by one factor, so shares and cv stay the data's. PMF strings are parsed with
:func:`ast.literal_eval`, never ``eval``. Bad files raise :class:`WorkloadError` naming file, line or window.
"""

from __future__ import annotations

import ast
import csv
import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from superinfer.sim.workload.spec import Workload, WorkloadError

WINDOW_S = 600.0
PATTERNS = ("Gamma", "Weibull")
_TRACE = re.compile(r"^chunk-(\d+)-trace\.csv$")


@dataclass(frozen=True)
class Pmf:
    values: np.ndarray  # int64, ascending
    probs: np.ndarray  # sums to 1

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.values[rng.choice(self.values.size, size=n, p=self.probs)]

    def mean(self) -> float:
        return float(self.values @ self.probs)


@dataclass(frozen=True)
class Window:
    start_s: float
    rate: float
    pattern: str  # "" (no traffic), Gamma or Weibull
    shape: float


@dataclass(frozen=True)
class Client:
    name: str
    windows: tuple[Window, ...]
    datasets: tuple[tuple[float, Pmf | None, Pmf | None], ...]  # (start_s, input, output), ascending

    def lengths_at(self, t: float) -> tuple[Pmf, Pmf] | None:
        """The PMFs of the latest dataset window at or before ``t`` that has data (None: none has)."""
        best = None
        for start, pin, pout in self.datasets:
            if start <= t and pin is not None and pout is not None:
                best = (pin, pout)
        return best


def parse_pmf(text: object, where: str) -> Pmf | None:
    """A PMF string ``"{value: probability, ...}"`` of integer token counts, probabilities renormalised;
    None for ``"{}"`` (a window in which the client sent nothing)."""
    if not isinstance(text, str):
        raise WorkloadError(f"{where}: expected a PMF string, got {type(text).__name__}")
    try:
        pmf = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise WorkloadError(f"{where}: not a Python-literal dict ({type(exc).__name__})") from None
    if not isinstance(pmf, dict):
        raise WorkloadError(f"{where}: expected a dict value -> probability")
    if not pmf:
        return None
    values, probs = [], []
    for k, p in pmf.items():
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 1 or k != int(k):
            raise WorkloadError(f"{where}: token count {k!r} is not an integer >= 1")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            raise WorkloadError(f"{where}: probability of {k} is {p!r}, expected a number >= 0")
        values.append(int(k))
        probs.append(float(p))
    total = sum(probs)
    if total <= 0:
        raise WorkloadError(f"{where}: probabilities sum to 0")
    order = np.argsort(values)
    return Pmf(np.asarray(values, dtype=np.int64)[order], np.asarray(probs)[order] / total)


def _read_trace(path: Path) -> tuple[Window, ...]:
    windows = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.reader(f), start=1):
            where = f"{path}:{i}"
            if not row or not "".join(row).strip():
                continue
            if len(row) != 6:
                raise WorkloadError(f"{where}: expected 6 fields (start_s, rate, cv, pattern, shape, scale), got {len(row)}")
            try:
                start, rate, shape = float(row[0]), float(row[1]), float(row[4] or 0)
            except ValueError:
                raise WorkloadError(f"{where}: start_s, rate and shape must be numbers: {row}") from None
            pattern = row[3].strip()
            if not (math.isfinite(start) and math.isfinite(rate) and rate >= 0):
                raise WorkloadError(f"{where}: rate {row[1]!r}: expected a number >= 0")
            if rate > 0 and (pattern not in PATTERNS or not (math.isfinite(shape) and shape > 0)):
                raise WorkloadError(f"{where}: a window with traffic needs a pattern in {PATTERNS} and a shape > 0, "
                                    f"got {pattern!r}, {row[4]!r}")
            windows.append(Window(start, rate, pattern if rate > 0 else "", shape))
    return tuple(sorted(windows, key=lambda w: w.start_s))


def _read_dataset(path: Path) -> tuple[tuple[float, Pmf | None, Pmf | None], ...]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{path}: cannot read the dataset JSON: {exc}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: expected an object window_start_s -> PMFs")
    out = []
    for key, entry in data.items():
        where = f"{path}: window {key}"
        try:
            start = float(key)
        except ValueError:
            raise WorkloadError(f"{where}: the window key must be a start time in seconds") from None
        if not isinstance(entry, dict) or "input_tokens" not in entry or "output_tokens" not in entry:
            raise WorkloadError(f"{where}: expected input_tokens and output_tokens PMFs")
        out.append((start, parse_pmf(entry["input_tokens"], f"{where}: input_tokens"),
                    parse_pmf(entry["output_tokens"], f"{where}: output_tokens")))
    return tuple(sorted(out, key=lambda d: d[0]))


PREFIX = "servegen:"


def split_spec(spec: str) -> tuple[str, float | None]:
    """``servegen:DIR[@START_S]`` -> (DIR, START_S or None)."""
    body = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    head, sep, tail = body.rpartition("@")
    if sep and re.fullmatch(r"[0-9]+(?:\.[0-9]*)?", tail):
        return head, float(tail)
    return body, None


def read_servegen(directory: str | Path) -> list[Client]:
    """Every client of a ServeGen directory (``chunk-i-trace.csv`` + ``chunk-i-dataset.json``); the
    directory is read once per process (the daemon's replay asks for it every chunk)."""
    d = Path(directory).expanduser().resolve()
    return list(_read_dir(str(d), d.stat().st_mtime if d.exists() else 0.0))


@functools.lru_cache(maxsize=4)
def _read_dir(directory: str, _mtime: float) -> tuple[Client, ...]:
    d = Path(directory)
    if not d.is_dir():
        raise WorkloadError(f"servegen: {d} is not a directory")
    traces = sorted((int(m.group(1)), p) for p in d.iterdir() if (m := _TRACE.match(p.name)))
    if not traces:
        raise WorkloadError(f"servegen: {d} holds no chunk-<i>-trace.csv files")
    clients = []
    for i, trace in traces:
        dataset = d / f"chunk-{i}-dataset.json"
        if not dataset.is_file():
            raise WorkloadError(f"servegen: {trace} has no {dataset.name} beside it")
        clients.append(Client(f"client-{i}", _read_trace(trace), _read_dataset(dataset)))
    return tuple(clients)


def gaps(rng: np.random.Generator, pattern: str, shape: float, rate: float, n: int) -> np.ndarray:
    """``n`` inter-arrival times of mean ``1/rate`` with the fitted shape (cv) of ``pattern``."""
    if pattern == "Gamma":
        return rng.gamma(shape, 1.0 / (rate * shape), n)
    # Weibull: mean = scale * Gamma(1 + 1/shape); in logs, as Gamma(1 + 1/shape) overflows for small shapes
    log_scale = -math.log(rate) - math.lgamma(1.0 + 1.0 / shape)
    with np.errstate(divide="ignore"):  # a draw of exactly 0 is a gap of 0
        return np.exp(log_scale + np.log(rng.weibull(shape, n)))


def _window_arrivals(rng: np.random.Generator, w: Window, rate: float, lo: float, hi: float) -> np.ndarray:
    """Arrivals of one window's renewal process (restarted at the window's start) within ``[lo, hi)``."""
    out: list[np.ndarray] = []
    t, end = w.start_s, min(w.start_s + WINDOW_S, hi)
    batch = max(16, int(rate * WINDOW_S * 2))
    while t < end:
        times = t + np.cumsum(gaps(rng, w.pattern, w.shape, rate, batch))
        out.append(times[times < end])
        t = float(times[-1])
    a = np.concatenate(out) if out else np.empty(0)
    return a[a >= lo]


def total_rate(clients: list[Client], start_s: float, duration_s: float) -> float:
    """The service's mean request rate over ``[start_s, start_s + duration_s)`` (req/s)."""
    hi, n = start_s + duration_s, 0.0
    for c in clients:
        for w in c.windows:
            n += w.rate * max(0.0, min(hi, w.start_s + WINDOW_S) - max(start_s, w.start_s))
    return n / duration_s


def busiest_start(clients: list[Client]) -> float:
    """The start of the window in which the service's total rate is highest."""
    rates: dict[float, float] = {}
    for c in clients:
        for w in c.windows:
            rates[w.start_s] = rates.get(w.start_s, 0.0) + w.rate
    return max(rates, key=lambda s: (rates[s], -s))


def servegen_workload(directory: str | Path, rps: float | None, duration_s: float, start_s: float | None,
                      rngs: list[np.random.Generator]) -> Workload:
    """The service's traffic over ``[start_s, start_s + duration_s)``, shifted to start at 0 (single tenant)."""
    clients = read_servegen(directory)
    notes = []
    if start_s is None:
        start_s = busiest_start(clients)
        notes.append(f"start_s {start_s:g}: the busiest window")
    rate = total_rate(clients, start_s, duration_s)
    if rate <= 0:
        raise WorkloadError(f"servegen: {directory}: no traffic in [{start_s:g}, {start_s + duration_s:g}) s")
    factor = 1.0 if rps is None else rps / rate
    notes.append(f"{len(clients)} clients, data rate {rate:.4g} req/s" +
                 (f", every client's rate x{factor:.4g} to {rps:g} req/s" if rps is not None else ""))
    hi = start_s + duration_s
    arr, pin, pout = [], [], []
    for c in clients:
        for w in c.windows:
            if w.rate <= 0 or w.start_s + WINDOW_S <= start_s or w.start_s >= hi:
                continue
            lengths = c.lengths_at(w.start_s)
            if lengths is None:
                raise WorkloadError(f"servegen: {c.name}: no dataset window at or before {w.start_s:g} s")
            a = _window_arrivals(rngs[0], w, w.rate * factor, start_s, hi)
            arr.append(a)
            pin.append(lengths[0].sample(rngs[1], a.size))
            pout.append(lengths[1].sample(rngs[1], a.size))
    a = np.concatenate(arr) - start_s if arr else np.empty(0)
    order = np.argsort(a, kind="stable")
    return Workload(arrival_s=a[order], prompt_tokens=np.concatenate(pin)[order] if pin else np.empty(0, np.int64),
                    output_tokens=np.concatenate(pout)[order] if pout else np.empty(0, np.int64),
                    tenant_ids=np.zeros(a.size, dtype=np.int32), source=f"servegen:{directory}",
                    arrival="servegen", duration_s=float(duration_s), notes=notes)
