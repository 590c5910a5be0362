"""Fit the simulator's linear latency forms to the composed per-layer model.

    prefill  = fixed + per_token·Σ L + per_token_sq·Σ L²
    decode   = fixed + per_seq·n + per_context_token·Σ context
    encode   = fixed + per_item·n + per_token·Σ x + per_token_sq·Σ x²

Each is fitted by non-negative least squares on relative error over a grid of the composed
model's predictions (shapes a serving engine meets), so short and long batches count alike;
coefficients are rounded to 4 significant figures before the error is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hastune.calibrate.latency import MAX_BATCH_TOKENS, LatencyModel

PREFILL_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREFILL_BATCHES = (1, 2, 4, 8, 16)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (64, 256, 512, 1024, 2048, 4096, 8192, 16384)
ENCODE_BATCHES = (1, 2, 4, 6, 8)


@dataclass(frozen=True)
class LinearFit:
    names: tuple[str, ...]
    coef: tuple[float, ...]
    median_pct: float
    p90_pct: float
    max_pct: float
    points: int

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.coef))

    def stat(self) -> dict[str, float | int]:
        return {"median_pct": self.median_pct, "p90_pct": self.p90_pct,
                "max_pct": self.max_pct, "points": self.points}


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def fit_linear(features: np.ndarray, y: np.ndarray, names: tuple[str, ...]) -> LinearFit:
    """Non-negative least squares of `y ≈ features @ c` on relative error."""
    from scipy.optimize import nnls

    coef, _ = nnls(features / y[:, None], np.ones_like(y))
    coef = np.array([_sig(c) for c in coef])
    err = np.abs(features @ coef / y - 1.0) * 100.0
    return LinearFit(names, tuple(float(c) for c in coef), round(float(np.median(err)), 2),
                     round(float(np.percentile(err, 90)), 2), round(float(err.max()), 2),
                     len(y))


def error_stat(features: np.ndarray, y: np.ndarray, coef: tuple[float, ...]
               ) -> dict[str, float | int]:
    """Relative |error| (%) of fitted coefficients on rows they were not fitted on."""
    err = np.abs(features @ np.asarray(coef) / y - 1.0) * 100.0
    return {"median_pct": round(float(np.median(err)), 2),
            "p90_pct": round(float(np.percentile(err, 90)), 2),
            "max_pct": round(float(err.max()), 2), "points": len(y)}


def prefill_grid() -> tuple[np.ndarray, np.ndarray]:
    """(batch, length) pairs: up to the token budget, and single long prompts beyond it."""
    pts = [(b, s) for b in PREFILL_BATCHES for s in PREFILL_LENGTHS
           if b * s <= MAX_BATCH_TOKENS or b == 1]
    b, s = np.array(pts, dtype=float).T
    return b, s


def fit_prefill(lm: LatencyModel) -> LinearFit:
    b, s = prefill_grid()
    y = lm.prefill(b, s)
    X = np.column_stack([np.ones_like(b), b * s, b * s * s])
    return fit_linear(X, y, ("fixed_s", "per_token_s", "per_token_sq_s"))


def decode_grid(kv_capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(batch, context) pairs whose KV fits in `kv_capacity` tokens."""
    pts = [(n, c) for n in DECODE_BATCHES for c in DECODE_CONTEXTS if n * c <= kv_capacity]
    if len(pts) < 4:  # tiny KV room: still fit on something
        pts = [(n, c) for n in (1, 2, 4, 8) for c in (64, 256, 1024)]
    n, c = np.array(pts, dtype=float).T
    return n, c


def fit_decode(lm: LatencyModel) -> LinearFit:
    n, c = decode_grid(lm.kv_capacity_tokens())
    y = lm.decode_step(n, c)
    X = np.column_stack([np.ones_like(n), n, n * c])
    return fit_linear(X, y, ("fixed_s", "per_seq_s", "per_context_token_s"))


def encode_grid(lm: LatencyModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pts = [(n, x, g) for n in ENCODE_BATCHES for x, g in lm.arch.payloads]
    n, x, g = np.array(pts, dtype=float).T
    return n, x, g


def fit_encode(lm: LatencyModel) -> LinearFit:
    n, x, g = encode_grid(lm)
    y = lm.encode(n, x, g)
    # the simulator's features: requests, Σ tokens, Σ tokens² per request
    X = np.column_stack([np.ones_like(n), n, n * x, n * x * x])
    return fit_linear(X, y, ("fixed_s", "per_item_s", "per_token_s", "per_token_sq_s"))

