"""A GPU as the latency model sees it: kernel predictors fitted on one system's tables,
optionally scaled to a GPU that has no table of its own.

Scaling a measured kernel time t to another GPU keeps the fitted per-launch latency t0 and
scales the rest by the ratio of roofline times, max(F/P', B/W') / max(F/P, B/W): compute-bound
kernels follow the compute ratio, memory-bound ones the bandwidth ratio. All-reduce keeps its
small-message latency and scales the rest by the interconnect bandwidth ratio.

The dtypes are the source's (`gemm_dtype`, `kv_dtype`; the CSV tables are bf16): GEMM and
attention predictors are fitted with those element sizes (hastune.calibrate.kernels). The
extra kinds of MoE and MLA models (fused MoE, the MLA block, all-to-all) are fitted on first
use, where the source has them (`Device.extra`); dense models never read them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from hastune.calibrate.gpus import GPUS, GPUSpec
from hastune.calibrate.kernels import DTYPE_BYTES, MOE_BYTES, AllReduceModel, KernelModel, MoEModel
from hastune.calibrate.sources import CSV_DATABASE, KernelSource, as_source
from hastune.calibrate.tables import HOLDOUT_FRACTION, HOLDOUT_SEED, Hardware

ATTENTION_PROXY_SYSTEM = "h100_sxm"  # encoder-attention table used where a system has none
ATTENTION_KV_KINDS = ("context_attention", "generation_attention")   # read the KV cache


@dataclass
class SystemKernels:
    """The predictors of one measured system, fitted on the non-held-out rows."""

    hw: Hardware
    models: dict[str, KernelModel]
    allreduce: AllReduceModel
    holdout_fraction: float
    holdout_seed: int
    database: str = CSV_DATABASE   # the source's database and kernels (a profile's `source`)
    source: KernelSource | None = None
    gemm_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    extras: dict = field(default_factory=dict)   # kind → fitted model or None (no table)

    def extra(self, kind: str):
        """The predictor of an extra kind (moe, mla_*_module, nccl_alltoall) fitted on its
        fit rows, or None where the source has no such table."""
        if kind not in self.extras:
            src, system = self.source, self.hw.system
            model = None
            if kind == "gemm" and dataclasses.is_dataclass(src) and hasattr(src, "gemm_dtype"):
                src = dataclasses.replace(src, gemm_dtype="bf16")  # type: ignore[type-var]
            if src is not None and src.has_table(system, kind):
                rows, _ = src.table(system, kind).split(self.holdout_fraction,
                                                       self.holdout_seed)
                if kind == "moe":
                    model = MoEModel.fit(rows)
                elif kind == "gemm":         # bf16 GEMMs of an fp8 source (unquantized_gemm)
                    model = KernelModel.fit(rows, self.hw)
                elif kind.startswith("nccl_"):
                    model = AllReduceModel.fit(rows)
                else:
                    model = KernelModel.fit(rows, self.hw, DTYPE_BYTES[self.gemm_dtype],
                                            DTYPE_BYTES[self.kv_dtype])
            self.extras[kind] = model
        return self.extras[kind]


def system_kernels(root: Path | KernelSource, system: str,
                   holdout_fraction: float = HOLDOUT_FRACTION, holdout_seed: int = HOLDOUT_SEED,
                   max_rows: int | None = None) -> SystemKernels:
    """Fit every table of `system` (from a calibration folder or a kernel source) on its
    fit rows (at most `max_rows` of them, evenly spaced, for quick tests)."""
    return _system_kernels(as_source(root), system, holdout_fraction, holdout_seed, max_rows)


@lru_cache(maxsize=16)
def _system_kernels(src: KernelSource, system: str, holdout_fraction: float,
                    holdout_seed: int, max_rows: int | None) -> SystemKernels:
    hw = src.hardware(system)
    gemm_dtype = str(getattr(src, "gemm_dtype", "bf16"))
    kv_dtype = str(getattr(src, "kv_dtype", "bf16"))
    wb, kb = DTYPE_BYTES[gemm_dtype], DTYPE_BYTES[kv_dtype]
    models = {}
    for kind in ("gemm", "context_attention", "generation_attention", "encoder_attention"):
        if not src.has_table(system, kind):
            continue
        fit_rows, _ = src.table(system, kind).split(holdout_fraction, holdout_seed)
        if max_rows is not None and len(fit_rows) > max_rows:
            keep = np.zeros(len(fit_rows), dtype=bool)
            keep[np.linspace(0, len(fit_rows) - 1, max_rows).astype(int)] = True
            fit_rows = fit_rows.subset(keep)
        models[kind] = KernelModel.fit(fit_rows, hw, wb if kind == "gemm" else 2.0,
                                       kb if kind in ATTENTION_KV_KINDS else 2.0)
    ar_rows, _ = src.table(system, "allreduce").split(holdout_fraction, holdout_seed)
    return SystemKernels(hw, models, AllReduceModel.fit(ar_rows), holdout_fraction,
                         holdout_seed, src.database, src, gemm_dtype, kv_dtype)


@dataclass
class Device:
    """Kernel latencies (seconds) on one GPU type; arguments broadcast as numpy arrays."""

    gpu: GPUSpec
    kernels: SystemKernels
    proxy: SystemKernels | None = None   # for encoder attention when the system has no table
    peak_flops: float = field(init=False)
    mem_bw: float = field(init=False)

    def __post_init__(self) -> None:
        hw = self.kernels.hw
        self.peak_flops = self.gpu.peak_flops or hw.peak_flops
        self.mem_bw = self.gpu.mem_bw or hw.mem_bw

    @property
    def mem_bytes(self) -> float:
        return self.gpu.mem_bytes or self.kernels.hw.mem_bytes

    @property
    def scale(self) -> tuple[float, float, float]:
        """(compute, memory bandwidth, interconnect) relative to the measured system."""
        hw = self.kernels.hw
        return (self.peak_flops / hw.peak_flops, self.mem_bw / hw.mem_bw,
                self.gpu.interconnect_ratio)

    def kernel(self, kind: str, shapes: np.ndarray) -> np.ndarray:
        model = self.kernels.models.get(kind)
        if model is None:
            if kind == "encoder_attention":
                return self._encoder_attention_by_proxy(shapes)
            raise ValueError(f"no {kind} table for {self.kernels.hw.system}")
        return self._scaled(model, shapes, model.predict(shapes))

    def _scaled(self, model: KernelModel, shapes: np.ndarray, t: np.ndarray) -> np.ndarray:
        c, b, _ = self.scale
        if c == 1.0 and b == 1.0:
            return t
        flops, nbytes = model.cost(shapes)
        p, w = model.peak, model.bw
        ratio = np.maximum(flops / (p * c), nbytes / (w * b)) / np.maximum(flops / p, nbytes / w)
        t0 = model.fixed_s
        return t0 + np.maximum(t - t0, 0.0) * ratio

    def _encoder_attention_by_proxy(self, shapes: np.ndarray) -> np.ndarray:
        """Encoder attention on a system without that table: the proxy system's encoder
        attention × (this system's / the proxy's) causal attention at the same heads."""
        if self.proxy is None or "encoder_attention" not in self.proxy.models:
            raise ValueError(f"no encoder_attention table for {self.kernels.hw.system} "
                             "and no proxy system")
        b, s, h, d = np.atleast_2d(shapes).T
        ctx_shapes = np.column_stack([b, s, h, h, d])
        own = self.kernels.models["context_attention"]
        other = self.proxy.models["context_attention"]
        ratio = own.predict(ctx_shapes) / other.predict(ctx_shapes)
        t = self.proxy.models["encoder_attention"].predict(shapes) * ratio
        return self._scaled(own, ctx_shapes, t)

    # --- kernels, in the tables' terms -----------------------------------------------------
    def gemm(self, m, n, k) -> np.ndarray:
        m, n, k = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (m, n, k)))
        return self.kernel("gemm", np.column_stack([m.ravel(), n.ravel(), k.ravel()])
                         ).reshape(m.shape)

    def unquantized_gemm(self, m, n, k) -> np.ndarray:
        """A GEMM that stays bf16 under fp8 weights (MoE routers): the source's bf16 GEMM
        rows, where its own are another dtype and it has them; else gemm()."""
        model = None if self.kernels.gemm_dtype == "bf16" else self.kernels.extra("gemm")
        if model is None:
            return self.gemm(m, n, k)
        m, n, k = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (m, n, k)))
        x = np.column_stack([m.ravel(), n.ravel(), k.ravel()])
        return self._scaled(model, x, model.predict(x)).reshape(m.shape)

    def context_attention(self, batch, isl, heads, kv_heads, head_dim) -> np.ndarray:
        a = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                  for v in (batch, isl, heads, kv_heads, head_dim)))
        return self.kernel("context_attention", np.column_stack([x.ravel() for x in a])
                         ).reshape(a[0].shape)

    def generation_attention(self, batch, heads, kv_heads, head_dim, step) -> np.ndarray:
        a = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                  for v in (batch, heads, kv_heads, head_dim, step)))
        return self.kernel("generation_attention", np.column_stack([x.ravel() for x in a])
                         ).reshape(a[0].shape)

    def encoder_attention(self, batch, isl, heads, head_dim) -> np.ndarray:
        a = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                  for v in (batch, isl, heads, head_dim)))
        return self.kernel("encoder_attention", np.column_stack([x.ravel() for x in a])
                         ).reshape(a[0].shape)

    def allreduce(self, gpus: int, elements) -> np.ndarray:
        ar = self.kernels.allreduce
        e = np.asarray(elements, dtype=float)
        t = ar.predict(gpus, e.ravel()).reshape(e.shape)
        if gpus <= 1 or self.gpu.interconnect_ratio == 1.0:
            return t
        t0 = ar.fixed_s(gpus)
        return t0 + np.maximum(t - t0, 0.0) / self.gpu.interconnect_ratio

    # --- extra kinds (MoE and MLA models) -------------------------------------------------
    def has_moe(self, key: tuple[int, ...]) -> bool:
        """Whether the fused-MoE table measured this (hidden, inter, topk, experts, moe_tp,
        moe_ep) shape."""
        moe = self.kernels.extra("moe")
        return moe is not None and moe.has(key)

    def moe(self, key: tuple[int, ...], tokens) -> np.ndarray:
        """One MoE layer's fused experts for `tokens` tokens (see has_moe); on a derived GPU
        scaled by the roofline ratio of its experts' FLOPs and weight bytes."""
        t = self.kernels.extra("moe").predict(key, tokens)
        c, b, _ = self.scale
        if c == 1.0 and b == 1.0:
            return t
        hidden, inter, topk, experts, mtp, mep = key
        x = np.maximum(np.asarray(tokens, dtype=float), 1.0)
        w = 3.0 * hidden * inter / mtp
        local = experts / mep
        touched = local * (1.0 - (1.0 - topk / experts) ** x)
        flops = 2.0 * x * topk / mep * w
        nbytes = MOE_BYTES[self.kernels.gemm_dtype] * touched * w
        p, bw = self.kernels.hw.peak_flops, self.kernels.hw.mem_bw
        return t * np.maximum(flops / (p * c), nbytes / (bw * b)) / np.maximum(flops / p,
                                                                              nbytes / bw)

    def mla_module(self, kind: str, shapes) -> np.ndarray | None:
        """DeepSeek-V3's whole MLA block (mla_context_module / mla_generation_module rows),
        or None where the source has no such table."""
        model = self.kernels.extra(kind)
        if model is None:
            return None
        x = np.atleast_2d(np.asarray(shapes, dtype=float))
        return self._scaled(model, x, model.predict(x))

    def has_gdn(self) -> bool:
        """Whether the source measured the four Gated DeltaNet kernels (gdn tables)."""
        return all(self.kernels.extra(f"gdn_{k}_{ph}") is not None
                   for k in ("conv", "scan") for ph in ("context", "generation"))

    def gdn(self, phase: str, batch, seq, heads: tuple[int, int, int, int, int]
            ) -> np.ndarray:
        """One Gated DeltaNet layer's conv and recurrence for `batch` sequences of `seq`
        tokens (phase context) or one token each (generation); `heads`: (k heads per GPU,
        k dim, v heads per GPU, v dim, conv taps). Needs has_gdn()."""
        b, s = np.broadcast_arrays(np.asarray(batch, float), np.asarray(seq, float))
        x = np.column_stack([b.ravel(), s.ravel()] + [np.full(b.size, float(v))
                                                      for v in heads])
        t = 0.0
        for k in ("conv", "scan"):
            model = self.kernels.extra(f"gdn_{k}_{phase}")
            t = t + self._scaled(model, x, model.predict(x))
        return np.asarray(t).reshape(b.shape)

    def alltoall(self, gpus: int, elements) -> np.ndarray:
        """NCCL all-to-all of `elements` bf16 values per GPU; where the source has no
        all-to-all table, the all-reduce table's time (an upper bound: same bytes, more
        steps)."""
        a2a = self.kernels.extra("nccl_alltoall")
        e = np.asarray(elements, dtype=float)
        if gpus <= 1:
            return np.zeros_like(e)
        if a2a is None or gpus not in a2a.gpu_counts:
            return self.allreduce(gpus, e)
        t = a2a.predict(gpus, e.ravel()).reshape(e.shape)
        if self.gpu.interconnect_ratio == 1.0:
            return t
        t0 = a2a.fixed_s(gpus)
        return t0 + np.maximum(t - t0, 0.0) / self.gpu.interconnect_ratio

    def elementwise(self, nbytes, kernels: int = 1) -> np.ndarray:
        """Memory-bound element-wise kernels (norms, activations, RoPE): the source's
        empirical constant per kernel plus bytes at its empirical share of bandwidth."""
        hw = self.kernels.hw
        return kernels * hw.mem_latency_s + np.asarray(nbytes, dtype=float) / (
            self.mem_bw * hw.mem_bw_efficiency)


def build_device(root: Path | KernelSource, gpu: str | GPUSpec,
                 holdout_fraction: float = HOLDOUT_FRACTION, holdout_seed: int = HOLDOUT_SEED,
                 max_rows: int | None = None) -> Device:
    """`gpu`: a name in GPUS, or a spec (a kernel source's system without a hastune name)."""
    spec = GPUS[gpu] if isinstance(gpu, str) else gpu
    src = as_source(root)
    kern = system_kernels(src, spec.system, holdout_fraction, holdout_seed, max_rows)
    proxy = None
    if "encoder_attention" not in kern.models:
        proxy = system_kernels(src, ATTENTION_PROXY_SYSTEM, holdout_fraction,
                               holdout_seed, max_rows)
    return Device(spec, kern, proxy)
