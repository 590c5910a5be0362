"""Exhaustive evaluation of a recipe's space (`hastune grid`)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from hastune.config import config_dict, parse_config
from hastune.cost import Objective, cost_fields
from hastune.evaluators.sim import Evaluation
from hastune.prune import TypedBounds, prune
from hastune.recipe import load_recipe
from hastune.space import on_types, space_for
from hastune.tune.pool import resolve_workers

_EV: Evaluation | None = None


class GridFailed(RuntimeError):
    """An evaluation process died (killed, out of memory): the grid is incomplete."""


def _init(recipe_path: str) -> None:
    global _EV
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _EV = Evaluation(load_recipe(recipe_path))


def _goodput(cfg_dict: dict) -> float:
    assert _EV is not None
    return _EV.goodput(parse_config(cfg_dict)).goodput_rps


def run_grid(recipe_path: str | Path, prune_first: bool = True,
             workers: int | str = 1) -> dict:
    """Every configuration's goodput (after the analytic pruning rules, unless not
    `prune_first`), best first by the recipe's objective (with prices, each row's cost per
    hour and goodput per dollar); in `workers` processes ("auto": the cores this process may
    use) — each configuration's number is its own, so the table is the same for any."""
    workers = resolve_workers(workers)
    rec = load_recipe(recipe_path)
    ev = Evaluation(rec)
    bounds = TypedBounds(rec, ev)  # per GPU type (pools on several: None)
    fits = ev.runnable if ev.multi else None
    t0 = time.perf_counter()
    cfgs, total = [], 0
    for arch in rec.architectures:
        space = on_types(space_for(arch, rec.path, rec.search_space, ev.profile),
                         [t.gpu for t in rec.cluster.types])
        if prune_first:  # the analytic rules only: exhaustive
            rep = prune(rec, ev.profile, ev.requests, space, bounds=bounds, fits=fits)
            total += rep.total
            cfgs += [c.config for c in rep.kept]
        else:
            all_ = list(space.configs(rec.cluster.gpus))
            total += len(all_)
            cfgs += [c for c in all_ if (fits is None or fits(c))
                     and ((b := bounds(c)) is None or b.memory_ok(c))]
    dicts = [config_dict(c) for c in cfgs]
    if workers > 1:
        try:  # an executor, not mp.Pool: a process that dies breaks it instead of hanging it
            with ProcessPoolExecutor(workers, mp.get_context("spawn"), _init,
                                     (str(recipe_path),)) as pool:
                vals = list(pool.map(_goodput, dicts, chunksize=4))
        except BrokenProcessPool as exc:
            raise GridFailed(f"an evaluation process ended abruptly ({exc}); nothing of "
                             "this grid was written") from None
    else:
        vals = [ev.goodput(c).goodput_rps for c in cfgs]
    obj = Objective(rec)
    results = sorted(({"config": d, "goodput_rps": v, **cost_fields(rec.cluster, c, v)}
                      for c, d, v in zip(cfgs, dicts, vals)),
                     key=lambda r: -obj.value(parse_config(r["config"]), r["goodput_rps"]))
    return {"recipe": rec.name, "objective": rec.objective, "total": total,
            "evaluated": len(results),
            "pruned": prune_first, "seed": rec.seed, "wall_s": time.perf_counter() - t0,
            "best": results[0] if results else None, "results": results}
