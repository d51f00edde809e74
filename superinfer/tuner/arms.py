"""The arms file: what an offline study (``superinferd tune``) hands the online tuner.

JSON, version 1::

    {"version": 1, "kind": "superinfer-tuner-arms",
     "robust": {"params": {knob: value}, "score": 0.91},          # best over the whole study trace
     "phases": {"chat": {"params": {...}, "score": 0.93,          # best for that phase
                         "features": {"log_rate": 1.6, "share:chat": 1.0, ...},
                         "versus": {"start": 0.40, "bursts": 0.91, ...}}, ...},
     "start": {"params": {...}},                                  # the setting the study started from
     "source": {...}}                                             # how it was made (free form)

``score`` is the study's objective (weighted share of requests meeting both SLOs) for that setting on
that stretch of the study trace. ``features`` are the phase's mean workload features
(``superinfer.tuner.phase``). ``versus`` (optional): the study's scores, in that phase, of the start
setting and of the other phases' arms; with them the online tuner knows what the study predicts for
its incumbent in the phase, so the study's gain from a jump (:meth:`Arms.prior`). Invariants of
:func:`load_arms`: every setting names only knobs of ``TUNABLE_BOUNDS`` (the core's and ``b_xfer``),
each within its bounds (integers where the core says so; a ``b_xfer`` above the host's budget is clipped
by the tuner's knob space); scores are within [0, 1]; ``versus`` names only ``start`` and the file's
phases; anything else raises :class:`ArmsError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from superinfer.tuner.space import TUNABLE_BOUNDS, TUNABLE_INTEGER
from superinfer.jsonfile import write_json_atomic

ARMS_VERSION = 1
ARMS_KIND = "superinfer-tuner-arms"


class ArmsError(ValueError):
    """An arms file could not be read or is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Arm:
    name: str
    params: dict[str, float]
    score: float | None = None
    features: dict[str, float] = field(default_factory=dict)
    versus: dict[str, float] = field(default_factory=dict)  # the study's scores of other settings here

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": dict(self.params)}
        if self.score is not None:
            out["score"] = self.score
        if self.features:
            out["features"] = dict(self.features)
        if self.versus:
            out["versus"] = dict(self.versus)
        return out


@dataclass(frozen=True)
class Arms:
    robust: Arm | None
    phases: dict[str, Arm]
    source: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    start: Arm | None = None  # the setting the study started from (its scores: ``versus["start"]``)

    def centroids(self) -> dict[str, dict[str, float]]:
        return {n: a.features for n, a in self.phases.items() if a.features}

    def prior(self, phase: str, setting: Mapping[str, float], same: Callable[[dict, dict], bool]) -> float | None:
        """The study's score in ``phase`` of ``setting``, when it is the start or one of the phases' arms
        (``same`` compares two full settings) and the file has that score; else None."""
        arm = self.phases.get(phase)
        if arm is None:
            return None
        named = ([("start", self.start)] if self.start is not None else []) + sorted(self.phases.items())
        for name, other in named:
            if same(merge_params(setting, other), dict(setting)):
                return arm.score if name == phase else arm.versus.get(name)
        return None

    def as_dict(self) -> dict[str, Any]:
        out = {"version": ARMS_VERSION, "kind": ARMS_KIND,
               "robust": self.robust.as_dict() if self.robust else None,
               "phases": {n: a.as_dict() for n, a in sorted(self.phases.items())}, "source": self.source}
        if self.start is not None:
            out["start"] = {"params": dict(self.start.params)}
        return out


def _setting(where: str, raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise ArmsError(f"{where}: expected an object of knob values")
    out = {}
    for k, v in raw.items():
        if k not in TUNABLE_BOUNDS:
            raise ArmsError(f"{where}.{k}: unknown knob; known: {', '.join(TUNABLE_BOUNDS)}")
        lo, hi = TUNABLE_BOUNDS[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise ArmsError(f"{where}.{k}: expected a number within [{lo}, {hi}], got {v!r}")
        if k in TUNABLE_INTEGER and v != int(v):
            raise ArmsError(f"{where}.{k}: expected an integer, got {v!r}")
        out[k] = float(v)
    return out


def _arm(where: str, name: str, raw: Any) -> Arm:
    if not isinstance(raw, dict):
        raise ArmsError(f"{where}: expected an object with params")
    unknown = set(raw) - {"params", "score", "features", "versus", "default_score", "trials"}
    if unknown:
        raise ArmsError(f"{where}: unknown key(s) {sorted(unknown)}")
    params = _setting(f"{where}.params", raw.get("params"))
    score = raw.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1):
        raise ArmsError(f"{where}.score: expected a number within [0, 1], got {score!r}")
    feats = raw.get("features", {})
    if not isinstance(feats, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                          or not math.isfinite(v) for v in feats.values()):
        raise ArmsError(f"{where}.features: expected an object of finite numbers")
    versus = raw.get("versus", {})
    if not isinstance(versus, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1
                                           for v in versus.values()):
        raise ArmsError(f"{where}.versus: expected an object of scores within [0, 1]")
    return Arm(name, params, None if score is None else float(score), {k: float(v) for k, v in feats.items()},
               {str(k): float(v) for k, v in versus.items()})


def arms_from_dict(data: Any, path: str = "<arms>") -> Arms:
    if not isinstance(data, dict):
        raise ArmsError(f"{path}: expected a JSON object")
    if data.get("version") != ARMS_VERSION or data.get("kind") != ARMS_KIND:
        raise ArmsError(f"{path}: expected kind {ARMS_KIND!r} version {ARMS_VERSION}, got kind "
                        f"{data.get('kind')!r} version {data.get('version')!r}")
    unknown = set(data) - {"version", "kind", "robust", "phases", "source", "start"}
    if unknown:
        raise ArmsError(f"{path}: unknown key(s) {sorted(unknown)}")
    robust = None if data.get("robust") is None else _arm(f"{path}: robust", "robust", data["robust"])
    phases_raw = data.get("phases", {})
    if not isinstance(phases_raw, dict):
        raise ArmsError(f"{path}: phases: expected an object of phase name -> arm")
    phases = {str(n): _arm(f"{path}: phases.{n}", str(n), a) for n, a in phases_raw.items()}
    for n, a in phases.items():
        stray = sorted(set(a.versus) - set(phases) - {"start"})
        if stray:
            raise ArmsError(f"{path}: phases.{n}.versus: unknown setting(s) {stray}; expected start or a phase name")
    start = None if data.get("start") is None else _arm(f"{path}: start", "start", data["start"])
    source = data.get("source", {})
    return Arms(robust, phases, source if isinstance(source, dict) else {}, path, start)


def load_arms(path: str | os.PathLike[str]) -> Arms:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ArmsError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ArmsError(f"{p}: not JSON: {exc}") from None
    return arms_from_dict(data, str(p))


def save_arms(arms: Arms, path: str | os.PathLike[str]) -> None:
    write_json_atomic(path, arms.as_dict())


def empty_arms() -> Arms:
    return Arms(None, {})


def merge_params(base: Mapping[str, float], arm: Arm) -> dict[str, float]:
    """``base`` with the arm's knobs applied (an arm may name only some knobs)."""
    return {**{k: float(v) for k, v in base.items()}, **arm.params}
