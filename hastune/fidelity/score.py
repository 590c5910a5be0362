"""The fidelity scorecard: every measured case simulated, the engine terms fitted per
(engine, GPU) with folds that leave whole (isl × osl) shapes out, errors per case and in
aggregate (median and P90 of |error|, bias = median signed error; by engine, TP and
concurrency)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hastune import engine_terms as et
from hastune.fidelity import fit as F
from hastune.fidelity.rows import Case, read_cases
from hastune.fidelity.run import ROUNDS, recipe_for, simulate

MIN_ROWS = 40   # the Done-when bar applies to engines with at least this many rows
FOLDS = 4
REFINE = 1     # Gauss-Newton steps after the fit from the first forms (at fit.START)


@dataclass
class Scored:
    case: Case
    fit_ttft: float = float("nan")   # simulated with the terms fitted on all its group
    fit_tpot: float = float("nan")
    cv_ttft: float = float("nan")    # simulated with the terms of the fold that left it out
    cv_tpot: float = float("nan")
    kernels_ttft: float = float("nan")  # kernels and scheduler only (no fitted terms)
    kernels_tpot: float = float("nan")


@dataclass
class Scorecard:
    rows: list[Scored]
    terms: dict[tuple[str, str], np.ndarray]
    folds: dict[tuple[str, str], list[list[str]]]
    wall_s: float = 0.0


def _err(sim: float, meas: float) -> float:
    return sim / meas - 1.0


def stats(errs: list[float]) -> dict[str, float]:
    e = np.asarray([x for x in errs if np.isfinite(x)])
    if not len(e):
        return {"n": 0}
    return {"n": int(len(e)), "median_abs_pct": float(np.median(np.abs(e)) * 100),
            "p90_abs_pct": float(np.percentile(np.abs(e), 90) * 100),
            "bias_pct": float(np.median(e) * 100)}


def fold_shapes(cases: list[Case], k: int = FOLDS) -> list[list[str]]:
    """Whole (isl × osl) shapes into k folds, round-robin in sorted order (deterministic)."""
    shapes = sorted({c.shape for c in cases}, key=lambda s: tuple(map(int, s.split("x"))))
    k = max(2, min(k, len(shapes)))
    return [shapes[i::k] for i in range(k)]


def _ticker(progress: Callable[[str, int, int], None] | None, total: int):
    done = [0]

    def tick(what: str) -> bool:
        done[0] += 1
        if progress:
            progress(what, done[0], max(total, done[0]))
        return True

    return tick


def run(path: str | Path, models: dict[str, str] | None = None, rounds: int = ROUNDS,
        only: Callable[[Case], bool] | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        refine: int = REFINE, prefill: bool = False) -> Scorecard:
    t0 = time.perf_counter()
    path = Path(path)
    cases = [c for c in read_cases(path) if only is None or only(c)]
    groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for c in cases:
        groups[c.group].append(c)
    card = Scorecard([Scored(c) for c in cases], {}, {})
    scored = {id(r.case): r for r in card.rows}
    tick = _ticker(progress, len(cases) * (2 + 5 * (1 + refine * (FOLDS + 1))))
    for g, members in groups.items():
        _group(card, scored, g, members, models or {}, path, rounds, refine, tick, prefill)
    card.wall_s = time.perf_counter() - t0
    return card


def _group(card: Scorecard, scored: dict, g: tuple[str, str], members: list[Case],
           models: dict[str, str], path: Path, rounds: int, refine: int, tick,
           prefill: bool = False) -> None:
    """One (engine, GPU): the first forms (at fit.START), the folds' fits and checks, the fit
    on all."""
    from hastune.evaluators.profile import resolve_profile

    profiles, sims = {}, {}
    for c in members:
        rec = recipe_for(c, models, path, rounds)
        key = (rec.model, c.weights)
        if key not in profiles:
            profiles[key] = resolve_profile(rec, quiet=True)[0]
        sims[c.line] = (profiles[key], rec)
    mem = next(iter(profiles.values())).memory.gpu_bytes / 2**30
    sched = et.scheduler_defaults(g[0], mem, g[1])
    label = f"{g[0]} {g[1]}"

    def sim_of(c: Case, terms: et.EngineTerms):
        prof, rec = sims[c.line]
        return simulate(c, prof, terms, rec), float(c.clients - 1)

    def form(c: Case, at=None) -> F.Form:
        tick(f"{label}: linear forms")
        return F.form(lambda t: sim_of(c, t), sched, g[0], at, g[1], prefill)

    first = {c.line: form(c, F.START) for c in members}  # the forms every fit starts from
    # the kernels alone: no engine overheads and no front end (what `terms: false` leaves)
    kernels = {c.line: sim_of(c, F.terms(g[0], g[1], sched, F.PRIOR))[0] for c in members}

    def fitted(rows: list[Case]) -> np.ndarray:
        """Fit on `rows` from their first forms, then `refine` Gauss-Newton steps: the forms
        of these rows again around the terms found, and a fit on those."""
        mt = np.array([c.ttft_ms for c in rows])
        mp = np.array([c.tpot_ms for c in rows])
        th = F.fit([first[c.line] for c in rows], mt, mp, prefill=prefill)
        for _ in range(refine):
            th = F.fit([form(c, th) for c in rows], mt, mp, start=th, prefill=prefill)
        return th

    folds = fold_shapes(members)
    card.folds[g] = folds
    for shapes in folds:
        t_f = F.terms(g[0], g[1], sched, fitted([c for c in members if c.shape not in shapes]))
        for c in (c for c in members if c.shape in shapes):
            s = sim_of(c, t_f)[0]
            r = scored[id(c)]
            r.cv_ttft, r.cv_tpot = s.ttft_ms, s.tpot_ms
            tick(f"{label}: cross-validation")
    theta = fitted(members)
    card.terms[g] = theta
    t_all = F.terms(g[0], g[1], sched, theta)
    for c in members:
        s = sim_of(c, t_all)[0]
        r = scored[id(c)]
        r.fit_ttft, r.fit_tpot = s.ttft_ms, s.tpot_ms
        r.kernels_ttft, r.kernels_tpot = kernels[c.line].ttft_ms, kernels[c.line].tpot_ms
        tick(f"{label}: fitted")


def aggregate(card: Scorecard) -> dict:
    """Errors by engine (and all), by engine and GPU, by engine, GPU and isl × osl shape (what
    a cross-validation fold leaves out whole), by TP and by concurrency, for the fitted,
    cross-validated and kernels-only simulations."""
    out: dict = {}
    keys = {"engine": lambda c: c.engine, "engine_gpu": lambda c: f"{c.engine}@{c.gpu}",
            "shape": lambda c: f"{c.engine}@{c.gpu} {c.shape}",
            "tp": lambda c: f"tp{c.tp}", "clients": lambda c: f"c{c.clients}"}
    for name, key in keys.items():
        groups: dict[str, list[Scored]] = defaultdict(list)
        for r in card.rows:
            groups[key(r.case)].append(r)
        out[name] = {k: _block(v) for k, v in sorted(groups.items())}
    out["all"] = _block(card.rows)
    return out


def _block(rows: list[Scored]) -> dict:
    b = {"rows": len(rows)}
    for kind in ("cv", "fit", "kernels"):
        b[kind] = {"ttft": stats([_err(getattr(r, f"{kind}_ttft"), r.case.ttft_ms) for r in rows]),
                   "tpot": stats([_err(getattr(r, f"{kind}_tpot"), r.case.tpot_ms) for r in rows])}
    return b


def passes(agg: dict) -> dict[str, bool]:
    """The issue's bar per engine with ≥ MIN_ROWS rows: cross-validated median |error| ≤ 20%
    (TTFT) and ≤ 8% (TPOT), bias within ±10% for both."""
    out = {}
    for eng, b in agg["engine"].items():
        if b["rows"] < MIN_ROWS:
            continue
        t, p = b["cv"]["ttft"], b["cv"]["tpot"]
        out[eng] = (t["median_abs_pct"] <= 20 and p["median_abs_pct"] <= 8
                    and abs(t["bias_pct"]) <= 10 and abs(p["bias_pct"]) <= 10)
    return out
