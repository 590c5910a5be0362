"""Re-fit a profile's latency forms from the engine's own step timings (`hastune calibrate`).

Input: run records that carry `engine_steps` — `hastune evaluate --evaluator real --json` and
`hastune serve --recipe R --json` write them (runners/engine/steplog.py: one row per worker
step). The forms are the profile's own (hastune/profile.py), fitted as `hastune profile` fits
measured rows (hastune.calibrate.fit: non-negative least squares on relative error):

    encode   = fixed + per_item·n + per_token·Σ x + per_token_sq·Σ x²   (x: encoder tokens)
    prefill  = fixed + per_token·Σ L + per_token_sq·Σ L²
    decode   = fixed + per_seq·n + per_context_token·Σ context

Only steps that ran alone on the whole device are fitted (share 1, no concurrent encode /
local prefill on the same worker: those are the share curves' business, which stay). A
seeded quarter of each stage's steps is held out. Two candidates per stage: the form re-fitted
on the rest, and the profile's form scaled by one factor (the median measured/predicted
ratio — the safer one when the steps cover few shapes); the one with the smaller held-out
median error is kept, then scaled so that it adds up to the recorded steps' total seconds (the
simulator sums step times: a form fitted to the median would leave out the slow steps of a
busy machine). `total_pct` is Σ predicted / Σ measured − 1. A stage with fewer than
`min_rows` steps keeps its coefficients.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hastune.calibrate.fit import error_stat, fit_linear
from hastune.errors import InputError
from hastune.profile import Profile

NAMES = {
    "encode": ("fixed_s", "per_item_s", "per_token_s", "per_token_sq_s"),
    "prefill": ("fixed_s", "per_token_s", "per_token_sq_s"),
    "decode": ("fixed_s", "per_seq_s", "per_context_token_s"),
}
HOLDOUT = 0.25
MIN_ROWS = 8
RUN_FIX = ("give the JSON of `hastune evaluate RECIPE --config CFG --evaluator real --json` "
           "or `hastune serve CFG --recipe RECIPE --json` (they record engine_steps)")


def features(stage: str, c: dict[str, list], i: np.ndarray) -> np.ndarray:
    """The stage's feature rows of the steps `i` of one worker's columns `c`."""
    def col(name: str) -> np.ndarray:
        return np.asarray(c.get(name, [0] * len(c["kind"])), dtype=float)[i]

    one = np.ones(len(i))
    if stage == "encode":
        return np.column_stack([one, col("batch"), col("tokens"), col("tokens_sq")])
    if stage == "prefill":
        return np.column_stack([one, col("tokens"), col("tokens_sq")])
    return np.column_stack([one, col("batch"), col("context")])


def load_runs(paths: list[Path]) -> list[dict[str, dict]]:
    """Every probe's workers' step columns in the run records at `paths`."""
    probes: list[dict[str, dict]] = []
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except FileNotFoundError:
            raise InputError(p, None, "no such run record", RUN_FIX) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(p, None, f"not a JSON run record ({exc})", RUN_FIX) from None
        recs = data if isinstance(data, list) else [data]
        got = [probe.get("workers") for r in recs if isinstance(r, dict)
               for probe in (r.get("engine_steps") or []) if isinstance(probe, dict)]
        got = [w for w in got if isinstance(w, dict) and w]
        if not got:
            raise InputError(p, "engine_steps", "the record has no engine step timings "
                             "(a simulated run, or one made before the engine timed itself)",
                             RUN_FIX)
        for w in got:
            for name, cols in w.items():
                n = len(cols.get("kind", [])) if isinstance(cols, dict) else -1
                if n < 0 or any(len(cols.get(k, [])) != n for k in ("t", "dur")):
                    raise InputError(p, f"engine_steps: {name}", "a worker's step columns "
                                     "are missing or of different lengths", RUN_FIX)
        probes.extend(got)
    return probes


def stage_rows(probes: list[dict[str, dict]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(features, seconds) per stage over every worker of every probe: the steps that ran
    alone on the whole device."""
    xs: dict[str, list] = {s: [] for s in NAMES}
    ys: dict[str, list] = {s: [] for s in NAMES}
    for workers in probes:
        for c in workers.values():
            kind = np.asarray(c["kind"])
            dur = np.asarray(c["dur"], dtype=float)
            n = len(kind)
            share = np.asarray(c.get("share", [1.0] * n), dtype=float)
            overlap = np.asarray(c.get("overlap", [0] * n), dtype=float)
            alone = (share >= 1.0) & (overlap == 0) & (dur > 0)
            for s in NAMES:
                i = np.flatnonzero((kind == s) & alone)
                if i.size:
                    xs[s].append(features(s, c, i))
                    ys[s].append(dur[i])
    return {s: (np.vstack(xs[s]), np.concatenate(ys[s])) for s in NAMES if xs[s]}


