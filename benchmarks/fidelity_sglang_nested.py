"""Nested cross-validation of SGLang's front-end token cost (docs/fidelity.md, FRONTEND_TOKEN_S).

    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/fidelity_sglang_nested.py \
        [--per-token 40,45,50,55,60] [--per-made 0,10,15,20,25] [--cache FILE]

hastune.engine_terms.FRONTEND_TOKEN_S["sglang"] (µs per output token, ns per token the request
made before) was set by a scan judged on the cross-validated figure itself, so that figure is
not held out for those two numbers. Here each fold of hastune.fidelity's cross-validation
(whole isl × osl shapes left out, hastune.fidelity.score.fold_shapes) chooses the pair from the
grid on its TRAINING rows only — with the terms fitted on those rows, as hastune.fidelity fits
them (the prior's forms, one Gauss-Newton step) — and its held-out rows are then simulated with
that pair and those terms. Selection rules (each fold, training rows only):

- `loss`: the fit's objective (soft-L1 of the log errors, scale fit.HUBER, TTFT weighted by
  fit.TTFT_WEIGHT²) on the training rows simulated with the fitted terms;
- `forms`: the same objective on the linear forms the fit minimised (what least_squares saw);
- `median`: max(training TTFT median |error| / 20%, training TPOT median |error| / 8%).

Prints, per grid point, the usual (non-nested) cross-validated figures too (a fold's held-out
rows under that fixed pair: at (50, 15) the CLI's 18.7% / 7.1%), then the nested figures over
all rows, the pair each fold chose, and the wall time.

Measured (5 × 5 grid below, 46 rows, 445 s on one core, 2026-12-03, SGLang's clients started
together): nested by `loss` TTFT median |error| / P90 / bias 18.8 / 49.4 / +3.8 %, TPOT 4.6 /
13.9 / +3.5 % (folds chose (40, 25), (50, 20), (55, 15), (40, 25)); by `median` 11.2 / 46.8 /
-7.6, 5.8 / 28.4 / +2.7; by `forms` 18.3 / 68.1 / -3.9, 5.3 / 21.0 / -0.5. Non-nested at
(50, 15): 18.7 / 50.8 / -7.5, 7.1 / 15.4 / +6.0 (the CLI's); over the grid 15.0-71.0 % TTFT,
3.5-10.1 % TPOT.
With the clients spread (before, 437-598 s): by `loss` 19.0 / 5.6, by `median` 21.3 / 5.4,
by `forms` 26.8 / 6.6; non-nested at (50, 15) 17.8 / 6.9, over the grid 15.3-59.8 %.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from silicon import CSV  # benchmarks/silicon.py (this folder is on the path)

ENGINE = "sglang"
RULES = ("loss", "forms", "median")


def _setup():
    from hastune import engine_terms as et
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.rows import read_cases
    from hastune.fidelity.run import recipe_for

    cases = [c for c in read_cases(CSV) if c.engine == ENGINE]
    groups = {c.group for c in cases}
    if len(groups) != 1:
        raise SystemExit(f"expected one (engine, GPU) group for {ENGINE}, got {groups}")
    profiles, sims = {}, {}
    for c in cases:
        rec = recipe_for(c, {}, CSV)
        key = (rec.model, c.weights)
        if key not in profiles:
            profiles[key] = resolve_profile(rec, quiet=True)[0]
        sims[c.line] = (profiles[key], rec)
    g = cases[0].group
    mem = next(iter(profiles.values())).memory.gpu_bytes / 2**30
    return cases, sims, g, et.scheduler_defaults(g[0], mem, g[1])


def _loss(et_, ep_) -> float:
    """The fit's objective (hastune.fidelity.fit.fit) on relative errors of TTFT and TPOT."""
    from hastune.fidelity import fit as F

    out = 0.0
    for e, w in ((et_, F.TTFT_WEIGHT ** 2), (ep_, 1.0)):
        r = np.asarray(e, dtype=float)
        r = np.log(np.maximum(1.0 + r[np.isfinite(r)], 1e-9))  # as the fit clamps a form
        out += float(np.sum(w * 2.0 * (np.sqrt(1.0 + (r / F.HUBER) ** 2) - 1.0))) * F.HUBER ** 2
    return out


