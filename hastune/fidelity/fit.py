"""Fitting the engine terms (hastune.engine_terms) on measured runs, and cross-validating them.

For a fixed schedule, a request's mean TPOT is linear in the iteration terms: every iteration
it lives through lasts kernel_scale × its kernels + iteration_s + per_seq_s × its sequences.
So four simulations per case give its linear form around a point (finite differences of the
kernel scale and the two iteration terms), and its TTFT's the same way, plus the front end's
parts, which add to it exactly: request_s, and per_stream_s per request in flight when it
came — except where the front end's wait varies (SGLang's, FrontEnd.spread): then it delays
the engine's arrivals and moves the schedule, and a fifth simulation gives its column.
`prefill_scale`, the prompt tokens' kernels' time on top of the kernel scale, is held at 1
unless asked for (`hastune fidelity --prefill-scale`: one simulation more per form; not
in the shipped terms, docs/fidelity.md says why). The
fit (`fit`) is a bounded least squares on the log errors of TTFT and TPOT with a soft-L1
loss, a TTFT case's loss weighted by the ratio of the bars squared ((8/20)²): a case
the model cannot follow, e.g. an engine out of KV cache, is not allowed to pull the rest.
hastune.fidelity.score fits from the forms at START (the kernels alone with the least front
end, FRONTEND_MIN_S), then takes one Gauss-Newton step: the forms again around the terms
found, and a fit on those.

Cross-validation leaves whole configurations out: every case of one (isl × osl) shape in a
fold, so no fold sees the shape it is checked on. Each fold fits on its training cases only
(the prior's forms, then its own Gauss-Newton step) and is checked by simulating its held-out
cases with its terms."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from hastune.engine_terms import (
    FRONTEND_SPREAD,
    FRONTEND_TOKEN_S,
    STREAM_TOKEN_S,
    EngineTerms,
    FrontEnd,
    Scheduler,
)

NAMES = ("kernel_scale", "iteration_s", "per_seq_s", "frontend_s", "frontend_per_stream_s",
         "prefill_scale")
# The least front end a fit may give: a request's trip through the server (HTTP, tokenisation)
# takes time, so a closed-loop client's next request never reaches the engine at the very
# instant its last one finished. At exactly 0 it would, and join the iteration that starts
# there; at any positive value (1 ps or 1 ms alike) it waits for the next one, and a lockstep
# closed loop settles in another state (benchmarks/fidelity_zero_frontend.py: 39 of the 72
# TensorRT-LLM H200 rows moved 9-74% between the two). The bound keeps every fitted term on
# the physical side of that edge.
FRONTEND_MIN_S = 1e-6
LOWER = np.array([0.5, 0.0, 0.0, FRONTEND_MIN_S, 0.0, 0.5])
UPPER = np.array([3.0, 0.05, 1e-3, 0.5, 0.05, 2.0])
STEP_IT, STEP_SEQ, STEP_STREAM = 2e-3, 2e-5, 5e-4  # finite-difference steps (seconds)
HUBER = 0.15                     # relative error beyond which a case's weight falls off
# a TTFT case's loss weighs a TPOT case's × this squared: the bars are 20% and 8% (issue 13),
# so a TTFT miss counts by its share of its bar, as a TPOT miss does
TTFT_WEIGHT = 8.0 / 20.0


PRIOR = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # the kernels alone
# where the first linear forms are taken: the kernels alone with the least front end, on the
# side of the edge (FRONTEND_MIN_S) where every fitted term lies
START = PRIOR + np.array([0.0, 0.0, 0.0, FRONTEND_MIN_S, 0.0, 0.0])


@dataclass
class Form:
    """One case's TTFT and TPOT (ms) as linear functions of the six terms around the point
    `at` they were measured at: y(θ) = y0 + A·(θ − at)."""

    ttft: np.ndarray   # ∂TTFT/∂θ, ms per unit of (k, it, seq, fe, stream, prefill)
    tpot: np.ndarray
    ttft0: float = 0.0
    tpot0: float = 0.0
    at: np.ndarray = field(default_factory=lambda: np.zeros(6))

    def predict(self, theta: np.ndarray) -> tuple[float, float]:
        d = np.asarray(theta) - self.at
        return float(self.ttft0 + self.ttft @ d), float(self.tpot0 + self.tpot @ d)

    def rows(self) -> tuple[np.ndarray, float, np.ndarray, float]:
        """(A, b) of TTFT and of TPOT as y = A·θ + b."""
        return (self.ttft, self.ttft0 - self.ttft @ self.at,
                self.tpot, self.tpot0 - self.tpot @ self.at)


def terms(engine: str, gpu: str | None, sched: Scheduler, theta, fitted_on: str = "",
          queued: bool = False) -> EngineTerms:
    """The engine terms of `theta` (NAMES), with the benchmark client's queueing where the
    measured run had it (`queued`: hastune.fidelity.harness.Harness.queued)."""
    k, it, seq, fe, st, pk = (float(x) for x in theta)
    fr = FrontEnd(fe, 0.0, st, FRONTEND_SPREAD.get(engine, 0.0),
                  queued, STREAM_TOKEN_S.get(engine, 0.0),
                  *FRONTEND_TOKEN_S.get(engine, (0.0, 0.0)))
    return EngineTerms(engine, gpu, sched, it, seq, k, fr, fitted_on, pk)


def shipped(engine: str, gpu: str, sched: Scheduler, case=None) -> EngineTerms:
    """The terms shipped for (engine, GPU) in hastune.engine_fitted, as `hastune fidelity`
    simulates a measured run `case` of that group (its benchmark client's queueing, by
    hastune.fidelity.harness; none without a case); a term the row lacks is the prior's."""
    from hastune.engine_fitted import FITTED
    from hastune.fidelity.harness import harness

    row = FITTED[(engine, gpu)]
    theta = [row.get(n, p) for n, p in zip(NAMES, PRIOR)]
    return terms(engine, gpu, sched, theta, row.get("fitted_on", ""),
                 case is not None and harness(case).queued)


