"""What TensorRT-LLM's measured TTFT holds that the model does not (issue 13, docs/fidelity.md).

    python benchmarks/fidelity_gap_term.py [ENGINE]      # default trtllm

The fit of hastune.fidelity on its linear forms, with five engine terms and with a sixth
candidate: TTFT += gamma × the time between two completions at the instance (what a request
that waits for another to finish sees). Prints each group's terms and the linear-form
cross-validated errors (folds leave whole isl × osl shapes out) for both. Measured on
TensorRT-LLM (2026-12-03): gamma 1.07 on H100, 0.00 on H200 (TTFT 34.3% → 19.3%; when the
term was added, 1.02, 0.00, 44.3% → 27.3%), which is why the H100 runs' client is queued
(hastune.engine_terms.FRONTEND_QUEUED; cleared here). The prompts' scale is held at 1.
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.optimize import least_squares
from silicon import CSV  # benchmarks/silicon.py (this folder is on the path)


def _run(case, prof, rec, theta):
    from hastune import engine_terms as et
    from hastune.fidelity import fit as F
    from hastune.fidelity.run import simulate

    sched = et.scheduler_defaults(case.engine, prof.memory.gpu_bytes / 2**30, case.gpu)
    theta = (*theta, 1.0)  # the prompts' scale held at 1 (F.NAMES' sixth: not fitted here)
    s = simulate(case, prof, F.terms(case.engine, case.gpu, sched, theta), rec)
    return s.ttft_ms, s.tpot_ms, 1e3 / s.throughput_rps  # ms between two completions


def forms(engine: str):
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.rows import read_cases
    from hastune.fidelity.run import recipe_for

    out = []
    for c in (c for c in read_cases(CSV) if c.engine == engine):
        rec = recipe_for(c, {}, CSV)
        prof = resolve_profile(rec, quiet=True)[0]
        b = _run(c, prof, rec, (1, 0, 0, 0, 0))
        a = _run(c, prof, rec, (1, 2e-3, 0, 0, 0))
        s = _run(c, prof, rec, (1, 0, 2e-5, 0, 0))
        tt = np.array([b[0], (a[0] - b[0]) / 2e-3, (s[0] - b[0]) / 2e-5, 1e3,
                       1e3 * (c.clients - 1), b[2]])
        tp = np.array([b[1], (a[1] - b[1]) / 2e-3, (s[1] - b[1]) / 2e-5, 0, 0, 0])
        out.append((c, tt, tp))
    return out


def fit(rows, ncol: int) -> np.ndarray:
    from hastune.fidelity import fit as F

    A = np.vstack([r[1][:ncol] / r[0].ttft_ms for r in rows]
                  + [r[2][:ncol] / r[0].tpot_ms for r in rows])
    # the five terms' bounds (not the prompts' scale, F.NAMES' sixth), then the gap's
    lo, hi = np.r_[F.LOWER[:5], 0.0][:ncol], np.r_[F.UPPER[:5], 2.0][:ncol]
    sc = np.maximum(np.abs(A).max(axis=0), 1e-12)
    An = A / sc
    x0 = np.clip(np.r_[1, 1e-3, 1e-5, 0.01, 1e-3, 0.1][:ncol], lo, hi) * sc
    res = least_squares(lambda x: np.log(np.maximum(An @ x, 1e-9)), x0,
                        jac=lambda x: An / np.maximum(An @ x, 1e-9)[:, None],
                        bounds=(lo * sc, hi * sc), loss="soft_l1", f_scale=0.15,
                        x_scale="jac")
    return res.x / sc


def main() -> int:
    from hastune import engine_terms as et
    from hastune.fidelity.score import fold_shapes

    et.FRONTEND_QUEUED.clear()  # what the gap adds to a client that is not queued
    engine = sys.argv[1] if len(sys.argv) > 1 else "trtllm"
    rows = forms(engine)
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[0].group, []).append(r)
    for ncol in (5, 6):
        e_t, e_p = [], []
        for g, rs in groups.items():
            for shapes in fold_shapes([r[0] for r in rs]):
                th = fit([r for r in rs if r[0].shape not in shapes], ncol)
                for c, tt, tp in (r for r in rs if r[0].shape in shapes):
                    e_t.append(tt[:ncol] @ th / c.ttft_ms - 1)
                    e_p.append(tp[:ncol] @ th / c.tpot_ms - 1)
            print(f"{g} with {ncol} terms: {np.round(fit(rs, ncol), 5).tolist()}")
        t, p = np.array(e_t), np.array(e_p)
        print(f"{ncol} terms, linear-form cross-validated: TTFT median |error| "
              f"{np.median(np.abs(t)):.1%} bias {np.median(t):+.1%}; TPOT "
              f"{np.median(np.abs(p)):.1%} bias {np.median(p):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
