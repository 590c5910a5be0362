"""What `hastune plan` leaves in DIR (hastune.plan): plan.json, plan.csv, plan.png, the
answer's best_config.yaml, and with prices plan_pareto.csv and plan_cost.png. It reads a
hastune.plan.PlanResult (passed in: hastune.plan imports this module, not the reverse)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hastune.config import parse_config
from hastune.recipe import Recipe

PlanResult = Any  # hastune.plan.PlanResult


def write_plot(res: PlanResult, path) -> None:
    """GPUs → goodput: each tuned count's best, the ceilings, the rate and the answer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    tuned = sorted(res.tuned, key=lambda s: s.gpus)
    bounded = [s for s in res.steps if s.ceiling_rps is not None
               and math.isfinite(s.ceiling_rps)]
    if bounded:
        ax.plot([s.gpus for s in bounded], [s.ceiling_rps for s in bounded], ls="", marker="_",
                ms=14, color="grey", label="capacity bound × margin")
    ax.plot([s.gpus for s in tuned], [s.goodput_rps for s in tuned], marker="o",
            label="best goodput (tuned)")
    ax.axhline(res.rate, color="red", lw=1, ls="--", label=f"rate {res.rate:g} req/s")
    if (a := res.answer) is not None:
        ax.plot([a.gpus], [a.goodput_rps], marker="*", ms=16, color="green", ls="",
                label=f"fewest: {a.gpus} GPUs")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("P90 goodput (req/s)")
    ax.set_xticks(range(1, res.max_gpus + 1))
    ax.set_title(f"{res.recipe}: GPUs for {res.rate:g} req/s ({res.search})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def write_cost_plot(res: PlanResult, path) -> None:
    """$/h against goodput: every configuration evaluated, the Pareto front, the rate and the
    answer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in res.points if p.get("cost_per_hour") is not None]
    front = res.cost_pareto()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p["cost_per_hour"] for p in pts], [p["goodput_rps"] for p in pts], ls="",
            marker=".", color="grey", label="configurations evaluated")
    ax.plot([p["cost_per_hour"] for p in front], [p["goodput_rps"] for p in front],
            marker="o", drawstyle="steps-post", label="Pareto front")
    ax.axhline(res.rate, color="red", lw=1, ls="--", label=f"rate {res.rate:g} req/s")
    cfg, goodput, cost = res.answer_config
    if cfg is not None and cost is not None:
        ax.plot([cost], [goodput], marker="*", ms=16, color="green", ls="",
                label=f"answer ({res.objective}): {cost:.4g}/h")
    ax.set_xlabel("cost per hour")
    ax.set_ylabel("P90 goodput (req/s)")
    ax.set_title(f"{res.recipe}: cost against goodput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def write_outputs(res: PlanResult, recipe: Recipe, out: Path, plots: bool) -> list[Path]:
    """DIR/plan.json (as --json prints), plan.csv, plan.png, and best_config.yaml (the answer's
    configuration) next to the studies; with prices, plan_pareto.csv and plan_cost.png ($/h
    against goodput). `recipe`: the recipe at the answer's GPU count (its target block's)."""
    import csv
    import json

    import yaml

    from hastune.config import dump_config
    from hastune.jsonio import dumps

    out.mkdir(exist_ok=True)
    d = res.as_dict()
    written = [out / "plan.json"]
    written[0].write_text(dumps(d))
    priced = bool(d["cost_pareto"]) or any(s["cost_per_hour"] is not None
                                           for s in d["steps"])
    p = out / "plan.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["gpus", "status", "ceiling_rps", "goodput_rps", "goodput_per_gpu",
                    "sustains", "evaluations", "study", "config",
                    *(["cost_per_hour"] if priced else [])])
        for s in d["steps"]:
            w.writerow([s["gpus"], s["status"], s["ceiling_rps"], s["goodput_rps"],
                        s["goodput_per_gpu"], s["sustains"], s["evaluations"], s["study"] or "",
                        json.dumps(s["config"], sort_keys=True) if s["config"] else "",
                        *([s["cost_per_hour"]] if priced else [])])
    written.append(p)
    if d["cost_pareto"]:
        p = out / "plan_pareto.csv"
        with p.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["cost_per_hour", "goodput_rps", "goodput_per_dollar", "gpus",
                        "sustains", "study", "config"])
            for r in d["cost_pareto"]:
                w.writerow([r["cost_per_hour"], r["goodput_rps"], r["goodput_per_dollar"],
                            r["gpus"], r["goodput_rps"] >= res.rate, r["study"],
                            json.dumps(r["config"], sort_keys=True)])
        written.append(p)
    a = res.answer
    cfg_d, goodput, cost = res.answer_config
    if a is not None and cfg_d is not None:
        from hastune.export.target import TARGET_KEY, build_target, dump_target

        cfg = parse_config(cfg_d)
        target = build_target(recipe, cfg, goodput or 0.0, a.recipe_sha256)
        what = ("Cheapest deployment" if res.objective == "cost" else "Fewest GPUs")
        p = out / "best_config.yaml"
        p.write_text(f"# {what} found by `hastune plan` for recipe {res.recipe} at "
                     f"{res.rate:g} req/s:\n# {cfg.gpus} GPUs, P90 goodput {goodput:.3f} "
                     f"req/s" + (f", {cost:.4g} per hour" if cost is not None else "")
                     + f" (study {a.study}). Simulate it: hastune evaluate RECIPE --config "
                     "this-file;\n# deploy it: hastune export this-file --engine "
                     "vllm|sglang|dynamo (`target:` says what it is for)\n"
                     + yaml.safe_dump(dump_config(cfg), sort_keys=False)
                     + yaml.safe_dump({TARGET_KEY: dump_target(target)}, sort_keys=False))
        written.append(p)
    if plots:
        p = out / "plan.png"
        write_plot(res, p)
        written.append(p)
        if d["cost_pareto"]:
            p = out / "plan_cost.png"
            write_cost_plot(res, p)
            written.append(p)
    return written
