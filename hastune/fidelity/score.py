"""The fidelity scorecard: every measured case simulated, the engine terms fitted per
(engine, GPU) with folds that leave whole (isl × osl) shapes out, errors per case and in
aggregate (median and P90 of |error|, bias = median signed error; by engine, TP and
concurrency)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hastune import engine_terms as et
from hastune.fidelity import fit as F
from hastune.fidelity.rows import Case, read_cases
from hastune.fidelity.run import ROUNDS, recipe_for, simulate

MIN_ROWS = 40   # the Done-when bar applies to engines with at least this many rows
FOLDS = 4


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
    notes: list[str] = field(default_factory=list)


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


def run(path: str | Path, models: dict[str, str] | None = None, rounds: int = ROUNDS,
        only: Callable[[Case], bool] | None = None,
        progress: Callable[[str, int, int], None] | None = None) -> Scorecard:
    from hastune.evaluators import resolve_profile

    t0 = time.perf_counter()
    path = Path(path)
    cases = [c for c in read_cases(path) if only is None or only(c)]
    models = models or {}
    groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for c in cases:
        groups[c.group].append(c)
    scored = {c.id + str(c.line): Scored(c) for c in cases}
    card = Scorecard(list(scored.values()), {}, {})
    done = 0
    for g, members in groups.items():
        profiles, sims = {}, {}
        for c in members:
            rec = recipe_for(c, models, path, rounds)
            key = (rec.model, c.weights)
            if key not in profiles:
                profiles[key] = resolve_profile(rec, quiet=True)[0]
            sims[c.line] = (c, profiles[key], rec)
        mem = next(iter(profiles.values())).memory.gpu_bytes / 2**30
        sched = et.scheduler_defaults(g[0], mem, g[1])

        def sim_of(c: Case, terms: et.EngineTerms, sims=sims):
            _, prof, rec = sims[c.line]
            return simulate(c, prof, terms, rec), float(c.clients - 1)

        forms = {}
        for c in members:
            forms[c.line] = F.form(lambda t, c=c: sim_of(c, t), sched, g[0])[0]
            done += 1
            if progress:
                progress(f"{g[0]} {g[1]}: forms", done, len(cases) * 3)
        meas_t = np.array([c.ttft_ms for c in members])
        meas_p = np.array([c.tpot_ms for c in members])
        theta = F.fit([forms[c.line] for c in members], meas_t, meas_p)
        card.terms[g] = theta
        folds = fold_shapes(members)
        card.folds[g] = folds
        for shapes in folds:
            train = [c for c in members if c.shape not in shapes]
            test = [c for c in members if c.shape in shapes]
            th = F.fit([forms[c.line] for c in train], np.array([c.ttft_ms for c in train]),
                       np.array([c.tpot_ms for c in train]))
            t_f = F.terms(g[0], g[1], sched, th)
            for c in test:
                s = sim_of(c, t_f)[0]
                r = scored[c.id + str(c.line)]
                r.cv_ttft, r.cv_tpot = s.ttft_ms, s.tpot_ms
                done += 1
                if progress:
                    progress(f"{g[0]} {g[1]}: cross-validation", done, len(cases) * 3)
        t_all = F.terms(g[0], g[1], sched, theta)
        for c in members:
            s = sim_of(c, t_all)[0]
            r = scored[c.id + str(c.line)]
            r.fit_ttft, r.fit_tpot = s.ttft_ms, s.tpot_ms
            f = forms[c.line]
            r.kernels_ttft, r.kernels_tpot = float(f.ttft[0]), float(f.tpot[0])
            done += 1
            if progress:
                progress(f"{g[0]} {g[1]}: fitted", done, len(cases) * 3)
    card.wall_s = time.perf_counter() - t0
    return card


def aggregate(card: Scorecard) -> dict:
    """Errors by engine (and all), by TP and by concurrency, for the fitted, cross-validated
    and kernels-only simulations."""
    out: dict = {}
    keys = {"engine": lambda c: c.engine, "engine_gpu": lambda c: f"{c.engine}@{c.gpu}",
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
