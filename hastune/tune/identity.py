"""What a study was tuned for: the recipe (with the files it names and the profile it reads)
and the sampler. A resume or a `--baseline` against another identity is refused unless
`--force`: a study's trials are only comparable under one recipe, and a summary labelled
with one sampler must have been searched by it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hastune.errors import InputError
from hastune.recipe import Recipe

ATTR = "identity"


def recipe_sha256(rec: Recipe, profile: Any | None = None) -> str:
    """A hash of everything in the recipe that decides a trial's result: its fields, the
    bytes of the trace and search-space files it names, and the profile it reads."""
    h = hashlib.sha256(json.dumps(rec.model_dump(mode="json"), sort_keys=True).encode())
    for rel in (rec.workload.trace, rec.search_space):
        if rel:
            p = rec.resolve(rel)
            h.update(p.read_bytes() if p.is_file() else str(p).encode())
    if profile is not None:
        h.update(json.dumps(profile.model_dump(mode="json"), sort_keys=True).encode())
    return h.hexdigest()


def study_identity(rec: Recipe, sha: str, sampler: str, seed: int, evaluator: str) -> dict:
    return {"recipe": rec.name, "recipe_sha256": sha, "sampler": sampler, "seed": seed,
            "evaluator": evaluator}


def check_resume(study, want: dict, force: bool, where: str) -> list[dict]:
    """Record `want` on a new study; on a resumed one, refuse (InputError) a different
    recipe, sampler or evaluator unless `force`. Returns the study's history of
    identities (the earlier ones first, `want` last)."""
    attrs = study.user_attrs
    history: list[dict] = list(attrs.get(ATTR + "_history", []))
    have = attrs.get(ATTR)
    if have is None:
        study.set_user_attr(ATTR, want)
        study.set_user_attr(ATTR + "_history", [want])
        return [want]
    # the seed may differ: processes on several machines may seed their samplers apart
    changed = [k for k in ("recipe_sha256", "sampler", "evaluator")
               if have.get(k) != want.get(k)]
    if not changed:
        return history or [have]
    if not force:
        what = ", ".join(_says(k, have, want) for k in changed)
        raise InputError(where, "--sampler" if changed[0] != "recipe_sha256" else "recipe",
                         f"study {study.study_name!r} was tuned with other settings ({what})",
                         "run it with its own settings to resume, give another --study or "
                         "--out to start afresh, or pass --force to continue it with these "
                         "(the summary then lists every setting the study was searched with)")
    history = [*(history or [have]), want]
    study.set_user_attr(ATTR, want)
    study.set_user_attr(ATTR + "_history", history)
    return history


def _says(key: str, have: dict, want: dict) -> str:
    if key == "recipe_sha256":
        return (f"recipe {have.get('recipe')!r} as it was (sha256 {have.get(key, '')[:12]}), "
                f"now {want.get('recipe')!r} (sha256 {want.get(key, '')[:12]})")
    return f"{key} {have.get(key)!r}, now {want.get(key)!r}"


def check_baseline(path: Path, base: dict, sha: str, recipe_name: str, force: bool) -> None:
    """Refuse a --baseline summary of another recipe (unless `force`)."""
    theirs = base.get("recipe_sha256")
    if theirs == sha or force:
        return
    if theirs is None:
        problem = (f"the baseline records no recipe identity (recipe {base.get('recipe')!r}), "
                   "so it cannot be checked to be of this recipe")
    else:
        problem = (f"the baseline is of another recipe: {base.get('recipe')!r} sha256 "
                   f"{theirs[:12]}, this run's {recipe_name!r} is {sha[:12]}")
    raise InputError(path, "recipe_sha256", problem,
                     "give the summary.json of a run of this same recipe (model, cluster, "
                     "workload, SLOs, search space), or pass --force to compare anyway")


def read_baseline(path: Path) -> dict:
    """A previous run's summary.json (`--baseline`): a JSON object with a goodput_rps."""
    if not path.is_file():
        raise InputError(path, None, "no baseline summary there (no such regular file)",
                         "give the summary.json of a previous `hastune tune` run")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise InputError(path, None, f"not valid JSON ({why})",
                         "give the summary.json of a previous run") from None
    except OSError as exc:
        raise InputError(path, None, f"cannot read it ({exc.strerror or exc})",
                         "give the summary.json of a previous run") from None
    if not isinstance(data, dict) or not isinstance(data.get("goodput_rps"), (int, float)):
        raise InputError(path, "goodput_rps", "missing or not a number",
                         "give the summary.json of a previous `hastune tune` run")
    return data