def form(sim, sched: Scheduler, engine: str, at: np.ndarray | None = None,
         gpu: str | None = None, prefill: bool = False, queued: bool = False) -> Form:
    """The linear form of one case around `at` (default the prior: the kernels alone) from
    finite differences of simulations (`sim(terms)` → (Simulated, requests in flight when one
    came)): of the kernel scale and the two iteration terms, of the prompts' scale where it
    is fitted (`prefill`; else its column is 0), and of the front end's wait per stream
    where it varies (FrontEnd.spread: in closed loop a wait before the engine sees the
    request, which moves the schedule); the front end's fixed part adds to the TTFT exactly,
    and so does a wait that does not vary (per request in flight)."""
    at = PRIOR.copy() if at is None else np.asarray(at, dtype=float)

    def run(d):
        return sim(terms(engine, gpu, sched, at + d, queued=queued))

    base, inflight = run(np.zeros(6))
    spread = FRONTEND_SPREAD.get(engine, 0.0) > 0  # the wait moves the schedule
    ttft, tpot = np.zeros(6), np.zeros(6)
    steps = [(0, 0.05), (1, STEP_IT), (2, STEP_SEQ)]
    steps += [(5, 0.05)] * prefill + [(4, STEP_STREAM)] * spread
    for i, h in steps:
        d = np.zeros(6)
        d[i] = h
        s = run(d)[0]
        ttft[i] = (s.ttft_ms - base.ttft_ms) / h
        tpot[i] = (s.tpot_ms - base.tpot_ms) / h
    ttft[3] = 1e3  # the front end's fixed part
    if not spread:  # the mean wait adds to the TTFT, per request in flight
        ttft[4] = 1e3 * inflight
    return Form(ttft, tpot, base.ttft_ms, base.tpot_ms, at)


def fit(forms: list[Form], ttft: np.ndarray, tpot: np.ndarray,
        start: np.ndarray | None = None, prefill: bool = False) -> np.ndarray:
    """The terms minimising the log errors of TTFT and TPOT over these cases (bounded; a
    soft-L1 loss of scale HUBER, so a case the model cannot follow — an engine out of KV
    cache, queueing for seconds — counts like any other large miss, not quadratically).
    The prompts' scale is fitted with `prefill` (the forms must have its column), else held
    at 1."""
    return fit_shared(forms, ttft, tpot, [0] * len(forms), start, prefill)[0]