@dataclass
class StageFit:
    stage: str
    rows: int
    method: str                       # "refit", "scaled", "kept: …"
    before: dict[str, float | int]    # error of the old form on every recorded step
    after: dict[str, float | int]     # … of the written form
    held_out_before: dict[str, float | int] | None = None
    held_out_after: dict[str, float | int] | None = None
    old: dict[str, float] = field(default_factory=dict)
    new: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "rows": self.rows, "method": self.method,
                "before": self.before, "after": self.after,
                "held_out_before": self.held_out_before, "held_out_after": self.held_out_after,
                "old": self.old, "new": self.new}


def stats(X: np.ndarray, y: np.ndarray, coef: np.ndarray) -> dict[str, float | int]:
    """error_stat, and the total seconds' relative error (%)."""
    out = error_stat(X, y, tuple(coef))
    out["total_pct"] = round(float((X @ coef).sum() / y.sum() - 1.0) * 100.0, 2)
    return out


def _coef(prof: Profile, stage: str) -> np.ndarray:
    sec = getattr(prof, stage)
    return np.array([getattr(sec, n) for n in NAMES[stage]], dtype=float)


def _sig(x: float) -> float:
    return float(f"{x:.4g}") if x else 0.0


def _valid(prof: Profile, stage: str, coef: np.ndarray) -> bool:
    sec = getattr(prof, stage)
    try:
        type(sec).model_validate({**sec.model_dump(), **dict(zip(NAMES[stage], coef))})
    except ValueError:
        return False
    return bool(np.isfinite(coef).all())


def fit_stage(prof: Profile, stage: str, X: np.ndarray, y: np.ndarray, seed: int = 0,
              min_rows: int = MIN_ROWS) -> StageFit:
    old = _coef(prof, stage)
    names = NAMES[stage]
    before = stats(X, y, old)
    olds = dict(zip(names, old.tolist()))
    if len(y) < min_rows:
        return StageFit(stage, len(y), f"kept: {len(y)} steps < {min_rows}", before, before,
                        old=olds, new=olds)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    test[rng.permutation(len(y))[:max(1, int(round(HOLDOUT * len(y))))]] = True
    tr, te = ~test, test
    k = float(np.median(y[tr] / np.maximum(X[tr] @ old, 1e-12)))
    cands = {"scaled": np.array([_sig(c * k) for c in old])}
    refit = np.array(fit_linear(X[tr], y[tr], names).coef, dtype=float)
    if _valid(prof, stage, refit):  # e.g. decode's fixed term must stay > 0 (DecodeSpec)
        cands["refit"] = refit
    scores = {m: error_stat(X[te], y[te], tuple(c))["median_pct"] for m, c in cands.items()}
    method = min(scores, key=lambda m: (scores[m], m != "scaled"))
    new = cands[method]
    m = float(y.sum() / max((X @ new).sum(), 1e-12))  # the recorded steps' total seconds
    new = np.array([_sig(c * m) for c in new])
    how = "refit" if method == "refit" else f"scaled ×{k:.3g}"
    return StageFit(stage, len(y), f"{how}, total ×{m:.3g}", before, stats(X, y, new),
                    stats(X[te], y[te], old), stats(X[te], y[te], new), olds,
                    dict(zip(names, new.tolist())))


def recalibrate(prof: Profile, probes: list[dict[str, dict]], seed: int = 0,
                min_rows: int = MIN_ROWS) -> tuple[Profile, list[StageFit]]:
    """The profile with each stage's form re-fitted from the recorded steps, and the fits."""
    if prof.tp != 1:
        raise InputError(prof.path, "tp", f"the profile's base sections are tp {prof.tp}; the "
                         "engine runs tp 1 only", "calibrate a tp 1 profile")
    rows = stage_rows(probes)
    if not rows:
        raise InputError(None, "RUN", "the runs hold no encode, prefill or decode step that "
                         "ran alone on its device", RUN_FIX)
    fits = [fit_stage(prof, s, *rows[s], seed=seed, min_rows=min_rows) for s in NAMES
            if s in rows]
    update: dict[str, Any] = {}
    for f in fits:
        if not f.method.startswith("kept"):
            update[f.stage] = getattr(prof, f.stage).model_copy(update=f.new)
    errs = dict(prof.fit.error) if prof.fit is not None else {}
    from hastune.profile import FitStat

    for f in fits:
        if f.held_out_after is not None:
            errs[f.stage] = FitStat(**{k: v for k, v in f.held_out_after.items()
                                       if k != "total_pct"})
    desc = ", ".join(f"{f.stage} {f.method} ({f.rows} steps)" for f in fits)
    update["source"] = f"{prof.source} RECALIBRATED from the engine's recorded steps: {desc}."
    if prof.fit is not None:
        update["fit"] = prof.fit.model_copy(update={"error": errs})
    return prof.model_copy(update=update), fits


def write_profile(prof: Profile, out: Path, head: str) -> None:
    """Write `prof` to `out` (atomically: a half-written profile never replaces one), the
    comment lines `head` first."""
    import yaml

    from hastune.jsonio import write_atomic

    write_atomic(out, head + yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False,
                                            width=100))
