"""Per-kernel latency predictors fitted on one measured table.

A prediction is a roofline baseline times a correction interpolated from the table:

    t(x) = base(x) · exp(r̂(x)),   base = t0 + ((F/(P·e_c))^q + (B/(W·e_m))^q)^(1/q)

F and B are the kernel's FLOPs and bytes, P and W the GPU's nominal peak and bandwidth; t0,
e_c, e_m and q are fitted to the table (least squares on log latency). r̂ is the log ratio
measured / baseline of the nearest table rows (Gaussian weights in log₂ shape space), with a
small prior weight on 0: where the table is dense r̂ interpolates it, and it fades to 0 (the
roofline × fitted efficiency alone) away from measured shapes. Axes beyond the table's range
are clamped for the look-up, so an unmeasured size takes the efficiency of the nearest
measured one and the roofline carries the scaling. One exception: more KV heads than the
table holds (multi-head attention, e.g. Llama-30B's 52) are folded into the batch, since the
kernel runs one block per (sequence, KV head): (b, kv) → (b·kv/kv_max, kv_max), same bytes
and FLOPs.

Bytes are dtype-aware: `wb` is the element size of a GEMM's inputs (fp8: 1, its output stays
bf16) and `kb` that of the KV cache an attention kernel reads (fp8 KV: 1, queries and outputs
stay bf16); an fp8 GEMM's peak is twice the bf16 one. With bf16 (2, 2) the arithmetic is what
it always was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hastune.calibrate.tables import Hardware, KernelTable
from hastune.models.spec import BYTES_PER, EXPERTS_ONLY

NEIGHBOURS = 8
BANDWIDTH_OCTAVES = 0.5
PRIOR_WEIGHT = 1e-3
BYTES = 2.0  # bf16
# a weights dtype → bytes per weight its GEMM kernels read (nvfp4: + scales; the dtypes that
# quantize the routed experts alone, EXPERTS_ONLY, have bf16 GEMM rows), and its fused MoE
# kernels (MOE_BYTES: those at their own bytes)
DTYPE_BYTES = {"bf16": BYTES, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": BYTES_PER["nvfp4"],
               **{k: BYTES for k in EXPERTS_ONLY}}
MOE_BYTES = {**DTYPE_BYTES, **{k: BYTES_PER[k] for k in EXPERTS_ONLY}}
Costs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _gemm(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    m, n, k = x.T
    return (2 * m * n * k, wb * (m * k + k * n) + BYTES * m * n,
            np.log2(np.column_stack([m, n, k])))


def _context(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, s, h, kv, d = x.T  # causal: half the score matrix
    feat = np.column_stack([b, s, kv, h / kv, d])
    return (2 * b * h * d * s * s, b * s * d * (BYTES * 2 * h + kb * 2 * kv),
            np.log2(feat))


def _generation(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, h, kv, d, step = x.T
    feat = np.column_stack([b, step + 1, kv, h / kv, d])
    return (4 * b * h * d * step, b * d * (kb * 2 * kv * step + BYTES * 2 * h),
            np.log2(feat))


def _encoder(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, s, h, d = x.T  # non-causal; batch and heads are one parallel axis to the kernel
    feat = np.column_stack([b * h, s, d])
    return 4 * b * h * d * s * s, BYTES * b * s * d * 4 * h, np.log2(feat)


# DeepSeek-V3's MLA block, the only shape of the engines' mla_*_module tables: hidden, q and
# KV latent ranks, rope / nope / v head dims (per head)
V3_MLA = (7168, 1536, 512, 64, 128, 128)


def _mla_block_weights(h: np.ndarray, decode: bool) -> np.ndarray:
    H, q, lat, rope, nope, v = V3_MLA
    w = H * (q + lat + rope) + q * h * (nope + rope) + h * v * H
    return w + h * lat * (nope + v)          # kv_b (prefill) or its absorbed BMMs (decode)


def _mla_context_module(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, s, h = x.T
    _, _, lat, rope, nope, v = V3_MLA
    w = _mla_block_weights(h, False)
    flops = 2 * b * s * w + 2 * b * h * (nope + rope + v) * s * s
    nbytes = wb * w + b * s * (kb * (lat + rope) + BYTES * h * (2 * (nope + rope) + 2 * v))
    return flops, nbytes, np.log2(np.column_stack([b, s, h]))


def _mla_generation_module(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, h, step = x.T
    _, _, lat, rope, _, _ = V3_MLA
    w = _mla_block_weights(h, True)
    flops = 2 * b * w + 2 * b * h * (2 * lat + rope) * step
    nbytes = wb * w + kb * b * step * (lat + rope)
    return flops, nbytes, np.log2(np.column_stack([b, h, step + 1]))


# Gated DeltaNet (Qwen3.5), the four kernels of aiconfigurator's gdn table, per GPU's heads:
# columns batch_size, seq_len (1 in a decode step), num_k_heads, head_k_dim, num_v_heads,
# head_v_dim, d_conv. The conv runs over q, k and v; the recurrence updates a dk × dv state
# per value head and token (the chunked prefill form adds attention within 64-token chunks)
GDN_CHUNK = 64


def _gdn_parts(x: np.ndarray):
    b, s, hk, dk, hv, dv, conv = x.T
    return b, s, hk, dk, hv, dv, conv, 2 * hk * dk + hv * dv


def _gdn_feats(b, s, hk, hv) -> np.ndarray:
    return np.log2(np.column_stack([b, s, hk, hv]))


def _gdn_conv(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, s, hk, _, hv, _, conv, ch = _gdn_parts(x)
    return (2 * b * s * ch * conv, BYTES * ch * (2 * b * s + conv + 2 * b * (conv - 1)),
            _gdn_feats(b, s, hk, hv))


def _gdn_scan(x: np.ndarray, wb: float = BYTES, kb: float = BYTES) -> Costs:
    b, s, hk, dk, hv, dv, _, ch = _gdn_parts(x)
    chunk = np.minimum(s, GDN_CHUNK)
    flops = b * s * hv * (4 * dk * dv + 2 * chunk * (dk + dv))
    state = 4.0 * b * hv * dk * dv                 # fp32, read and written once per call
    return flops, BYTES * b * s * (ch + 2 * hv * dv) + 2 * state, _gdn_feats(b, s, hk, hv)


# kind → (batch, heads, KV heads) columns: the parallel axes folded past the table's KV range
FOLD = {"context_attention": (0, 2, 3), "generation_attention": (0, 1, 2)}

FEATURES: dict[str, Callable[..., Costs]] = {
    "gemm": _gemm,
    "context_attention": _context,
    "generation_attention": _generation,
    "encoder_attention": _encoder,
    "mla_context_module": _mla_context_module,
    "mla_generation_module": _mla_generation_module,
    **{f"gdn_{k}_{ph}": f for k, f in (("conv", _gdn_conv), ("scan", _gdn_scan))
       for ph in ("context", "generation")},
}


def _baseline(p: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, peak: float, bw: float
              ) -> np.ndarray:
    t0, ec, em, q = np.exp(p)
    return t0 + ((flops / (peak * ec)) ** q + (nbytes / (bw * em)) ** q) ** (1.0 / q)


@dataclass
class KernelModel:
    """Predictor for one kernel kind on one system; `predict(shapes)` → seconds."""

    system: str
    kind: str
    peak: float
    bw: float
    params: np.ndarray          # log of (t0, e_c, e_m, q)
    feats: np.ndarray           # fit rows, log₂ shape features
    resid: np.ndarray           # log(measured / baseline) of the fit rows
    rows: int
    kv_max: float = 0.0         # largest KV-head count measured (FOLD kinds)
    wb: float = BYTES           # GEMM input element bytes (fp8: 1)
    kb: float = BYTES           # KV-cache element bytes (fp8: 1)

    @classmethod
    def fit(cls, table: KernelTable, hw: Hardware, wb: float = BYTES, kb: float = BYTES
            ) -> KernelModel:
        """`wb`, `kb`: the element bytes of the table's GEMM inputs and KV cache (an fp8
        GEMM table also gets twice the bf16 peak)."""
        from scipy.optimize import least_squares

        flops, nbytes, feats = FEATURES[table.kind](table.shapes, wb, kb)
        peak = hw.peak_flops * (BYTES / wb if table.kind == "gemm" else 1.0)
        y = np.log(table.latency_s)

        def res(p: np.ndarray) -> np.ndarray:
            return np.log(_baseline(p, flops, nbytes, peak, hw.mem_bw)) - y

        p0 = np.log([max(float(table.latency_s.min()) * 0.5, 1e-7), 0.5, 0.5, 1.0])
        with np.errstate(over="ignore"):  # a trial exponent q may overflow: an inf residual
            p = least_squares(res, p0, method="trf").x
        resid = y - np.log(_baseline(p, flops, nbytes, peak, hw.mem_bw))
        kv_max = float(table.shapes[:, FOLD[table.kind][2]].max()) if table.kind in FOLD else 0.0
        return cls(table.system, table.kind, peak, hw.mem_bw, p, feats, resid,
                   len(table), kv_max, wb, kb)

    @property
    def fixed_s(self) -> float:
        """The fitted per-launch latency t0."""
        return float(np.exp(self.params[0]))

    @property
    def efficiency(self) -> tuple[float, float]:
        """Fitted (compute, memory) efficiency against the nominal peak and bandwidth."""
        return float(np.exp(self.params[1])), float(np.exp(self.params[2]))

    def cost(self, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flops, nbytes, _ = FEATURES[self.kind](np.atleast_2d(shapes).astype(float), self.wb,
                                               self.kb)
        return flops, nbytes

    def baseline(self, shapes: np.ndarray) -> np.ndarray:
        flops, nbytes = self.cost(shapes)
        return _baseline(self.params, flops, nbytes, self.peak, self.bw)

    def correction(self, shapes: np.ndarray) -> np.ndarray:
        """exp(r̂): the interpolated measured / baseline ratio (1 far from the table)."""
        _, _, q = FEATURES[self.kind](np.atleast_2d(shapes).astype(float), self.wb, self.kb)
        lo, hi = self.feats.min(axis=0), self.feats.max(axis=0)
        q = np.clip(q, lo, hi)
        k = min(NEIGHBOURS, len(self.resid))
        dist, idx = self._tree().query(q, k=k)
        dist, idx = dist.reshape(len(q), k), idx.reshape(len(q), k)
        w = np.exp(-((dist / BANDWIDTH_OCTAVES) ** 2))
        r = (w * self.resid[idx]).sum(axis=1) / (w.sum(axis=1) + PRIOR_WEIGHT)
        return np.exp(r)

    def fold(self, shapes: np.ndarray) -> np.ndarray:
        """Shapes with KV heads beyond the table folded into the batch (see module doc)."""
        if self.kind not in FOLD:
            return shapes
        bi, hi, ki = FOLD[self.kind]
        over = shapes[:, ki] > self.kv_max
        if not over.any():
            return shapes
        out = shapes.copy()
        f = out[over, ki] / self.kv_max
        out[over, bi] *= f
        out[over, hi] /= f
        out[over, ki] = self.kv_max
        return out

    def predict(self, shapes: np.ndarray) -> np.ndarray:
        shapes = self.fold(np.atleast_2d(np.asarray(shapes, dtype=float)))
        if len(shapes) == 0:
            return np.zeros(0)
        return self.baseline(shapes) * self.correction(shapes)

    def _tree(self):
        tree = getattr(self, "_kd", None)
        if tree is None:
            from scipy.spatial import cKDTree

            tree = self._kd = cKDTree(self.feats)
        return tree


@dataclass
class AllReduceModel:
    """All-reduce latency: log-log interpolation over message size, per GPU count; beyond
    the largest message, time grows at the largest message's bandwidth."""

    system: str
    sizes: dict[int, np.ndarray]     # GPU count → message sizes (bf16 elements), sorted
    times: dict[int, np.ndarray]
    rows: int

    @classmethod
    def fit(cls, table: KernelTable) -> AllReduceModel:
        sizes, times = {}, {}
        g, s = table.col("num_gpus"), table.col("message_size")
        for n in sorted(set(g.astype(int))):
            sel = g == n
            order = np.argsort(s[sel])
            sizes[n] = s[sel][order]
            times[n] = table.latency_s[sel][order]
        return cls(table.system, sizes, times, len(table))

    @property
    def gpu_counts(self) -> list[int]:
        return sorted(self.sizes)

    def fixed_s(self, gpus: int) -> float:
        return float(self._times(gpus)[0])

    def _times(self, gpus: int) -> np.ndarray:
        if gpus not in self.times:
            raise ValueError(f"no all-reduce measurements for {gpus} GPUs on {self.system} "
                             f"(have {self.gpu_counts})")
        return self.times[gpus]

    def predict(self, gpus: int, elements: np.ndarray | float) -> np.ndarray:
        e = np.maximum(np.atleast_1d(np.asarray(elements, dtype=float)), 1.0)
        if gpus <= 1:
            return np.zeros_like(e)
        t = self._times(gpus)
        s = self.sizes[gpus]
        out = np.exp(np.interp(np.log(e), np.log(s), np.log(t)))
        big = e > s[-1]
        out[big] = t[-1] * e[big] / s[-1]
        return out