def fit_shared(forms: list[Form], ttft: np.ndarray, tpot: np.ndarray, where: list[int],
               start: list[np.ndarray] | np.ndarray | None = None,
               prefill: bool = False) -> list[np.ndarray]:
    """`fit` with a kernel scale of its own per class of cases (`where[i]`: case i's class,
    0 … n − 1; a GPU) and every other term shared by all: the terms of each class
    (the shared ones equal). `start`: one point per class, or one for all."""
    n = max(where) + 1
    if start is not None and np.ndim(start) == 2:
        start = [start[w] for w in where]
    per_case = fit_split(forms, ttft, tpot, {0: list(where)}, start, prefill)
    out = [PRIOR.copy()] * n
    for w, th in zip(where, per_case):
        out[w] = th
    return out


def fit_split(forms: list[Form], ttft: np.ndarray, tpot: np.ndarray,
              split: dict[int, list[int]], start=None, prefill: bool = False
              ) -> list[np.ndarray]:
    """`fit` with the terms of the columns in `split` (a term's index in NAMES → each case's
    class, 0 … n − 1) fitted per class, the other terms shared: each case's terms. `start`:
    each case's point, or one for all."""
    rows, offs = [], []
    for f, mt, mp in zip(forms, ttft, tpot):
        at, bt, ap, bp = f.rows()
        rows += [at / mt, ap / mp]
        offs += [bt / mt, bp / mp]
    A, b = np.vstack(rows), np.array(offs)
    free = len(NAMES) if prefill else len(NAMES) - 1
    b = b + A[:, free:] @ PRIOR[free:]  # the terms held at the prior's value
    A = A[:, :free]
    m = len(forms)
    cls = {j: np.asarray(split.get(j, [0] * m)) for j in range(free)}
    cols: dict[tuple[int, int], int] = {}
    for j in range(free):
        for k in range(int(cls[j].max()) + 1):
            cols[(j, k)] = len(cols)
    X = np.zeros((2 * m, len(cols)))
    for i in range(m):
        for j in range(free):
            X[2 * i:2 * i + 2, cols[(j, int(cls[j][i]))]] = A[2 * i:2 * i + 2, j]
    lo = np.array([LOWER[j] for j, _ in cols])
    hi = np.array([UPPER[j] for j, _ in cols])
    w2 = np.tile([TTFT_WEIGHT ** 2, 1.0], m)  # on each case's loss
    ok = np.isfinite(X).all(axis=1) & np.isfinite(b)  # a case that cannot run (no KV): out
    A, b, w2 = X[ok], b[ok], w2[ok]
    scale = np.maximum(np.abs(A).max(axis=0), 1e-12)  # columns of like size: θ·scale
    An = A / scale

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(An @ x + b, 1e-9))

    def jac(x: np.ndarray) -> np.ndarray:
        return An / np.maximum(An @ x + b, 1e-9)[:, None]

    def loss(z: np.ndarray) -> np.ndarray:
        """soft-L1 of each log error (z = its square over HUBER², as least_squares passes
        it), times its weight: the weight scales a case's loss, not its error, so a 15%
        miss turns robust in TTFT as in TPOT"""
        root = np.sqrt(1.0 + z)
        return np.vstack([w2 * 2.0 * (root - 1.0), w2 / root, -0.5 * w2 / root ** 3])

    # from the point the forms were taken at (where they hold), else a neutral one
    neutral = np.array([1.0, 1e-3, 1e-5, 0.01, 1e-3, 1.0])
    starts = [neutral] * m if start is None else \
        [np.asarray(start)] * m if np.ndim(start) == 1 else [np.asarray(x) for x in start]
    x0 = np.zeros(len(cols))
    for (j, k), c in cols.items():  # the first case of the class's point
        i = next((i for i in range(m) if cls[j][i] == k), 0)
        x0[c] = starts[i][j]
    x0 = np.clip(x0, lo, hi) * scale
    res = least_squares(resid, x0, jac=jac, bounds=(lo * scale, hi * scale),
                        loss=loss, f_scale=HUBER, x_scale="jac", max_nfev=500)
    x = res.x / scale
    return [np.concatenate([[x[cols[(j, int(cls[j][i]))]] for j in range(free)],
                            PRIOR[free:]]) for i in range(m)]
