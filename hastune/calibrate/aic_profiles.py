"""Profiles built from aiconfigurator-core's kernel tables (hastune.calibrate.aic), for the
on-demand builder and `scripts/make_profiles.py --source aic`.

GPU names: a hastune GPU (hastune.calibrate.gpus.GPUS) keeps its spec and reads the tables of
its `system`; derived GPUs (A800, L20, RTX 6000 Ada) are scaled from them as with the CSV
tables. A system of the package that no hastune GPU names (b200_sxm, gb200, rtx_pro_6000_server,
...) is accepted by that name, with the system's own specs.
"""

from __future__ import annotations

from collections.abc import Mapping

from hastune.calibrate.aic import AicSource
from hastune.calibrate.gpus import GPUS, GPUSpec
from hastune.errors import InputError

# weights; the KV cache: bf16 | fp8
PRECISIONS = ("bf16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4")


def gpu_spec(gpu: str, source: AicSource) -> GPUSpec:
    """The spec of a hastune GPU name or of one of the package's systems."""
    if gpu in GPUS:
        spec = GPUS[gpu]
        source.hardware(spec.system)   # the package has the system (else an InputError)
        return spec
    systems = source.systems()
    if gpu in systems:
        return GPUSpec(gpu, gpu, gpu)
    raise InputError(None, "gpu", f"unknown GPU {gpu!r}",
                     f"use a hastune GPU ({', '.join(GPUS)}) or a system of the kernel "
                     f"database ({', '.join(systems)})")


def gpu_table() -> list[dict]:
    """Each hastune GPU and each package system: what its profile is built from."""
    src = AicSource()
    systems = src.systems()
    rows = [{"gpu": g, "system": s.system, "measured": s.system in systems and not s.derived,
             "derived_from": s.system if s.derived else None} for g, s in GPUS.items()]
    named = {s.system for s in GPUS.values()}
    rows += [{"gpu": s, "system": s, "measured": True, "derived_from": None}
             for s in systems if s not in named]
    return rows


def parse_precision(precision: str | Mapping[str, str] | None) -> tuple[str, str]:
    """(weights, kv_cache) from 'bf16' / 'fp8' or {weights: .., kv_cache: ..}."""
    if precision is None:
        return "bf16", "bf16"
    if isinstance(precision, str):
        weights, kv = precision, ("fp8" if precision.startswith("fp8") else "bf16")
    else:
        extra = set(precision) - {"weights", "kv_cache"}
        if extra:
            raise InputError(None, "precision", f"unknown key {sorted(extra)[0]!r}",
                             "use precision: {weights: bf16|fp8, kv_cache: bf16|fp8}")
        weights = precision.get("weights", "bf16")
        kv = precision.get("kv_cache", "bf16")
    if weights not in PRECISIONS:
        raise InputError(None, "precision.weights", f"unknown precision {weights!r}",
                         f"use one of {', '.join(PRECISIONS)}")
    if kv not in ("bf16", "fp8"):
        raise InputError(None, "precision.kv_cache", f"unknown precision {kv!r}",
                         "use bf16 or fp8")
    return weights, kv


def aic_source(precision: str | Mapping[str, str] | None = None, engine: str = "vllm",
               version: str | None = None) -> AicSource:
    weights, kv = parse_precision(precision)
    return AicSource(engine=engine, version=version, gemm_dtype=weights, kv_dtype=kv)


def build_profile(model_arch, gpu: str, precision: str | Mapping[str, str] | None = None,
                  engine: str = "vllm", version: str | None = None) -> dict:
    """The profile mapping (what hastune.profile reads) for `model_arch` (a ModelArch, or a
    name in hastune.calibrate.archs.MODELS) on `gpu`, from the package's kernel tables
    measured with `engine`. Render it with hastune.calibrate.build.render(data,
    origin=aic_source(...).origin).

    Kernel times follow `precision` (fp8 GEMM, fp8 KV attention, where the tables have
    them; an InputError naming what there is where not). Weight and KV bytes are the
    architecture's (hastune.calibrate.latency)."""
    from hastune.calibrate.build import profile_dict

    src = aic_source(precision, engine, version)
    return profile_dict(model_arch, gpu_spec(gpu, src), src)