def one_pair(pair, cases, sims, g, sched, refine: int = 1) -> list[dict]:
    """Every fold under one token-cost pair: the terms fitted on its training rows, the
    training and held-out rows simulated with them, their errors and the training losses."""
    from hastune import engine_terms as et
    from hastune.fidelity import fit as F
    from hastune.fidelity.run import simulate
    from hastune.fidelity.score import fold_shapes

    et.FRONTEND_TOKEN_S[ENGINE] = pair  # in place: fit.py holds the same dict

    def sim_of(c, terms):
        prof, rec = sims[c.line]
        return simulate(c, prof, terms, rec), float(c.clients - 1)

    def form(c, at=None):
        return F.form(lambda t: sim_of(c, t), sched, g[0], at, g[1])

    prior = {c.line: form(c) for c in cases}
    out = []
    for shapes in fold_shapes(cases):
        train = [c for c in cases if c.shape not in shapes]
        test = [c for c in cases if c.shape in shapes]
        mt = np.array([c.ttft_ms for c in train])
        mp = np.array([c.tpot_ms for c in train])
        th = F.fit([prior[c.line] for c in train], mt, mp)
        for _ in range(refine):  # as hastune.fidelity.score._group's fitted()
            fs = [form(c, th) for c in train]
            th = F.fit(fs, mt, mp, start=th)
        pred = [f.predict(th) for f in fs]
        fe_t = [p[0] / m - 1 for p, m in zip(pred, mt)]
        fe_p = [p[1] / m - 1 for p, m in zip(pred, mp)]
        forms_loss = _loss(fe_t, fe_p)
        t_f = F.terms(g[0], g[1], sched, th)

        def errs(rows, t_f=t_f):
            s = [sim_of(c, t_f)[0] for c in rows]
            return ([x.ttft_ms / c.ttft_ms - 1 for x, c in zip(s, rows)],
                    [x.tpot_ms / c.tpot_ms - 1 for x, c in zip(s, rows)])

        tr_t, tr_p = errs(train)
        te_t, te_p = errs(test)
        out.append({"shapes": shapes, "theta": [float(x) for x in th],
                    "train_ttft": tr_t, "train_tpot": tr_p, "forms_ttft": fe_t, "forms_tpot": fe_p,
                    "test_ids": [c.line for c in test], "test_ttft": te_t, "test_tpot": te_p,
                    "loss": _loss(tr_t, tr_p), "forms": forms_loss,
                    "median": max(_med(tr_t) / 20.0, _med(tr_p) / 8.0)})
    return out


def _med(e) -> float:
    e = np.asarray(e, dtype=float)
    return float(np.median(np.abs(e[np.isfinite(e)])) * 100)


def _stats(e) -> str:
    from hastune.fidelity.score import stats

    s = stats(list(e))
    return f"{s['median_abs_pct']:5.1f} / {s['p90_abs_pct']:5.1f} / {s['bias_pct']:+6.1f}"


def _key(pair) -> str:
    return f"{pair[0] * 1e6:g}us,{pair[1] * 1e9:g}ns"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-token", default="40,45,50,55,60", help="µs per output token")
    ap.add_argument("--per-made", default="0,10,15,20,25", help="ns per token made before")
    ap.add_argument("--cache", default="", help="JSON file of per-pair results (reused)")
    a = ap.parse_args()
    grid = [(float(f"{u}e-6"), float(f"{n}e-9")) for u in a.per_token.split(",")
            for n in a.per_made.split(",")]
    t0 = time.perf_counter()
    cache = json.loads(Path(a.cache).read_text()) if a.cache and Path(a.cache).exists() else {}
    cases, sims, g, sched = _setup()
    res = {}
    for pair in grid:
        k = _key(pair)
        if k not in cache:
            t1 = time.perf_counter()
            cache[k] = one_pair(pair, cases, sims, g, sched)
            print(f"  {k}: {time.perf_counter() - t1:.1f} s", file=sys.stderr, flush=True)
            if a.cache:
                Path(a.cache).write_text(json.dumps(cache))
        res[k] = cache[k]
    nf = len(next(iter(res.values())))
    print(f"{ENGINE} {g[1]}: {len(cases)} rows, {nf} folds; grid {len(grid)} pairs "
          "(per output token, per token made before)")
    print("\nnon-nested cross-validated (a fixed pair for every fold), median |err| / P90 / "
          "bias, %:")
    print(f"{'pair':>14}  {'TTFT':>22}  {'TPOT':>22}  train loss per fold")
    for k, folds in res.items():
        tt = [x for f in folds for x in f["test_ttft"]]
        tp = [x for f in folds for x in f["test_tpot"]]
        ls = " ".join(f"{f['loss']:.4f}" for f in folds)
        print(f"{k:>14}  {_stats(tt):>22}  {_stats(tp):>22}  {ls}")
    for rule in RULES:
        tt, tp, chosen = [], [], []
        for i in range(nf):
            k = min(res, key=lambda k: res[k][i][rule])
            f = res[k][i]
            tt += f["test_ttft"]
            tp += f["test_tpot"]
            chosen.append(f"fold {i} ({','.join(f['shapes'])}): {k} "
                          f"(kernel_scale {f['theta'][0]:.3f}, train {rule} {f[rule]:.4f})")
        print(f"\nnested, pair chosen per fold by training '{rule}': {len(tt)} held-out rows")
        print(f"  TTFT median |err| / P90 / bias: {_stats(tt)}   TPOT: {_stats(tp)}")
        for c in chosen:
            print("  " + c)
    print(f"\nwall {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
