"""Ranked candidates: the top N distinct configurations of each architecture a study evaluated,
with their goodput, goodput per GPU, P90 TTFT/TPOT at that goodput and the margin to the SLOs
(what `tune` writes as candidates.csv and lists under `candidates` in summary.json / --json).

The latencies come from the trial's own record (`at_goodput`, kept by the tuner since this
file exists); a trial recorded before has them only if it is the best (from the final
evaluation), else they are left empty.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import optuna

from hastune import archs
from hastune.config import parse_config
from hastune.tune.runner import evaluated_trials, trial_goodput

TOP_N = 5
ENGINE_COLUMNS = ("vllm", "sglang", "dynamo", "runners")  # hastune.export.ENGINES
COLUMNS = ["architecture", "rank", "goodput_rps", "gpus", "goodput_per_gpu", "ttft_p90_s",
           "tpot_p90_s", "ttft_margin", "tpot_margin", "trial", "deployment",
           *ENGINE_COLUMNS, "config"]
COST_COLUMNS = ["cost_per_hour", "goodput_per_dollar"]  # where the recipe gives prices


def deploys(cfg: Any, gpus_per_node: int | dict[str, int], facts: tuple) -> dict[str, str]:
    """Per engine, "yes" (hastune export writes its launch files) or "no: " and why not;
    `facts`: hastune.tune.runner.model_facts."""
    from hastune.export import ENGINES, blocking_for

    out = {}
    for e in ENGINES:
        why = blocking_for(cfg, gpus_per_node, e, *facts)
        out[e] = "yes" if not why else "no: " + " ".join(why[0].split())
    return out


def candidates(study: optuna.Study, slo: Any, n: int = TOP_N,
               best_at: dict[str, float] | None = None,
               best_number: int | None = None, gpus_per_node: int | dict[str, int] = 8,
               facts: tuple = ("vllm", None, False)) -> list[dict[str, Any]]:
    """The top `n` distinct configurations per architecture (goodput > 0), best first by the
    study's objective, each with whether every engine can launch it (`deploys`) and, where
    the recipe gives prices, its cost per hour and goodput per dollar."""
    best: dict[str, optuna.trial.FrozenTrial] = {}
    for t in evaluated_trials(study):
        key = t.user_attrs.get("key") or json.dumps(t.user_attrs.get("config"), sort_keys=True)
        if float(t.value or 0.0) > 0 and (key not in best
                                          or float(t.value or 0) > float(best[key].value or 0)):
            best[key] = t
    by_arch: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for t in best.values():
        by_arch.setdefault(t.user_attrs["config"]["architecture"], []).append(t)
    out = []
    for arch in sorted(by_arch):
        ranked = sorted(by_arch[arch], key=lambda t: (-float(t.value or 0.0), t.number))[:n]
        for rank, t in enumerate(ranked, 1):
            at = t.user_attrs.get("at_goodput") or (best_at if t.number == best_number else None)
            row = _row(t, arch, rank, at or {}, slo)
            row["deploys"] = deploys(parse_config(t.user_attrs["config"]), gpus_per_node,
                                     facts)
            out.append(row)
    return out


def _row(t: optuna.trial.FrozenTrial, arch: str, rank: int, at: dict, slo: Any) -> dict:
    cfg = parse_config(t.user_attrs["config"])
    g = trial_goodput(t)
    ttft, tpot = at.get("ttft_p90_s"), at.get("tpot_p90_s")
    cost = {k: t.user_attrs[k] for k in COST_COLUMNS if k in t.user_attrs}
    return {"architecture": arch, "rank": rank, "goodput_rps": g, "gpus": cfg.gpus, **cost,
            "goodput_per_gpu": g / cfg.gpus if cfg.gpus else 0.0,
            "ttft_p90_s": ttft, "tpot_p90_s": tpot,
            "ttft_margin": None if ttft is None else (slo.ttft_s - ttft) / slo.ttft_s,
            "tpot_margin": None if tpot is None else (slo.tpot_s - tpot) / slo.tpot_s,
            "trial": t.number, "deployment": archs.get(arch).describe(cfg),
            "config": t.user_attrs["config"]}


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    cols = COLUMNS[:5] + COST_COLUMNS + COLUMNS[5:] if any(
        "cost_per_hour" in r for r in rows) else COLUMNS
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for r in rows:
            r = {**r, **r.get("deploys", {})}
            w.writerow(["" if r.get(c) is None else
                        json.dumps(r[c], sort_keys=True) if c == "config" else r[c]
                        for c in cols])
