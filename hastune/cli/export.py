"""`hastune export CONFIG --engine vllm|sglang|dynamo|runners`: launch files for a tuned config."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from hastune.cli.app import app
from hastune.cli.common import dumps
from hastune.errors import InputError
from hastune.export import ENGINES


@app.command()
def export(
    config: Path = typer.Argument(..., help="deployment config YAML (best_config.yaml)"),
    engine: str = typer.Option(..., "--engine", "-e", help=" | ".join(ENGINES)),
    out: Path | None = typer.Option(None, "--out", "-o", help="output directory (default: "
                                    "deploy/<engine> beside CONFIG)"),
    closest: bool = typer.Option(False, "--closest", help="where the engine cannot express "
                                 "the deployment, emit the nearest one it can (and say what "
                                 "changed)"),
    recipe: Path | None = typer.Option(None, "--recipe", "-r", help="the recipe it was tuned "
                                       "with: needed for a config without a target: block, "
                                       "else checked against it"),
    backend: str | None = typer.Option(None, "--backend", help="with --engine dynamo: the "
                                       "worker engine, vllm or sglang (default: the target's)"),
    dummy_weights: bool = typer.Option(False, "--dummy-weights", help="load random weights "
                                       "(--load-format dummy): start without a checkpoint"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write the launch files of CONFIG for an engine: a script per role (encode, prefill,
    decode, replica, router) and launch.sh for vLLM and SGLang, a DynamoGraphDeployment for
    Dynamo, `hastune serve` for hastune's own engine. Every flag exists in the engine's
    pinned version (hastune/export/flags_*.json); what the engine cannot express is said in
    README.md and here, and only --closest emits a different deployment.

    Exit codes: 0 written; 2 bad input, a model or GPU other than the target's, or a
    deployment the engine cannot express (without --closest)."""
    from hastune.config import load_config
    from hastune.export import export as run_export
    from hastune.export.target import build_target, read_target, recipe_mismatch

    if engine not in ENGINES:
        raise InputError(None, "--engine", f"unknown engine {engine!r}",
                         f"use one of {', '.join(ENGINES)}")
    if backend is not None and backend not in ("vllm", "sglang"):
        raise InputError(None, "--backend", f"unknown backend {backend!r}", "use vllm or sglang")
    cfg = load_config(config)
    target = read_target(config)
    if recipe is not None:
        from hastune.recipe import load_recipe

        rec = load_recipe(recipe)
        if target is None:
            target = build_target(rec, cfg, 0.0)
        elif (bad := recipe_mismatch(target, rec)) is not None:
            field, problem = bad
            raise InputError(recipe, field, problem + f" ({config})",
                             f"export with the recipe it was tuned for ({target.recipe}), or "
                             f"tune {recipe} and export its best_config.yaml")
    if target is None:
        raise InputError(config, "target", "the config says nothing of the model, GPU and "
                         "precision it is for (written before hastune wrote a target: block, "
                         "or by hand)", "pass --recipe RECIPE (the recipe it was tuned with), "
                         "or tune again")
    if target.gpus != cfg.gpus:
        raise InputError(config, "target.gpus", f"the target block counts {target.gpus} GPUs "
                         f"and the knobs {cfg.gpus}: they were not written together",
                         "tune again, or remove the target: block and pass --recipe")
    where = out if out is not None else config.parent / "deploy" / engine
    if where.exists() and not where.is_dir():
        raise InputError(where, "--out", "is a file, not a directory",
                         "give a directory (created if missing)")
    try:
        res = run_export(cfg, target, engine, where, closest=closest, dummy=dummy_weights,
                         config_file=str(config), backend=backend)
    except OSError as exc:
        raise InputError(where, "--out", f"cannot write there ({exc.strerror or exc})",
                         "give a directory you can write") from None
    if as_json:
        if res.written:  # not written: the one JSON object is the error below
            print(dumps({"engine": engine, "out": str(res.out), "written": res.written,
                         "files": [str(f) for f in res.files],
                         "blocking": res.plan.blocking, "closest": res.plan.closest,
                         "not_expressed": res.plan.notes, "exit_code": 0}))
    else:
        con = Console(highlight=False)
        for line in res.lines():
            con.print(escape(line))
    if not res.written and res.plan.model_blocking:
        raise InputError(config, "target.model", f"{engine} cannot serve this model here: "
                         + res.plan.model_blocking[0],
                         "export for another engine (--engine vllm, or runners), or tune "
                         f"with --target {engine} for a deployment it can launch")
    if not res.written:
        raise InputError(config, "architecture", f"{engine} cannot express this deployment: "
                         + "; ".join(res.plan.blocking[:1]),
                         f"pass --closest for the nearest expressible one (README.md in "
                         f"{res.out} says what it changes)")
