"""Turn the figure JSON into the reproduction table of docs/reproduction.md (no numbers typed by hand)."""

from __future__ import annotations

import glob
import json
import os


def _by_key(summary: list[dict], policy: str) -> dict[float, dict]:
    return {row["rps"]: row for row in summary if row["policy"] == policy and not row.get("variant")}


def largest_gain(summary: list[dict], ours: str, base: str) -> dict | None:
    """The RPS where ``ours`` beats ``base`` most on mean TTFT attainment, with the costs there."""
    a, b = _by_key(summary, ours), _by_key(summary, base)
    best = None
    for rps in sorted(set(a) & set(b)):
        gain = a[rps]["ttft_attainment"]["mean"] - b[rps]["ttft_attainment"]["mean"]
        if best is None or gain > best["ttft_gain_pp"] / 100:
            best = {
                "rps": rps,
                "ttft_gain_pp": 100 * gain,
                "ours_ttft": a[rps]["ttft_attainment"],
                "base_ttft": b[rps]["ttft_attainment"],
                "tbt_change_pp": 100 * (a[rps]["tbt_attainment"]["mean"] - b[rps]["tbt_attainment"]["mean"]),
                "ours_tbt": a[rps]["tbt_attainment"],
                "base_tbt": b[rps]["tbt_attainment"],
                "throughput_change_pct": 100 * (a[rps]["throughput_tok_s"]["mean"] / b[rps]["throughput_tok_s"]["mean"] - 1)
                if b[rps]["throughput_tok_s"]["mean"] > 0 else 0.0,
            }
    return best


def _ci(x: dict) -> str:
    return f"{100 * x['mean']:.1f} [{100 * x['ci95'][0]:.1f}, {100 * x['ci95'][1]:.1f}]"


def reproduction_rows(results_dir: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(os.path.join(results_dir, "fig16_*.json"))):
        with open(path) as fh:
            data = json.load(fh)
        # Figures made before issue 10 name the paper's algorithm "lvf"; later ones "lvf-paper" (and v2 "lvf").
        new = any(r["policy"] == "lvf-paper" for r in data["summary"])
        ours = ("lvf-paper", "lvf") if new else ("lvf",)
        for policy in ours:
            label = policy if new else "lvf-paper (recorded as lvf)"
            for base in ("vllm", "vllm-offload"):
                g = largest_gain(data["summary"], policy, base)
                if g is not None:
                    rows.append({"model": data["model"], "workload": data["workload"], "policy": label,
                                 "versus": base, **g})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| model | lengths | policy | vs | RPS | TTFT att. lvf | TTFT att. base | gain (pp) | TBT att. lvf | TBT att. base | "
           "TBT change (pp) | throughput change |",
           "|---|---|---|---|---:|---|---|---:|---|---|---:|---:|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['workload']} | {r.get('policy', 'lvf')} | {r['versus']} | {r['rps']:g} | {_ci(r['ours_ttft'])} | "
                   f"{_ci(r['base_ttft'])} | {r['ttft_gain_pp']:+.1f} | {_ci(r['ours_tbt'])} | {_ci(r['base_tbt'])} | "
                   f"{r['tbt_change_pp']:+.1f} | {r['throughput_change_pct']:+.1f} % |")
    return "\n".join(out)
