"""Fitting the engine terms (hastune.engine_terms) on measured runs, and cross-validating them.

For a fixed schedule, a request's mean TPOT is linear in the iteration terms: every iteration
it lives through lasts kernel_scale × its kernels + iteration_s + per_seq_s × its sequences.
So three simulations per case give the linear form — the kernel part K, the iterations per
token I and the sequences per iteration S (finite differences around the prior) — and its TTFT
the same way, plus the front end's parts, which add to it: request_s, and per_stream_s per
request in flight when it came. The fit is then a bounded linear least squares on relative
errors (TTFT and TPOT alike), made robust by reweighting (Huber on the relative error: a case
the model cannot follow, e.g. an engine out of KV cache, is not allowed to pull the rest).

Cross-validation leaves whole configurations out: every case of one (isl × osl) shape in a
fold, so no fold sees the shape it is checked on. Each fold fits from the prior's forms (no
held-out case touches them) and is checked by simulating its held-out cases with its terms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from hastune.engine_terms import EngineTerms, FrontEnd, Scheduler

NAMES = ("kernel_scale", "iteration_s", "per_seq_s", "frontend_s", "frontend_per_stream_s")
LOWER = np.array([0.5, 0.0, 0.0, 0.0, 0.0])
UPPER = np.array([3.0, 0.05, 1e-3, 0.5, 0.05])
STEP_IT, STEP_SEQ = 2e-3, 2e-5   # finite-difference steps (seconds)
HUBER = 0.15                     # relative error beyond which a case's weight falls off


@dataclass
class Form:
    """One case's TTFT and TPOT (ms) as linear functions of the five terms: y = A·θ."""

    ttft: np.ndarray   # coefficients of (k, it, seq, fe, stream), ms per unit
    tpot: np.ndarray

    def predict(self, theta: np.ndarray) -> tuple[float, float]:
        return float(self.ttft @ theta), float(self.tpot @ theta)


def terms(engine: str, gpu: str | None, sched: Scheduler, theta, fitted_on: str = ""
          ) -> EngineTerms:
    k, it, seq, fe, st = (float(x) for x in theta)
    return EngineTerms(engine, gpu, sched, it, seq, k, FrontEnd(fe, 0.0, st), fitted_on)


def form(sim, sched: Scheduler, engine: str) -> tuple[Form, float]:
    """The linear form of one case from three simulations (`sim(terms)` → Simulated plus the
    mean number of requests in flight when one came); also that number."""
    base = sim(terms(engine, None, sched, (1.0, 0.0, 0.0, 0.0, 0.0)))
    a = sim(terms(engine, None, sched, (1.0, STEP_IT, 0.0, 0.0, 0.0)))
    b = sim(terms(engine, None, sched, (1.0, 0.0, STEP_SEQ, 0.0, 0.0)))
    d_it = ((a[0].ttft_ms - base[0].ttft_ms) / STEP_IT, (a[0].tpot_ms - base[0].tpot_ms) / STEP_IT)
    d_seq = ((b[0].ttft_ms - base[0].ttft_ms) / STEP_SEQ,
             (b[0].tpot_ms - base[0].tpot_ms) / STEP_SEQ)
    inflight = base[1]
    # kernel part: what is left at k = 1 with no other terms (the kernels alone)
    ttft = np.array([base[0].ttft_ms, d_it[0], d_seq[0], 1e3, 1e3 * inflight])
    tpot = np.array([base[0].tpot_ms, d_it[1], d_seq[1], 0.0, 0.0])
    return Form(ttft, tpot), inflight


def fit(forms: list[Form], ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """The terms minimising the log errors of TTFT and TPOT over these cases (bounded; a
    soft-L1 loss of scale HUBER, so a case the model cannot follow — an engine out of KV
    cache, queueing for seconds — counts like any other large miss, not quadratically)."""
    A = np.vstack([np.vstack([f.ttft / m for f, m in zip(forms, ttft)]),
                   np.vstack([f.tpot / m for f, m in zip(forms, tpot)])])
    A = A[np.isfinite(A).all(axis=1)]  # a case the kernels alone cannot run (no KV): left out
    scale = np.maximum(np.abs(A).max(axis=0), 1e-12)  # columns of like size: θ·scale
    An = A / scale

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(An @ x, 1e-9))

    def jac(x: np.ndarray) -> np.ndarray:
        return An / np.maximum(An @ x, 1e-9)[:, None]

    x0 = np.clip(np.array([1.0, 1e-3, 1e-5, 0.01, 1e-3]), LOWER, UPPER) * scale
    res = least_squares(resid, x0, jac=jac, bounds=(LOWER * scale, UPPER * scale),
                        loss="soft_l1", f_scale=HUBER, x_scale="jac", max_nfev=500)
    return res.x / scale
