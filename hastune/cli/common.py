"""Helpers shared by CLI commands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from hastune.config import load_config
from hastune.evaluate import Evaluation
from hastune.recipe import load_recipe


def load_inputs(recipe: Path, config: Path, requests: int | None, seed: int | None):
    rec = load_recipe(recipe)
    cfg = load_config(config)
    ev = Evaluation(rec, requests=requests, seed=seed)
    ev.check(cfg, config)
    return rec, cfg, ev


def _clean(x: object) -> object:
    if isinstance(x, float):
        if math.isinf(x) or math.isnan(x):
            return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return round(x, 6)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def dumps(obj: dict) -> str:
    """JSON for machines: no NaN (null), infinity as the string 'inf'."""
    return json.dumps(_clean(obj), indent=2)


def fmt_s(x: float) -> str:
    if math.isinf(x):
        return "∞"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


# The engine's backend options, shared by evaluate / tune (with --evaluator real) and serve.
BACKEND_OPTION = typer.Option("local", "--backend", help="with --evaluator real (serve: "
                              "always): where the engine's workers run, local processes or "
                              "ray actors (pip install 'hastune\\[ray]')")
RAY_ADDRESS_OPTION = typer.Option(None, "--ray-address", help="with --backend ray: the "
                                  "cluster to join (e.g. HEAD:6379; default: a local one)")
