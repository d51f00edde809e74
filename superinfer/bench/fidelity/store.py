"""What ``bench fidelity`` keeps of the real engine's runs beside its JSON (the ``.cdf.npz``: seed 0's CDFs
and every run's per-request outcomes), and reading an earlier JSON back for ``--rescore``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.bench.fidelity.steps import CELL_COLUMNS, run_speed

#: per-request outcomes of a real run kept beside the JSON (``--json``'s ``.cdf.npz``)
REQUEST_FIELDS = ("t_arr", "t_first", "t_end", "outputs", "last_token", "rotations")
#: the prefix of a run's quiet-step cells among its kept fields (``steps.dt_s`` ...; a repeat's ``rep1.steps.dt_s``)
STEPS = "steps."


def save_real(path: Path, cdfs: dict[tuple[str, float], Any], requests: dict[tuple, dict[str, Any]]) -> None:
    """The real side's raw data beside the JSON: the CDFs of seed 0 (``policy|rps|ttft``, ``|gaps``) and every
    run's per-request outcomes (``policy|rps|seed|t_first`` ...; a repeat's ``policy|rps|seed|rep1.t_first``),
    for ``--rescore`` and for diagnosis."""
    arrays = {f"{p}|{r!r}|{k}": v for (p, r), (real, _) in cdfs.items() for k, v in real.items()}
    for (p, r, seed), fields in requests.items():
        arrays.update({f"{p}|{r!r}|{seed}|{k}": v for k, v in fields.items()})
    np.savez_compressed(path, **arrays)


def load_real(path: Path) -> tuple[dict[tuple[str, float], dict[str, np.ndarray]], dict[tuple, dict[str, np.ndarray]]]:
    """What :func:`save_real` wrote: seed 0's CDFs per point, and every run's arrays per (policy, rps, seed)."""
    cdfs: dict[tuple[str, float], dict[str, np.ndarray]] = {}
    runs: dict[tuple, dict[str, np.ndarray]] = {}
    if path.exists():
        with np.load(path) as z:
            for key in z.files:
                parts = key.split("|")
                if len(parts) == 3:  # a CDF of seed 0
                    cdfs.setdefault((parts[0], float(parts[1])), {})[parts[2]] = z[key]
                elif len(parts) == 4:  # one run's per-request outcomes (and the shapes run before it)
                    runs.setdefault((parts[0], float(parts[1]), int(parts[2])), {})[parts[3]] = z[key]
    return cdfs, runs


def cdf_path(json_path: str) -> Path:
    return Path(json_path).with_suffix(".cdf.npz")


def load_rescore(path: str, ablate: bool) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """An earlier ``bench fidelity`` JSON (checked to hold what a re-score reads), its settings with
    ``ablate``, and its real runs set up to be scored by the twin again (seed 0's CDFs from its .cdf.npz)."""
    try:
        old = json.loads(Path(path).read_text())
        missing = [k for k in ("slo", "calibration", "copy_s_per_block", "host_terms", "command") if k not in old]
        if missing:
            raise KeyError(missing)
        o = {**old["config"], "ablate": ablate}
        rows = [{**{k: r[k] for k in ("policy", "rps", "seed", "real")}, "probe_s": r.get("probe_s", []),
                 **({"real_repeats": r["real_repeats"]} if r.get("real_repeats") else {})} for r in old["runs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(f"{path}: not a bench fidelity JSON with engine runs ({exc!r})",
                                 param_hint="--rescore") from None
    real_cdfs, real_runs = load_real(cdf_path(path))
    for r in rows:
        if r["seed"] == 0 and (r["policy"], r["rps"]) in real_cdfs:
            r["_cdf"] = real_cdfs[(r["policy"], r["rps"])]
        if (r["policy"], r["rps"], r["seed"]) in real_runs:
            r["_requests"] = real_runs[(r["policy"], r["rps"], r["seed"])]
    return old, o, rows


def _cells(fields: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray] | None:
    if not all(f"{prefix}{STEPS}{k}" in fields for k in CELL_COLUMNS):
        return None
    return {k: fields[f"{prefix}{STEPS}{k}"] for k in CELL_COLUMNS}


def run_speeds(fields: dict[str, np.ndarray], coefficients: Any, host: Any, repeats: int) -> dict[str, Any]:
    """A real run's ``run_speed`` and its repeats' (``repeat_run_speed``), from the quiet-step cells kept of them
    (:func:`superinfer.bench.fidelity.steps.run_speed`); nothing where none was kept (runs before 2026-12-03)."""
    out: dict[str, Any] = {}
    first = _cells(fields, "")
    if first is not None:
        out["run_speed"] = run_speed(first, coefficients, host)
        again = [_cells(fields, f"rep{i}.") for i in range(1, repeats + 1)]
        out["repeat_run_speed"] = [run_speed(c, coefficients, host) if c is not None else None for c in again]
    return out
