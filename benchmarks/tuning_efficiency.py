"""How fast does each search method reach the optimum? HAS (pruning + BO) with each sampler,
TPE without pruning, and random search, against the exhaustive optimum of `hastune grid`.

Run: OMP_NUM_THREADS=1 python benchmarks/tuning_efficiency.py [--seeds 5] [--budget 80]

The exhaustive table (every configuration's goodput, as `hastune grid --no-prune` computes it)
is built once per recipe and cached in benchmarks/.cache/ (keyed by recipe and profile
contents). Tuning runs then look goodputs up in it: the evaluator is deterministic for a
recipe seed, so a lookup returns exactly what a simulation would, and the benchmark measures
the search, not the simulator. Counts include pruning's own probes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import optuna

from hastune.config import parse_config, trial_key
from hastune.recipe import load_recipe
from hastune.tune.outputs import convergence
from hastune.tune.runner import TuneOptions, Tuner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fakes import LookupEvaluator  # noqa: E402  (an evaluator reading a table)

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ["audio-ultravox-8xa100.yaml", "image-llava-8xa100.yaml", "video-qwen-8xa100.yaml"]
GOODPUT_CODE = ("goodput.py", "stability.py", "evaluators/sim.py", "recipe.py", "sim/common.py")
METHODS = {  # name: (sampler, prune)
    "HAS-tpe": ("tpe", True),
    "HAS-gp": ("gp", True),
    "HAS-skopt": ("skopt", True),
    "HAS-random": ("random", True),
    "TPE (no pruning)": ("tpe", False),
    "random (no pruning)": ("random", False),
}


def _grid_one(args: tuple[str, dict]) -> float:
    from hastune.evaluators.sim import Evaluation

    path, cfg = args
    global _EV  # one Evaluation per worker process
    if "_EV" not in globals() or _EV.recipe.path != path:
        _EV = Evaluation(load_recipe(path))
    return _EV.goodput(parse_config(cfg)).goodput_rps


def exhaustive(recipe_path: Path) -> dict[str, float]:
    rec = load_recipe(recipe_path)
    prof = rec.load_profile()
    # keyed by the recipe, the profile and the code that defines a goodput
    code = b"".join((ROOT / "hastune" / f).read_bytes() for f in GOODPUT_CODE)
    h = hashlib.sha256(recipe_path.read_bytes() + Path(prof.path).read_bytes()
                       + code).hexdigest()[:12]
    cache = ROOT / "benchmarks" / ".cache" / f"grid-{recipe_path.stem}-{h}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    tuner = Tuner(rec, TuneOptions(storage="memory"))
    # what the tuner can ever evaluate: with or without pruning, memory-infeasible configs are
    # never run (as in `hastune grid --no-prune`)
    cfgs = [c for sp in tuner.spaces.values() for c in sp.configs(rec.cluster.gpus)
            if tuner.feasible(c)]
    t0 = time.perf_counter()
    dicts = [json.loads(trial_key(c)) for c in cfgs]
    with get_context("spawn").Pool(2) as pool:
        vals = pool.map(_grid_one, [(str(recipe_path), d) for d in dicts], chunksize=8)
    table = {trial_key(c): v for c, v in zip(cfgs, vals)}
    print(f"  exhaustive grid of {recipe_path.name}: {len(table)} configs in "
          f"{time.perf_counter() - t0:.0f} s")
    cache.parent.mkdir(exist_ok=True)
    cache.write_text(json.dumps(table))
    return table


def run_method(recipe_path: Path, table: dict[str, float], sampler: str, prune: bool,
               seed: int, budget: int) -> list[float]:
    rec = load_recipe(recipe_path)
    tuner = Tuner(rec, TuneOptions(trials=budget, sampler=sampler, prune=prune, seed=seed,
                                   storage="memory", study=f"{sampler}-{prune}-{seed}"),
                  evaluator=LookupEvaluator(rec, table))  # the exhaustive grid's goodputs
    study = tuner.open_study()
    tuner.work(study)
    return convergence(study)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=80)
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    ap.add_argument("--recipes", nargs="*", default=RECIPES,
                    help="recipes under examples/ (e.g. ecoserve/a800-llama-sharegpt.yaml, "
                         "16 GPUs, padg/nodg/fudg in one study)")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    results: dict[str, list[tuple[int | None, dict[int, float]]]] = {m: [] for m in args.methods}
    t0 = time.perf_counter()
    for name in args.recipes:
        path = ROOT / "examples" / name
        table = exhaustive(path)
        opt = max(table.values())
        print(f"{name}: optimum {opt:.3f} req/s over {len(table)} configurations")
        for m in args.methods:
            sampler, prune = METHODS[m]
            for seed in range(args.seeds):
                ts = time.perf_counter()
                conv = run_method(path, table, sampler, prune, seed, args.budget)
                hit = next((i + 1 for i, v in enumerate(conv) if v >= 0.99 * opt), None)
                at = {k: (conv[min(k, len(conv)) - 1] / opt if conv else 0.0)
                      for k in (20, 40, 80)}
                results[m].append((hit, at))
                print(f"  {m:20} seed {seed}: 99% after {hit if hit else '>' + str(len(conv))}"
                      f" evaluations ({time.perf_counter() - ts:.1f} s)")
    print()
    print(f"{'method':22} {'median evals to 99%':>20} {'best@20':>8} {'best@40':>8} "
          f"{'best@80':>8}   (over {len(args.recipes)} recipes x {args.seeds} seeds; "
          f"best@k as % of optimum, median)")
    for m, rows in results.items():
        hits = [h if h is not None else float("inf") for h, _ in rows]
        med = statistics.median(hits)
        cell = f"{med:.0f}" if med != float("inf") else f">{args.budget}"
        print(f"{m:22} {cell:>20} " + " ".join(
            f"{100 * statistics.median(a[k] for _, a in rows):7.1f}%" for k in (20, 40, 80)))
    print(f"\n{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