@dataclass
class MoEModel:
    """Fused-MoE latency of one layer (all local experts, aiconfigurator-core's `moe` table):
    per shape key (hidden, inter, topk, experts, moe_tp, moe_ep), log-log interpolation over
    the token count; past the largest count, time grows in proportion to tokens. Times are
    taken as a running maximum over tokens (more tokens never run faster: the measured dips
    are routing noise). A key the table lacks has no prediction (`has`): the latency model
    then times grouped GEMMs."""

    system: str
    tokens: dict[tuple[int, ...], np.ndarray]
    times: dict[tuple[int, ...], np.ndarray]
    rows: int

    @classmethod
    def fit(cls, table: KernelTable) -> MoEModel:
        tokens: dict[tuple[int, ...], np.ndarray] = {}
        times: dict[tuple[int, ...], np.ndarray] = {}
        keys = [tuple(int(v) for v in row) for row in table.shapes[:, 1:]]
        for key in sorted(set(keys)):
            sel = np.array([k == key for k in keys])
            order = np.argsort(table.shapes[sel, 0])
            tokens[key] = table.shapes[sel, 0][order]
            times[key] = np.maximum.accumulate(table.latency_s[sel][order])
        return cls(table.system, tokens, times, len(table))

    def has(self, key: tuple[int, ...]) -> bool:
        return key in self.tokens and len(self.tokens[key]) >= 2

    def predict(self, key: tuple[int, ...], tokens) -> np.ndarray:
        x = np.maximum(np.asarray(tokens, dtype=float), 1.0)
        s, t = self.tokens[key], self.times[key]
        out = np.exp(np.interp(np.log(x), np.log(s), np.log(t)))
        return np.where(x > s[-1], t[-1] * x / s[-1], out)


def abs_pct_error(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred / meas - 1.0) * 100.0
