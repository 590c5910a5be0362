"""Helpers shared by CLI commands."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.markup import escape

from hastune.config import load_config
from hastune.evaluators.sim import Evaluation
from hastune.jsonio import dumps
from hastune.recipe import load_recipe
from hastune.worklimit import check_sim_work

__all__ = ["BACKEND_OPTION", "RAY_ADDRESS_OPTION", "SERVE_BACKEND_OPTION", "dumps", "fmt_s",
           "load_inputs"]


def load_inputs(recipe: Path, config: Path, requests: int | None, seed: int | None):
    rec = load_recipe(recipe)
    check_sim_work(rec, requests, 0, "simulate")
    cfg = load_config(config)
    ev = Evaluation(rec, requests=requests, seed=seed)
    ev.check(cfg, config)
    return rec, cfg, ev


def fmt_s(x: float) -> str:
    if math.isinf(x):
        return "∞"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


# The engine's backend options, shared by evaluate / tune (with --evaluator real) and serve.
_WHERE = ("where the engine's workers run: local processes, or ray actors "
          "(pip install 'hastune[ray]')")
BACKEND_OPTION = typer.Option("local", "--backend", help=f"with --evaluator real: {_WHERE}")
SERVE_BACKEND_OPTION = typer.Option("local", "--backend", help=_WHERE)
RAY_ADDRESS_OPTION = typer.Option(None, "--ray-address", help="with --backend ray: the "
                                  "cluster to join (e.g. HEAD:6379; default: a local one)")


def print_caveats(con, caveats: list[str]) -> None:
    """A result's caveats (hastune.caveats) on the console `con`, in yellow, one each."""
    for c in caveats:
        con.print(f"[yellow]caveat:[/] {escape(c)}")


def terms_line(rec: dict) -> str:
    """One console line on the engine terms a result's runs had (engine_terms.record)."""
    if not rec.get("on"):
        return f"engine terms off ({rec['engine']}): {rec['why']}"
    whose = ("pooled, no measured runs on this GPU" if rec["fitted_for"] == "pooled"
             else f"for {rec['fitted_for']}")
    return (f"engine terms on: {rec['engine']}'s on {rec['gpu']} ({whose}; fitted on "
            f"{rec['fitted_on']})")
