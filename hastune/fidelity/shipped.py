"""`hastune fidelity CSV --shipped`: the engine terms as shipped (hastune/engine_fitted.py, no
refit on the file) on every row of a file of measured runs — what a user's recipe gets on that
engine, GPU and model. Each row is `scored` (its simulated mean TTFT and TPOT beside the
measured) or `unsupported` with the reason (a system or model hastune has no profile or config
for, a precision it does not model, a disaggregated deployment fudg does not model): nothing is
dropped, and the coverage is part of the answer. Rows are simulated as `fidelity` simulates
them (hastune.fidelity.run: one aggregated instance, the benchmark's clients); a disaggregated
row as a fudg deployment of its prefill and decode workers, with the same engine terms and
client rules (nothing fitted on disaggregated runs), and summarised on its own (`modes`). A
model's config is found without `--model` in examples/models or in aiconfigurator-core's
packaged model configs."""

from __future__ import annotations

import math
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from hastune import engine_terms as et
from hastune.errors import InputError
from hastune.fidelity.harness import harness
from hastune.fidelity.rows import Row, read_rows
from hastune.fidelity.run import overdrawn, recipe_for, simulate
from hastune.model_ref import load_arch
from hastune.speculative import Speculative


def score(path: str | Path, models: dict[str, str] | None = None,
          only: Callable[[Row], bool] | None = None,
          progress: Callable[[str, int, int], None] | None = None,
          terms: bool = True) -> dict[str, Any]:
    """Every row of `path` with the shipped terms (`terms` False: the kernels alone, with the
    engines' scheduler defaults): {"rows": [...], "engines": {engine: summary} (every row),
    "modes": {"agg" | "disagg": {"rows", "scored", "coverage", "engines": {engine: summary}}}
    (each mode on its own), "coverage", "wall_s"}."""
    from hastune.evaluators.profile import resolve_profile

    t0 = time.perf_counter()
    path = Path(path)
    rows = [r for r in read_rows(path) if only is None or only(r)]
    profiles: dict[tuple, Any] = {}
    out = []
    for i, r in enumerate(rows):
        if progress:
            progress("simulating (shipped terms)", i, len(rows))
        out.append(_row(r, path, models or {}, profiles, resolve_profile, terms))
    scored = [o for o in out if o["status"] == "scored"]
    by_engine: dict[str, list[dict]] = defaultdict(list)
    for o in out:
        by_engine[o["engine"]].append(o)
    return {"file": str(path), "terms": "shipped" if terms else "none", "rows": out,
            "coverage": len(scored) / len(out) if out else 0.0,
            "engines": {e: summary(v) for e, v in sorted(by_engine.items())},
            "modes": modes(out), "wall_s": time.perf_counter() - t0}


