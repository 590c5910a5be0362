"""How well the kernel predictors reproduce measured rows: the ones they were fitted on and
the held-out ones they never saw (what `hastune profile check` prints). The tables are a
calibration folder's or any kernel source's (`source_of_fit` rebuilds the one a profile's fit
record names, e.g. aiconfigurator-core at the engine, version and dtypes it was built with)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hastune.calibrate.device import system_kernels
from hastune.calibrate.kernels import abs_pct_error
from hastune.calibrate.sources import KernelSource, as_source
from hastune.calibrate.tables import (
    HOLDOUT_FRACTION,
    HOLDOUT_SEED,
    KINDS,
    Hardware,
    has_table,
    load_hardware,
    load_table,
)

GATED = ("gemm", "context_attention", "generation_attention", "encoder_attention")
GATE_PCT = 10.0  # held-out median |error| allowed for GEMM and attention


@dataclass(frozen=True)
class ErrorStat:
    rows: int
    median_pct: float
    p90_pct: float

    @classmethod
    def of(cls, pred: np.ndarray, meas: np.ndarray) -> ErrorStat:
        if len(meas) == 0:
            return cls(0, float("nan"), float("nan"))
        e = abs_pct_error(pred, meas)
        return cls(len(meas), float(np.median(e)), float(np.percentile(e, 90)))


@dataclass(frozen=True)
class KindCheck:
    kind: str
    fitted: ErrorStat | None      # None: the system has no such table
    held_out: ErrorStat | None
    roofline_only: ErrorStat | None   # held-out rows, correction off (what unmeasured shapes get)

    @property
    def passed(self) -> bool:
        if self.kind not in GATED or self.held_out is None:
            return True
        return self.held_out.median_pct <= GATE_PCT


def source_of_fit(kernel_source: dict | None, root: Path | None) -> KernelSource:
    """The kernel source a profile was fitted on: its fit record's `kernel_source` (the
    aiconfigurator-core settings) if it has one, else the calibration folder `root`."""
    if not kernel_source:
        return as_source(root)
    from hastune.calibrate.aic import AicSource, package_version
    from hastune.errors import InputError

    if kernel_source.get("database") != "aiconfigurator-core":
        raise InputError(None, "fit.kernel_source.database", f"unknown kernel database "
                         f"{kernel_source.get('database')!r}", "regenerate the profile")
    have, want = package_version(), kernel_source.get("package")
    if want and have != want:
        raise InputError(None, "fit.kernel_source.package", f"the profile was fitted on "
                         f"aiconfigurator-core {want}, {have} is installed",
                         f"pip install aiconfigurator-core=={want}, or rebuild the profile")
    return AicSource(engine=kernel_source.get("engine") or "vllm",
                     version=kernel_source.get("version"),
                     gemm_dtype=kernel_source.get("gemm_dtype") or "bf16",
                     kv_dtype=kernel_source.get("kv_dtype") or "bf16",
                     distribution=kernel_source.get("moe_distribution") or "power_law_1.2")


def check_system(root: Path | KernelSource, system: str,
                 holdout_fraction: float = HOLDOUT_FRACTION, holdout_seed: int = HOLDOUT_SEED,
                 max_rows: int | None = None) -> list[KindCheck]:
    """Per kernel kind: the error of predictors fitted on the fit rows (at most `max_rows`
    of them) on those rows and on the held-out rows. `root`: a calibration folder or a
    kernel source."""
    src = as_source(root)
    kern = system_kernels(src, system, holdout_fraction, holdout_seed, max_rows)
    out = []
    for kind in KINDS:
        if not src.has_table(system, kind):
            out.append(KindCheck(kind, None, None, None))
            continue
        fit_rows, held = src.table(system, kind).split(holdout_fraction, holdout_seed)
        if kind == "allreduce":
            out.append(KindCheck(
                kind, ErrorStat.of(_allreduce(kern, fit_rows.shapes), fit_rows.latency_s),
                ErrorStat.of(_allreduce(kern, held.shapes), held.latency_s), None))
            continue
        model = kern.models[kind]
        out.append(KindCheck(
            kind, ErrorStat.of(model.predict(fit_rows.shapes), fit_rows.latency_s),
            ErrorStat.of(model.predict(held.shapes), held.latency_s),
            ErrorStat.of(model.baseline(model.fold(held.shapes)), held.latency_s)))
    return out


def _allreduce(kern, shapes: np.ndarray) -> np.ndarray:
    return np.array([kern.allreduce.predict(int(g), s)[0] for g, s in shapes])


def derivation_error(root: Path, source: str, target: str) -> dict[str, ErrorStat]:
    """Predict `target`'s tables from `source`'s, scaled by the ratio of their nominal specs
    as a derived GPU is (hastune.calibrate.device): how far that scaling can be trusted."""
    from hastune.calibrate.device import Device
    from hastune.calibrate.gpus import GPUSpec

    tgt: Hardware = load_hardware(root, target)
    spec = GPUSpec(f"{target}-from-{source}", target, source, peak_flops=tgt.peak_flops,
                   mem_bw=tgt.mem_bw, mem_bytes=tgt.mem_bytes)
    dev = Device(spec, system_kernels(Path(root), source))
    out = {}
    for kind in GATED:
        if kind not in dev.kernels.models or not has_table(root, target, kind):
            continue
        table = load_table(root, target, kind)
        out[kind] = ErrorStat.of(dev.kernel(kind, table.shapes), table.latency_s)
    return out


def proxy_error(root: Path, target: str, proxy: str) -> ErrorStat:
    """Predict `target`'s encoder-attention table as a system without one gets it (from
    `proxy`'s table, see Device._encoder_attention_by_proxy): how far that can be trusted."""
    from dataclasses import replace

    from hastune.calibrate.device import Device
    from hastune.calibrate.gpus import GPUSpec

    own = system_kernels(Path(root), target)
    without = replace(own, models={k: v for k, v in own.models.items()
                                   if k != "encoder_attention"})
    dev = Device(GPUSpec(target, target, target), without, system_kernels(Path(root), proxy))
    table = load_table(root, target, "encoder_attention")
    return ErrorStat.of(dev.kernel("encoder_attention", table.shapes), table.latency_s)
