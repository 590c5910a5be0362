"""What a tuning run leaves in DIR: best_config.yaml, summary.json, trials.csv and PNG plots."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import optuna
import yaml

from hastune.config import TARGET_KEY, dump_config, parse_config
from hastune.cost import cost_fields, cost_line
from hastune.export.target import build_target, dump_target
from hastune.goodput import GoodputResult
from hastune.jsonio import dumps
from hastune.tune.candidates import candidates, deploys, write_csv
from hastune.tune.runner import Tuner, evaluated_trials, trial_goodput


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    evals = evaluated_trials(study)
    return max(evals, key=lambda t: (float(t.value or 0.0), -t.number), default=None)


def convergence(study: optuna.Study) -> list[float]:
    """Best value of the objective (goodput, or goodput per dollar) after each evaluation, in
    evaluation order."""
    best, out = 0.0, []
    for t in sorted(evaluated_trials(study), key=lambda t: t.datetime_complete or t.number):
        best = max(best, float(t.value or 0.0))
        out.append(best)
    return out


def write_trials_csv(study: optuna.Study, path: Path) -> None:
    rows = []
    knobs: list[str] = []
    for t in study.get_trials(deepcopy=False):
        cfg = t.user_attrs.get("config", {})
        for k in cfg:
            if k not in knobs:
                knobs.append(k)
        rows.append((t, cfg))
    priced = any("cost_per_hour" in t.user_attrs for t, _ in rows)
    cols = ["number", "state", "goodput_rps", *knobs, "evaluated", "duplicate", "reason",
            "early_stopped", "probes", "wall_s", "source", "worker",
            *(("cost_per_hour", "goodput_per_dollar") if priced else ())]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for t, cfg in rows:
            u = t.user_attrs
            g = "" if t.value is None else (trial_goodput(t) if u.get("evaluated") else t.value)
            w.writerow([t.number, t.state.name, g,
                        *[cfg.get(k, "") for k in knobs], bool(u.get("evaluated")),
                        bool(u.get("duplicate")), u.get("reason", ""),
                        bool(u.get("early_stopped")), u.get("probes", ""),
                        round(u.get("wall_s", 0.0), 4) if "wall_s" in u else "",
                        u.get("source", ""), u.get("worker", ""),
                        *((u.get("cost_per_hour", ""), u.get("goodput_per_dollar", ""))
                          if priced else ())])


def summarize(tuner: Tuner, study: optuna.Study, wall_s: float,
              final: GoodputResult | None) -> dict[str, Any]:
    bt = best_trial(study)
    trials = study.get_trials(deepcopy=False)
    prep = study.user_attrs.get("prune_report", {})
    rec = tuner.recipe
    best_cfg = bt.user_attrs["config"] if bt else None
    goodput = trial_goodput(bt) if bt else 0.0
    gpus = parse_config(best_cfg).gpus if best_cfg else rec.cluster.gpus
    out: dict[str, Any] = {
        "recipe": rec.name,
        "objective": rec.objective,  # what the best maximises (goodput, or per dollar)
        "best_config": best_cfg,
        "goodput_rps": goodput,
        "goodput_per_gpu": goodput / gpus if gpus else 0.0,
        **(cost_fields(rec.cluster, parse_config(best_cfg), goodput) if best_cfg else {}),
        "best_gpus": gpus if best_cfg else None,
        "meets_slo": goodput > 0,
        "evaluations": len(evaluated_trials(study)),
        "trials": len(trials),
        "duplicates": sum(1 for t in trials if t.user_attrs.get("duplicate")),
        "infeasible_or_pruned_suggestions": sum(1 for t in trials if "reason" in t.user_attrs),
        "early_stopped": sum(1 for t in trials if t.user_attrs.get("early_stopped")),
        "pruned": prep,
        "sampler": tuner.opts.sampler,
        "seed": tuner.seed,
        "in_flight": tuner.opts.in_flight,  # the trials depend on it (and on the seed)
        "workers": tuner.opts.workers,      # they do not depend on this
        "recipe_sha256": tuner.recipe_sha256,
        "workload_seed": rec.seed,
        "architectures": rec.architectures,
        "slo": rec.slo.model_dump(),
        "study": tuner.study_name,
        "storage": tuner.opts.storage or str(Path(tuner.opts.out) / "study.db"),
        "wall_s": wall_s,
        "stopped": tuner.stop_reason or "interrupted, or ended by another process",
        # the engine the search was for (--target; None: every configuration)
        "target": tuner.opts.target,
        **({"target_note": tuner.target_note} if tuner.target_note else {}),
        "convergence": convergence(study),
    }
    if len(tuner.history) > 1:  # resumed with --force under other settings: say which
        out["searched_with"] = tuner.history
        out["sampler"] = "+".join(dict.fromkeys(h["sampler"] for h in tuner.history))
    if not out["meets_slo"]:
        out["no_config_reason"] = no_config_reason(out, final, rec)
    if final is not None and final.best_run is not None:
        out["at_goodput"] = {k: v for k, v in final.best_run.summary(rec.slo).items()
                             if k in ("ttft_p90_s", "tpot_p90_s", "attainment", "utilisation")}
    gpn, facts = rec.cluster.node_sizes, tuner.model_facts
    out["candidates"] = candidates(study, rec.slo, best_at=out.get("at_goodput"),
                                   best_number=bt.number if bt else None, gpus_per_node=gpn,
                                   facts=facts)
    if bt is not None:
        out["engines"] = engines(study, parse_config(best_cfg), gpn, facts)
    return out


def engines(study: optuna.Study, best: Any, gpus_per_node: int,
            facts: tuple) -> dict[str, dict[str, Any]]:
    """Per engine: whether it can launch the best as tuned (`deploys`, and `why` not), and
    where it cannot, the best evaluated configuration it can (`best_deployable`: config,
    goodput, trial; None when no evaluated one is)."""
    out: dict[str, dict[str, Any]] = {}
    for e, says in deploys(best, gpus_per_node, facts).items():
        out[e] = {"deploys": says == "yes", "why": None if says == "yes" else says[4:]}
        if says != "yes":
            out[e]["best_deployable"] = None
    missing = [e for e, row in out.items() if not row["deploys"]]
    for t in sorted(evaluated_trials(study), key=lambda t: (-float(t.value or 0.0), t.number)):
        if not missing or float(t.value or 0.0) <= 0:
            break
        says = deploys(parse_config(t.user_attrs["config"]), gpus_per_node, facts)
        for e in [e for e in missing if says[e] == "yes"]:
            out[e]["best_deployable"] = {"config": t.user_attrs["config"],
                                         "goodput_rps": trial_goodput(t),
                                         "trial": t.number}
            missing.remove(e)
    return out


def no_config_reason(summary: dict[str, Any], final: GoodputResult | None, rec) -> str:
    """Why no configuration meets the SLOs: the pruning rules that removed every one, or
    what the first evaluated one (the best-bounded) missed at its lowest probed rate."""
    from hastune.prune import emptied

    prep = summary.get("pruned") or {}
    if summary["evaluations"] == 0:
        if prep.get("kept") == 0:
            return emptied(prep.get("rules", {}), int(prep.get("total", 0)))
        return "no configuration was evaluated"
    why = final.failure(rec.slo) if final is not None else None
    cfg = summary.get("best_config") or {}
    return (f"none of the {summary['evaluations']} evaluated configurations meets them at any "
            f"rate; the first ({cfg.get('architecture', '?')} on "
            f"{summary.get('best_gpus', '?')} GPUs) " + (f"{why}" if why else "has goodput 0"))


def write_outputs(tuner: Tuner, study: optuna.Study, summary: dict[str, Any],
                  final: GoodputResult | None, plots: bool = True) -> list[Path]:
    out = Path(tuner.opts.out)
    out.mkdir(exist_ok=True)  # its parent was checked before the run (storage.check_out)
    written = []
    if summary["best_config"]:
        cfg = parse_config(summary["best_config"])
        target = build_target(tuner.recipe, cfg, summary["goodput_rps"], tuner.recipe_sha256,
                              encode_profile(tuner, cfg))
        how = " (measured by the engine: --recheck)" if summary.get("recheck") else ""
        cost = cost_line(cost_fields(tuner.recipe.cluster, cfg, summary["goodput_rps"]))
        header = (f"# Best deployment found by `hastune tune` for recipe {tuner.recipe.name}:\n"
                  f"# P{tuner.recipe.slo.percentile:g} goodput{how} {summary['goodput_rps']:.3f} "
                  f"req/s on {cfg.gpus} GPUs{f' ({cost})' if cost else ''} (objective "
                  f"{tuner.recipe.objective}, sampler {tuner.opts.sampler}, seed "
                  f"{tuner.seed}). Simulate it: hastune evaluate RECIPE --config this-file;\n"
                  f"# deploy it: hastune export this-file --engine vllm|sglang|dynamo "
                  f"(`target:` says what it is for)\n")
        header += "".join(f"# caveat: {' '.join(c.split())}\n"  # hastune.caveats, one line
                          for c in summary.get("caveats", []))
        p = out / "best_config.yaml"
        p.write_text(header + yaml.safe_dump(dump_config(cfg), sort_keys=False)
                     + yaml.safe_dump({TARGET_KEY: dump_target(target)}, sort_keys=False))
        written.append(p)
        written += write_deploy(out, p, cfg, target, summary, tuner)
    p = out / "candidates.csv"
    write_csv(summary.get("candidates", []), p)
    written.append(p)
    p = out / "summary.json"
    p.write_text(dumps(summary))  # the same text `--json` prints
    written.append(p)
    p = out / "trials.csv"
    write_trials_csv(study, p)
    written.append(p)
    if plots:
        written += write_plots(out, summary, final, tuner)
    return written


def write_deploy(out: Path, config_file: Path, cfg: Any, target: Any,
                 summary: dict[str, Any], tuner: Tuner | None = None) -> list[Path]:
    """DIR/deploy/<engine>/: the launch files for the engine the recipe names (vLLM unless
    it names SGLang; none for TensorRT-LLM, said in the summary). Where that engine cannot
    launch the best as tuned, the folder holds the best evaluated configuration it can
    (summary's `engines`), its config beside the scripts and the summary saying so; with
    none, nothing is written and the folder is not named as written. What the engine refuses
    of the target itself (export.check_model: NVFP4 weights without an NVFP4 checkpoint, say)
    is said in the summary, and the tune's other outputs are written all the same."""
    from hastune.errors import InputError
    from hastune.export import check_model, export

    engine = target.engine.name
    if engine not in ("vllm", "sglang"):
        summary["deploy"] = {"engine": engine, "written": False,
                             "why": f"hastune export has no {engine} launch files"}
        return []
    where = out / "deploy" / engine
    try:
        check_model(target, engine)
    except InputError as exc:
        summary["deploy"] = {"engine": engine, "written": False, "refused": True,
                             "why": exc.message}
        return []
    res = export(cfg, target, engine, where, config_file=str(config_file))
    summary["deploy"] = {"engine": engine, "dir": str(res.out), "written": res.written,
                         "not_expressed": res.plan.notes, "blocking": res.plan.blocking}
    if res.written:
        return [res.out]
    alt = (summary.get("engines", {}).get(engine) or {}).get("best_deployable")
    if alt is None or tuner is None:
        return []
    alt_cfg = parse_config(alt["config"])
    alt_target = build_target(tuner.recipe, alt_cfg, alt["goodput_rps"], tuner.recipe_sha256,
                              encode_profile(tuner, alt_cfg))
    p = where / "config.yaml"
    where.mkdir(parents=True, exist_ok=True)
    p.write_text(f"# The best configuration {engine} can launch as tuned (trial "
                 f"#{alt['trial']}, {alt['goodput_rps']:.3f} req/s): the tuned best cannot be "
                 f"expressed by {engine} (summary.json: deploy)\n"
                 + yaml.safe_dump(dump_config(alt_cfg), sort_keys=False)
                 + yaml.safe_dump({TARGET_KEY: dump_target(alt_target)}, sort_keys=False))
    res = export(alt_cfg, alt_target, engine, where, config_file=str(p))
    summary["deploy"].update(written=res.written, config=alt["config"],
                             goodput_rps=alt["goodput_rps"], trial=alt["trial"],
                             instead_of_best=True)
    return [res.out] if res.written else []


def write_plots(out: Path, summary: dict[str, Any], final: GoodputResult | None,
                tuner: Tuner) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    conv = summary["convergence"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(1, len(conv) + 1), conv, marker=".")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best P90 goodput per dollar" if tuner.objective.per_cost
                  else "best P90 goodput (req/s)")
    ax.set_title(f"{tuner.recipe.name}: {tuner.opts.sampler}")
    ax.grid(alpha=0.3)
    paths.append(out / "convergence.png")
    fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)
    if final is not None and final.probes:
        slo = tuner.recipe.slo
        pr = sorted(final.probes, key=lambda p: p.rate)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([p.rate for p in pr], [p.ttft_p / slo.ttft_s for p in pr], marker="o",
                label=f"TTFT P{slo.percentile:g} / SLO")
        ax.plot([p.rate for p in pr], [p.tpot_p / slo.tpot_s for p in pr], marker="s",
                label=f"TPOT P{slo.percentile:g} / SLO")
        ax.axhline(1.0, color="red", lw=1, ls="--", label="SLO")
        ax.axvline(final.goodput_rps, color="green", lw=1, ls=":", label="goodput")
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("latency / SLO")
        ax.set_title("best config: latency vs rate")
        ax.legend()
        ax.grid(alpha=0.3)
        paths.append(out / "goodput_vs_rate.png")
        fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)
    if final is not None and final.best_run is not None:
        util = final.best_run.utilisation
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar(list(util), [100 * v for v in util.values()])
        ax.set_ylabel("utilisation (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"best config at {final.goodput_rps:.2f} req/s")
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
        paths.append(out / "utilisation.png")
        fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)
    return paths


def encode_profile(tuner: Tuner, cfg: Any) -> Any:
    """The profile of the GPU type `cfg`'s encode pool sits on (what sizes a co-resident
    pair's memory: hastune.export.target.memory_shares)."""
    return tuner.simulation.pool_view(cfg, "gpu_E").profile