def modes(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """The rows of each mode (agg, disagg, any other the file has) summarised on their own:
    how many, how many scored, and each engine's `summary`."""
    out: dict[str, dict[str, Any]] = {}
    for m in sorted({r["mode"] for r in rows}, key=lambda m: (m != "agg", m != "disagg", m)):
        mine = [r for r in rows if r["mode"] == m]
        n = sum(r["status"] == "scored" for r in mine)
        by_engine: dict[str, list[dict]] = defaultdict(list)
        for r in mine:
            by_engine[r["engine"]].append(r)
        out[m] = {"rows": len(mine), "scored": n, "coverage": n / len(mine),
                  "engines": {e: summary(v) for e, v in sorted(by_engine.items())}}
    return out


def _row(r: Row, path: Path, models: dict[str, str], profiles: dict, resolve,
         with_terms: bool = True) -> dict:
    base = {"id": r.id, "engine": r.engine, "model": r.model, "gpu": r.system,
            "mode": r.mode, "line": r.line}
    measured = {"ttft_ms": {"measured": r.ttft_ms, "simulated": None},
                "tpot_ms": {"measured": r.tpot_ms, "simulated": None}}
    if r.case is None:
        return {**base, "status": "unsupported", "reason": r.reason, **measured}
    c = r.case
    try:
        rec = recipe_for(c, models, path)
        key = (rec.model, c.weights, c.gpu, c.engine)
        if key not in profiles:
            profiles[key] = resolve(rec, quiet=True)[0]
        layers = _layers(rec, profiles) if c.nextn else 0  # MTP's step needs them
    except (InputError, ValueError) as exc:
        return {**base, "gpu": c.gpu, "status": "unsupported", "reason": _why(exc),
                **measured}
    prof = profiles[key]
    terms = et.for_profile(rec.engine, prof) if with_terms else None
    note = None
    if terms is None:
        note = ("the engine terms are off for this profile (measured on a device, or turned "
                "off): the kernels alone")
    else:  # the benchmark client the row was measured with, as `fidelity` simulates it
        terms = replace(terms, frontend=replace(terms.frontend, queued=harness(c).queued))
        if terms.gpu != c.gpu:
            note = (f"no terms fitted on {c.gpu} for {c.engine}: the engine's pooled ones "
                    f"({terms.fitted_on or 'none'})")
    if c.nextn:  # what the decode pools ran, said beside the figures
        mtp = (f"decode pools run MTP, {c.nextn} draft token{'s' if c.nextn > 1 else ''} a "
               f"step, {Speculative(c.nextn, layers).tokens:.4g} tokens kept a step "
               "(hastune.speculative: aiconfigurator's default acceptance)")
        note = f"{note}; {mtp}" if note else mtp
    try:
        with warnings.catch_warnings():  # a run with no second token: its TPOT is nan
            warnings.simplefilter("ignore", RuntimeWarning)
            s = simulate(c, prof, terms, rec, layers=layers)
    except ValueError as exc:  # the profile lacks what the row needs (a TP degree, …)
        return {**base, "gpu": c.gpu, "status": "unsupported", "reason": _why(exc),
                **measured}
    if not math.isfinite(s.ttft_ms):  # rejected: as simulated, it cannot hold the row's runs
        return {**base, "gpu": c.gpu, "status": "unsupported", "reason": (
            f"simulated: requests rejected, the KV room left beside the weights at TP "
            f"{c.tp} ({c.engine}'s memory share of the profile's {c.gpu}) does not hold "
            f"{c.isl} + {c.osl} tokens"), **measured}
    why = overdrawn(c, prof)  # after the run: a prompt no KV room holds is said as that
    if why:
        return {**base, "gpu": c.gpu, "status": "unsupported", "reason": why, **measured}
    return {**base, "gpu": c.gpu, "status": "scored", "reason": note,
            "ttft_ms": {"measured": c.ttft_ms, "simulated": s.ttft_ms},
            "tpot_ms": {"measured": c.tpot_ms, "simulated": s.tpot_ms}}


def _layers(rec, cache: dict) -> int:
    """The layers of the recipe's model (its LLM's), read once per model."""
    key = ("layers", rec.model)
    if key not in cache:
        cache[key] = load_arch(rec).llm.layers
    return cache[key]


def _why(exc: Exception) -> str:
    """A row's reason from what refused it: an InputError's field and problem; a deployment
    the config schema refuses (a pydantic error, e.g. more GPUs in one replica than it
    allows) by its field, message and value; anything else on one line."""
    if isinstance(exc, InputError):
        return f"{exc.field + ': ' if exc.field else ''}{exc.problem}"
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e.get("loc", ())) or "config"
        return f"config {loc}: {e.get('msg', 'invalid')} (got {e.get('input')!r})"
    return " ".join(str(exc).split())


def cause(reason: str) -> str:
    """A reason's kind, to count rows by: the field it names (a row's line number dropped),
    or what a profile lacks; a deployment nodg or fudg does not model by what it lacks (its
    numbers dropped)."""
    if reason.startswith(("disagg: ", "agg: ")):
        return reason.split(" (")[0]
    if "tensor-parallel variant" in reason:
        return "profile: no such tensor-parallel degree"
    if "attention-DP variant" in reason:  # a group larger than the tables' collectives
        return "profile: no such attention-DP group"
    if reason.startswith("measured: ") and "cannot have prefilled" in reason:
        return "measured: faster than the kernels prefill its prompts"
    if reason.startswith("simulated: requests rejected"):
        return "simulated: requests rejected (no KV room beside the weights)"
    reason = re.sub(r"^line \d+: ", "", reason)
    return reason.split(":")[0].split(" (")[0]


def errors(scored: list[dict], k: str) -> np.ndarray:
    """The relative errors (simulated / measured − 1) of `k` ("ttft_ms" or "tpot_ms") over
    scored rows that have a measurement and a finite simulation."""
    return np.array([r[k]["simulated"] / r[k]["measured"] - 1.0 for r in scored
                     if r[k]["measured"] and np.isfinite(r[k]["simulated"])])


def summary(rows: list[dict]) -> dict[str, Any]:
    """An engine's rows: how many, how many scored, and of those the median |error|, its P90
    and the median signed error (bias) of mean TTFT and TPOT, in percent."""
    scored = [r for r in rows if r["status"] == "scored"]
    out: dict[str, Any] = {"rows": len(rows), "scored": len(scored)}
    for k in ("ttft_ms", "tpot_ms"):
        errs = errors(scored, k)
        name = k[:4]
        out[f"{name}_median_abs_pct"] = float(np.median(np.abs(errs))) * 100 if errs.size \
            else None
        out[f"{name}_p90_abs_pct"] = float(np.percentile(np.abs(errs), 90)) * 100 \
            if errs.size else None
        out[f"{name}_bias_pct"] = float(np.median(errs)) * 100 if errs.size else None
    reasons: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["status"] == "unsupported":
            reasons[cause(str(r["reason"]))] += 1
    out["unsupported_by"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return out
