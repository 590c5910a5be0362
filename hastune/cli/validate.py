"""`hastune validate FILE`: check a recipe, deployment config or profile."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from hastune.cli import app
from hastune.errors import InputError
from hastune.yamlio import read_yaml_mapping

KINDS = ("recipe", "deployment", "profile")


def detect_kind(data: dict, path: Path) -> str:
    kind = data.get("kind")
    if kind is not None:
        if kind not in KINDS:
            raise InputError(path, "kind", f"unknown kind {kind!r}",
                             f"use one of {', '.join(KINDS)}")
        return str(kind)
    if "architecture" in data and ("slo" not in data and "workload" not in data):
        return "deployment"
    if "slo" in data or "workload" in data or "cluster" in data:
        return "recipe"
    if "decode" in data or "prefill" in data:
        return "profile"
    raise InputError(path, "kind", "cannot tell whether this is a recipe, a deployment config or "
                     "a profile", "add kind: recipe | deployment | profile")


def validate_file(path: Path) -> tuple[str, str]:
    """Validate one file; returns (kind, one-line description). Raises InputError."""
    from hastune.config import parse_config
    from hastune.profile import load_profile
    from hastune.recipe import load_recipe

    data = read_yaml_mapping(path, "recipe/config/profile")
    kind = detect_kind(data, path)
    if kind == "deployment":
        cfg = parse_config(data, path)
        return kind, f"{cfg.architecture} on {cfg.gpus} GPUs"
    if kind == "profile":
        prof = load_profile(path)
        return kind, f"{prof.model} on {prof.gpu} ({prof.source.split(':')[0]})"
    from hastune.evaluate import Evaluation
    from hastune.space import space_for

    rec = load_recipe(path)
    ev = Evaluation(rec, requests=min(rec.workload.requests, 200))  # profile, trace checks
    for arch in rec.architectures:  # each space exists and holds something this can run
        space = space_for(arch, str(path), rec.search_space)
        own = rec.search_space and space.source == str(rec.resolve(rec.search_space))
        ev.check_space(space, rec.search_space if own else f"search_spaces/{arch}.yaml")
    return kind, (f"{rec.model} on {rec.cluster.gpus}× {rec.cluster.gpu}, profile "
                  f"{ev.profile.name}, {len(ev.requests)} sample requests ok")


@app.command()
def validate(files: list[Path] = typer.Argument(..., help="recipe, deployment or profile YAML")
             ) -> None:
    """Check input files; print one line each. Exit code 2 on the first bad one."""
    console = Console(highlight=False)
    for f in files:
        kind, desc = validate_file(f)
        console.print(f"[green]ok[/] {f} ({kind}): {desc}")
