"""`hastune validate FILE`: check a recipe, deployment config or profile."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from hastune.cli.app import app
from hastune.errors import EXIT_INPUT_ERROR, InputError
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
    rec = load_recipe(path)
    types = rec.cluster.types
    if len(types) == 1:
        ev = _check_recipe(rec, path)
        return kind, (f"{rec.model} on {rec.cluster.gpus}× {rec.cluster.gpu}, profile "
                      f"{ev.profile.name}, {len(ev.requests)} sample requests ok")
    # several GPU types: each checked as a cluster of that type alone (its profile, the
    # spaces on its GPUs); simulate / tune refuse such a recipe for now (check_one_type)
    names = []
    for i, t in enumerate(types):
        one = rec.model_copy(update={"cluster": rec.cluster.only(t.gpu)})
        try:
            ev = _check_recipe(one, path)
        except InputError as exc:
            field = exc.field
            if field and field.startswith("cluster.") and exc.file == str(path):
                field = f"cluster.inventory[{i}]" + field.removeprefix("cluster")
            raise InputError(exc.file, field, f"{exc.problem} (GPU type {t.gpu}, inventory "
                             f"entry {i})", exc.fix) from None
        names.append(f"{t.gpus}× {t.gpu} (profile {ev.profile.name})")
    return kind, (f"{rec.model} on {' + '.join(names)}, budget {rec.cluster.gpus} GPUs, "
                  f"{len(ev.requests)} sample requests ok; simulate and tune take one GPU "
                  "type for now")


def _check_recipe(rec, path: Path):
    """The recipe's profile, request sample and search spaces checked (on a cluster of one
    GPU type); returns the evaluation."""
    from hastune.evaluators.sim import Evaluation
    from hastune.space import space_for

    ev = Evaluation(rec, requests=min(rec.workload.requests, 200))  # profile, trace checks
    for arch in rec.architectures:  # each space exists and holds something this can run
        space = space_for(arch, str(path), rec.search_space, ev.profile)
        own = rec.search_space and space.source == str(rec.resolve(rec.search_space))
        ev.check_space(space, rec.search_space if own else f"search_spaces/{arch}.yaml")
    return ev


@app.command()
def validate(files: list[Path] = typer.Argument(..., help="recipe, deployment or profile YAML"),
             as_json: bool = typer.Option(False, "--json", help="print one JSON object: a "
                                          "result per file")) -> None:
    """Check input files: every one, one line each (the bad ones' errors on stderr). Exit code
    2 when any is bad."""
    from hastune.cli.common import dumps

    console = Console(highlight=False, stderr=as_json)
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    results = []
    for f in files:
        try:
            kind, desc = validate_file(f)
        except InputError as exc:
            errors.print(f"[bold red]error:[/] {escape(exc.message)}")  # one line each
            results.append({"file": str(f), "ok": False, **exc.as_dict()})
            continue
        results.append({"file": str(f), "ok": True, "kind": kind, "description": desc})
        if not as_json:
            console.print(f"[green]ok[/] {escape(str(f))} ({kind}): {escape(desc)}")
    bad = sum(1 for r in results if not r["ok"])
    code = EXIT_INPUT_ERROR if bad else 0
    if as_json:
        first = next((r for r in results if not r["ok"]), None)
        error = {k: first[k] for k in ("error", "file", "field", "fix", "message")} \
            if first else {}
        if bad > 1:
            error["error"] = f"{bad} of {len(results)} files are bad; the first: {first['error']}"
        print(dumps({**error, "ok": not bad, "checked": len(results), "bad": bad,
                     "files": results, "exit_code": code}))
    elif len(results) > 1:
        console.print(f"{len(results) - bad} of {len(results)} files ok")
    if code:
        raise typer.Exit(code)
