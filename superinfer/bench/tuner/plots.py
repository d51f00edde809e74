"""``bench tuner``'s figures: the timeline, cumulative regret against the oracle, the recovery-time CDF.

* timeline (seed 0): phases shaded, arrivals per bin, ``step_slo_share`` and ``delta_f`` of each strategy
  over time, each strategy's attainment per bin (by arrival time), the tuner's rollbacks marked;
* regret: per strategy, the cumulative number of requests (mean over seeds) that the oracle served
  within both SLOs and the strategy did not, over time;
* recovery: the empirical CDF of the tuner's recovery time after each shift (censored ones at the phase
  length, drawn as crosses);
* convergence: the baselines' study's best feasible value after each trial (``static_best``) and each
  phase's best (the ``oracle``'s arms), with the convergence window shaded.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

COLORS = {"paper": "tab:gray", "static_best": "tab:blue", "oracle": "tab:green", "tuner": "tab:red"}


def _knob(run: dict, knob: str, start: dict, horizon: float) -> tuple[list[float], list[float]]:
    t, v = [0.0], [float(start.get(knob, np.nan))]
    for at, values in run["trajectory"]:
        if knob in values:
            t += [at, at]
            v += [v[-1], float(values[knob])]
    t.append(horizon)
    v.append(v[-1])
    return t, v


def timeline(res: dict[str, Any], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scn = res["settings"]["scenario"]
    runs = {r["strategy"]: r for r in res["runs"] if r["scenario"] == scn and r["seed"] == 0}
    any_run = next(iter(runs.values()))
    horizon = any_run["bounds"][-1][2]
    fig, ax = plt.subplots(4, 1, figsize=(12, 10), sharex=True)
    for a in ax:
        for i, (name, s, e) in enumerate(any_run["bounds"]):
            a.axvspan(s / 60, e / 60, color="0.92" if i % 2 else "white")
    for name, s, _ in any_run["bounds"]:
        ax[0].text(s / 60 + 0.3, 0, name, fontsize=8, va="bottom")
    tl = any_run["timeline"]
    ax[0].bar(np.asarray(tl["t"]) / 60, tl["arrivals"], width=res["settings"]["bin_s"] / 60, align="edge", color="0.5")
    ax[0].set_ylabel("arrivals / bin")
    start = res["settings"]["start"]
    for knob, a in (("step_slo_share", ax[1]), ("delta_f", ax[2])):
        for s, r in runs.items():
            t, v = _knob(r, knob, start, horizon)
            a.plot(np.asarray(t) / 60, v, color=COLORS.get(s), label=s, lw=1.5 if s == "tuner" else 1.0)
        a.set_ylabel(knob)
    ax[1].legend(fontsize=8, loc="upper right")
    for s, r in runs.items():
        att = [np.nan if x is None else x for x in r["timeline"]["attainment"]]
        ax[3].plot(np.asarray(r["timeline"]["t"]) / 60, att, color=COLORS.get(s), label=s, lw=1.0)
    tuner = runs.get("tuner")
    if tuner:
        for d in tuner["decisions"]:
            if d["action"] == "rollback":
                ax[3].axvline(d["at"] / 60, color="tab:red", ls=":", lw=0.8)
    ax[3].set_ylabel("SLO attainment (bin)")
    ax[3].set_xlabel("minutes (virtual)")
    ax[3].set_ylim(-0.02, 1.02)
    fig.suptitle(f"bench tuner: {scn}, seed 0 (dotted: tuner rollbacks)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def regret(res: dict[str, Any], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scn = res["settings"]["scenario"]
    by: dict[str, dict[int, dict]] = {}
    for r in res["runs"]:
        if r["scenario"] == scn:
            by.setdefault(r["strategy"], {})[r["seed"]] = r
    fig, ax = plt.subplots(figsize=(8, 4.5))
    oracle = by.get("oracle", {})
    for s, seeds in sorted(by.items()):
        if s == "oracle":
            continue
        curves = []
        for seed, r in seeds.items():
            o = oracle.get(seed)
            if o is None:
                continue
            n = np.asarray(r["timeline"]["arrivals"], dtype=float)
            a = np.array([np.nan if x is None else x for x in r["timeline"]["attainment"]], dtype=float)
            b = np.array([np.nan if x is None else x for x in o["timeline"]["attainment"]], dtype=float)
            curves.append(np.cumsum(np.nan_to_num((b - a) * n)))
        if curves:
            t = np.asarray(next(iter(seeds.values()))["timeline"]["t"]) / 60
            ax.plot(t, np.mean(curves, axis=0), color=COLORS.get(s), label=s)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("minutes (virtual)")
    ax.set_ylabel("cumulative requests lost vs oracle")
    ax.legend()
    ax.set_title(f"cumulative regret against the oracle, mean of {len(oracle)} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def recovery_cdf(res: dict[str, Any], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = sorted(res.get("recovery", []), key=lambda x: x["recovery_s"])
    fig, ax = plt.subplots(figsize=(6, 4))
    if rec:
        y = np.arange(1, len(rec) + 1) / len(rec)
        x = np.array([r["recovery_s"] for r in rec])
        ax.step(x / 60, y, where="post", color="tab:red")
        cens = np.array([not r["recovered"] for r in rec])
        ax.plot(x[cens] / 60, y[cens], "x", color="k", label="not recovered (phase ended)")
        ax.legend(fontsize=8)
    ax.set_xlabel("minutes after a shift until within 2 pp of the oracle")
    ax.set_ylabel("share of shifts")
    ax.set_title("tuner recovery time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def convergence(res: dict[str, Any], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conv = res["studies"]["static"]["convergence"]
    nan = lambda c: [np.nan if v is None else 100 * v for v in c]  # noqa: E731
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    n = np.arange(1, conv["trials"] + 1)
    ax[0].step(n, nan(conv["curve"]), where="post", color="tab:blue", label="best feasible (static_best)")
    ax[0].step(n, nan(conv["curve_unguarded"]), where="post", color="0.6", ls="--", label="best, no tenant guard")
    if conv["trials"] > conv["window"]:
        ax[0].axvspan(conv["trials"] - conv["window"], conv["trials"], color="0.92", label=f"last {conv['window']} trials")
    ax[0].set_title(f"baselines' study: {'converged' if conv['converged'] else 'not converged'} after {conv['trials']} trials")
    for name, ph in conv["phases"].items():
        ax[1].step(n, nan(ph["curve"]), where="post", label=name)
    ax[1].set_title("best per phase (the oracle's arms)")
    for a in ax:
        a.set_xlabel("trial")
        a.set_ylabel("SLO attainment % (study, whole trace)")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_figures(res: dict[str, Any], out_dir: str, prefix: str = "tuner") -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    out = [timeline(res, os.path.join(out_dir, f"{prefix}_timeline.png")),
           regret(res, os.path.join(out_dir, f"{prefix}_regret.png")),
           recovery_cdf(res, os.path.join(out_dir, f"{prefix}_recovery_cdf.png"))]
    if res.get("studies", {}).get("static", {}).get("convergence"):
        out.append(convergence(res, os.path.join(out_dir, f"{prefix}_convergence.png")))
    return out
