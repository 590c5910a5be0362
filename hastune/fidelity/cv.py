"""`hastune fidelity CSV --cv model|gpu`: do the engine terms transfer? Leave-one-model-out
(or leave-one-GPU-out) cross-validation of the terms as `hastune fidelity --write` fits them.

A "model" is an architecture with every checkpoint of it in the file (score.architecture_of:
DeepSeek-R1, DeepSeek-V3 and their NVFP4 quantisations are one model; so are an fp8 and a bf16
Llama-3.1-8B): a checkpoint held out alone would leave its twin's rows, the same kernels, in
the fit. For every model (GPU) of the file's aggregated rows that hastune can simulate, the
terms are fitted on every other model's (GPU's) rows — by the same code and the same grouping as the
shipped terms (hastune.fidelity.score.Fitter: `table`) — and that model's (GPU's) rows are
simulated with them: with its (engine, GPU)'s terms where the training rows have that group,
else with its engine's pooled ones (the engine's GPU with the most training rows), as a
recipe on a GPU without fitted terms gets them. A row whose engine has no training rows left
(the engine's only model) has no held-out prediction. Beside it, the in-sample fit: the terms
fitted on every row, on the same rows.

Per engine the report gives, for each held-out model (GPU), the median |error| and the bias
(median signed error) of mean TTFT and TPOT over its rows, and their means over the held-out
models (each model counts once, whatever its rows). `passes`: issue 36's bar for engines with
≥ MIN_ROWS rows — the mean TTFT median |error| ≤ 20%, TPOT ≤ 10%, both biases within ±10%.
Disaggregated rows are not fitted on and not held out (`fidelity --shipped` reports them)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hastune.errors import InputError
from hastune.fidelity import fit as F
from hastune.fidelity.rows import Case, read_rows
from hastune.fidelity.score import REFINE, Fitter, _ticker

BY = ("model", "gpu")
MIN_ROWS = 100                       # the bar applies to engines with at least this many rows
BAR = {"ttft": 20.0, "tpot": 10.0, "bias": 10.0}
FIGURES = ("ttft_median_abs_pct", "ttft_bias_pct", "tpot_median_abs_pct", "tpot_bias_pct")


def key_of(by: str) -> Callable[[Case], str]:
    if by not in BY:
        raise InputError(None, "--cv", f"unknown {by!r}", f"use one of {', '.join(BY)}")
    return (lambda c: c.model) if by == "model" else (lambda c: c.gpu)


def run(path: str | Path, by: str = "model", models: dict[str, str] | None = None,
        only: Callable[[Case], bool] | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        refine: int = REFINE, prefill: bool = False, share: str | None = None
        ) -> dict[str, Any]:
    """The cross-validation of `path`'s aggregated rows by `by` (BY): {"by", "engines":
    {engine: {"rows", by + "s": {key: {"rows", "cv", "fit"}}, "cv", "fit", "note"}},
    "passes", "folds": {key: {"engine@gpu": terms}}, "per_row", "rows", "unsupported",
    "wall_s"}. InputError when the file has fewer than two models (GPUs) to hold out."""
    with warnings.catch_warnings():  # a run with no second token: its TPOT is nan
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run(path, by, models, only, progress, refine, prefill, share)


def _run(path, by, models, only, progress, refine, prefill, share) -> dict[str, Any]:
    t0 = time.perf_counter()
    path = Path(path)
    key = key_of(by)
    cases = [r.case for r in read_rows(path) if r.case is not None and r.case.pools is None
             and (only is None or only(r.case))]
    if not cases:
        raise InputError(path, "mode", "no aggregated (mode agg) rows to fit on",
                         "give aggregated runs")
    held = sorted({key(c) for c in cases})
    tick = _ticker(progress, len(cases) * 5 * (1 + REFINE * (len(held) + 1)))
    fitter = Fitter(cases, models or {}, path, refine=refine, prefill=prefill, tick=tick,
                    strict=False, share=share)
    if by == "model":  # a model with every checkpoint of its architecture (Fitter.architecture)
        label: dict[str, set[str]] = {}
        for c in fitter.cases:
            label.setdefault(fitter.architecture(c), set()).add(c.model)
        names = {a: " + ".join(sorted(m)) for a, m in label.items()}
        key = lambda c: names[fitter.architecture(c)]  # noqa: E731
    held = sorted({key(c) for c in fitter.cases})
    if len(held) < 2:
        raise InputError(path, "--cv", f"the rows hastune can simulate hold one {by} only "
                         f"({held[0] if held else 'none'}): cannot hold one out",
                         f"give rows of two or more {by}s, or leave --cv out")
    fit_table = fitter.table(fitter.cases)
    fit_pred = {c.line: fitter.run(c, fit_table.theta(c)) for c in fitter.cases}
    cv_pred, folds = {}, {}
    for k in held:
        t = fitter.table([c for c in fitter.cases if key(c) != k])
        folds[k] = {f"{e}@{g}": dict(zip(F.NAMES, map(float, th)))
                    for (e, g), th in t.terms.items()}
        for c in fitter.cases:
            th = t.theta(c) if key(c) == k else None
            if th is not None:
                cv_pred[c.line] = fitter.run(c, th)
    engines = {e: _engine([c for c in fitter.cases if c.engine == e], key, by, cv_pred,
                          fit_pred) for e in sorted({c.engine for c in fitter.cases})}
    per_row = [{"id": c.id, "engine": c.engine, "model": c.model, "gpu": c.gpu, "tp": c.tp,
                "isl": c.isl, "osl": c.osl, "clients": c.clients, "ttft_ms": c.ttft_ms,
                "tpot_ms": c.tpot_ms,
                "cv_ttft_ms": cv_pred[c.line].ttft_ms if c.line in cv_pred else None,
                "cv_tpot_ms": cv_pred[c.line].tpot_ms if c.line in cv_pred else None,
                "fit_ttft_ms": fit_pred[c.line].ttft_ms, "fit_tpot_ms": fit_pred[c.line].tpot_ms}
               for c in fitter.cases]
    return {"file": str(path), "by": by, "share": fitter.share, "rows": len(fitter.cases),
            "agg_rows": len(cases), "unsupported": len(fitter.unsupported),
            "engines": engines, "passes": passes(engines),
            "terms": {f"{e}@{g}": dict(zip(F.NAMES, map(float, th)))
                      for (e, g), th in fit_table.terms.items()},
            "folds": folds, "per_row": per_row, "wall_s": time.perf_counter() - t0}


def stats(rows: list[Case], pred: dict) -> dict[str, Any] | None:
    """Median |error| and bias (median signed error), %, of mean TTFT and TPOT over the rows
    with a prediction in `pred` (line → Simulated); None when none has one."""
    have = [c for c in rows if c.line in pred]
    if not have:
        return None
    out: dict[str, Any] = {"rows": len(have)}
    for k in ("ttft", "tpot"):
        e = np.array([getattr(pred[c.line], f"{k}_ms") / getattr(c, f"{k}_ms") - 1.0
                      for c in have])
        e = e[np.isfinite(e)]
        out[f"{k}_median_abs_pct"] = float(np.median(np.abs(e))) * 100 if e.size else None
        out[f"{k}_bias_pct"] = float(np.median(e)) * 100 if e.size else None
    return out


def mean(per: dict[str, dict], kind: str) -> dict[str, Any] | None:
    """The mean of each figure over the held-out keys with one (`per[key][kind]`), each key
    counting once; None when no key has one."""
    got = [v[kind] for v in per.values() if v[kind] is not None]
    if not got:
        return None
    out: dict[str, Any] = {"held_out": len(got), "rows": sum(g["rows"] for g in got)}
    for f in FIGURES:
        xs = [g[f] for g in got if g[f] is not None]
        out[f] = float(np.mean(xs)) if xs else None
    return out


def _engine(mine: list[Case], key, by: str, cv_pred: dict, fit_pred: dict) -> dict:
    per = {}
    for k in sorted({key(c) for c in mine}):
        rows = [c for c in mine if key(c) == k]
        per[k] = {"rows": len(rows), "cv": stats(rows, cv_pred), "fit": stats(rows, fit_pred)}
    out = {"rows": len(mine), f"{by}s": per, "cv": mean(per, "cv"), "fit": mean(per, "fit")}
    if out["cv"] is None:
        out["note"] = (f"one {by} of this engine ({', '.join(per)}): cannot hold one out, "
                       "no held-out figure")
    return out


def passes(engines: dict[str, dict]) -> dict[str, bool]:
    """Issue 36's bar per engine with ≥ MIN_ROWS rows and a held-out figure: the mean over
    held-out keys of TTFT median |error| ≤ 20%, TPOT ≤ 10%, both biases within ±10%."""
    out = {}
    for e, b in engines.items():
        cv = b["cv"]
        if b["rows"] < MIN_ROWS or cv is None:
            continue
        vals = [cv[f] for f in FIGURES]
        out[e] = (None not in vals and cv["ttft_median_abs_pct"] <= BAR["ttft"]
                  and cv["tpot_median_abs_pct"] <= BAR["tpot"]
                  and abs(cv["ttft_bias_pct"]) <= BAR["bias"]
                  and abs(cv["tpot_bias_pct"]) <= BAR["bias"])
    return out
