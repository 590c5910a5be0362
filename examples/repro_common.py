"""What the reproduction scripts share: the best configuration of each system over a space,
found exactly by branch and bound on pruning's capacity bounds, and small table helpers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from hastune.evaluators.sim import Evaluation
from hastune.prune import prune
from hastune.space import SearchSpace

MARGIN = 1.25  # pruning's allowance for a finite run passing slightly above capacity


def best_per_group(ev: Evaluation, space: SearchSpace,
                   groups: dict[str, Callable[[object], bool]],
                   cache: dict[str, float] | None = None,
                   log: Callable[[str], None] | None = None) -> dict[str, dict]:
    """For each group (a predicate on configs), the config with the most goodput. Candidates
    are visited in decreasing capacity bound; once a bound × MARGIN falls below the group's
    best, no later one can win (pruning's soundness), so the search stops there."""
    cache = {} if cache is None else cache
    rep = prune(ev.recipe, ev.profile, ev.requests, space)
    cands = sorted(rep.kept, key=lambda c: -c.bound)
    out: dict[str, dict] = {}
    for name, pred in groups.items():
        best, best_cfg, evaluated = 0.0, None, 0
        for c in cands:
            if not pred(c.config):
                continue
            if c.bound * MARGIN < best:
                break
            key = c.config.model_dump_json()
            if key not in cache:
                t0 = time.perf_counter()
                cache[key] = ev.goodput(c.config).goodput_rps
                if log:
                    shown = c.config.model_dump(exclude={"kind", "name"}, exclude_defaults=True)
                    log(f"    {shown} → {cache[key]:.2f} req/s "
                        f"({time.perf_counter() - t0:.1f} s)")
            evaluated += 1
            if cache[key] > best:
                best, best_cfg = cache[key], c.config
        out[name] = {"goodput": best, "evaluated": evaluated,
                     "config": (best_cfg.model_dump(exclude={"kind", "name"},
                                                    exclude_defaults=True) if best_cfg else None)}
    return out


def load_results(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save_results(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=True))


def ratio(a: float, b: float) -> str:
    if b <= 0:
        return "∞" if a > 0 else "–"
    return f"{a / b:.2f}×"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    aligns = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(aligns) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
