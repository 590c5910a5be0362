"""Assemble a calibrated profile (the YAML mapping hastune.profile reads) for one model on
one GPU: the base TP degree, the variants at the other degrees, and the fit record. A MoE
model also gets, at each TP degree ≥ 2 whose group divides its experts, an expert-parallel
variant (ep = tp: whole experts per GPU) under `ep_variants`; the fit record names the kernel
source when it is not the calibration folder and how MoE / MLA parts were timed."""

from __future__ import annotations

from pathlib import Path

import yaml

from hastune.calibrate.archs import MODELS, ModelArch
from hastune.calibrate.device import ATTENTION_PROXY_SYSTEM, Device, build_device
from hastune.calibrate.fit import LinearFit, fit_decode, fit_encode, fit_prefill
from hastune.calibrate.gpus import GPUSpec
from hastune.calibrate.latency import MAX_BATCH_TOKENS, MAX_SEQS, LatencyModel
from hastune.calibrate.sources import KernelSource
from hastune.models.spec import refuse_experts_only

TP_DEGREES = (1, 2, 4, 8)
UTILISATION = 0.9

# Encode SM-share curves keep the EAServe seed's shape: saturation share per batch size, chosen
# so a 20% latency budget reproduces the seed's table (1→20%, 2→30%, 4→40%, 6→60%, 8→75%),
# with rel(f) = (f_sat/f)^0.53 below saturation (the seed's 500 ms at 10% vs 280 ms at 30%).
F_SAT = {1: 0.28, 2: 0.42, 4: 0.56, 6: 0.85, 8: 1.0}
SM_SHAPE = 0.53
SM_SHARES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def sm_curve(f_sat: float) -> list[list[float]]:
    return [[s, round(max(1.0, (f_sat / s) ** SM_SHAPE), 4)] for s in SM_SHARES]


def _arch(model: str | ModelArch) -> ModelArch:
    return MODELS[model] if isinstance(model, str) else model


PP_DEGREES = (1, 2, 4, 8, 16)  # pipeline stages a config may use (Parallel.pp ≤ 16)


def tp_degrees(model: str | ModelArch, dev: Device, pp: int = 1) -> list[int]:
    """TP degrees whose weights, over `pp` pipeline stages, fit with room for
    MIN_KV_TOKENS of KV per GPU."""
    arch = _arch(model)
    return [tp for tp in (*TP_DEGREES, *RACK_TP) if arch.llm.supports_tp(tp)
            and tp in {1, *dev.kernels.allreduce.gpu_counts}
            and LatencyModel(arch, dev, tp).fits(pp)]


def fitting(arch: ModelArch, dev: Device) -> tuple[int, list[int]] | None:
    """The fewest pipeline stages at which some TP degree of one node fits (1 for every
    model that fits one node; more for one that needs several nodes) and those TP degrees;
    None: none does."""
    for pp in PP_DEGREES:
        degrees = tp_degrees(arch, dev, pp)
        if degrees:
            return pp, degrees
    return None


def ep_degrees(arch: ModelArch, dev: Device, tp: int, pp: int = 1) -> list[int]:
    """Expert-parallel degrees > 1 profiled at `tp`: ep = tp where the experts split."""
    if not arch.llm.moe or tp < 2 or not arch.llm.supports_ep(tp):
        return []
    return [tp] if LatencyModel(arch, dev, tp, tp).fits(pp) else []


DP_GROUPS = (2, 4, 8)  # attention-DP group sizes profiled (one node's GPUs)
# past one node, where a rack's NVLink domain reaches and its collectives are built
# (hastune.calibrate.aic_fabric.STRETCH): a TP degree, attention-DP groups
RACK_TP = (16,)
RACK_DP = (16, 32)


def dp_degrees(arch: ModelArch, dev: Device) -> list[int]:
    """Attention-DP group sizes n profiled: ranks at TP 1 whose experts split over n GPUs,
    where they do, the tables time an all-to-all over n GPUs (or the all-reduce standing for
    it, Device.alltoall) and a rank's GPU holds its weights (one stage)."""
    if not arch.llm.moe:
        return []
    a2a = dev.kernels.extra("nccl_alltoall")
    counts = {*dev.kernels.allreduce.gpu_counts, *(a2a.gpu_counts if a2a is not None else ())}
    return [n for n in (*DP_GROUPS, *RACK_DP) if arch.llm.supports_ep(n) and n in counts
            and LatencyModel(arch, dev, 1, n).fits(1)]


def _kernel_source(dev: Device) -> dict | None:
    """The kernel database's settings (what `hastune profile check` builds the source from);
    None for the calibration folder."""
    from hastune.calibrate.aic import AicSource, package_version

    src = dev.kernels.source
    if not isinstance(src, AicSource):
        return None
    out = {"database": "aiconfigurator-core", "package": package_version(),
           "engine": src.engine, "version": src.version, "gemm_dtype": src.gemm_dtype,
           "kv_dtype": src.kv_dtype, "moe_distribution": src.distribution,
           "measured_with": dev.kernels.hw.measured_with}
    system = dev.kernels.hw.system
    derived = src.derived_collectives(system)
    if derived:
        out["collectives"] = derived
    built = [tp for tp in RACK_TP if tp in src.built_counts(system, "allreduce")]
    if built:   # TP degrees whose all-reduce no table measured (hastune.caveats says so)
        out["tp_built"] = ", ".join(map(str, built))
    return out


def _memory(lm: LatencyModel) -> dict:
    return {"gpu_bytes": float(lm.dev.mem_bytes), "weight_bytes": float(lm.weight_bytes),
            "encoder_weight_bytes": float(lm.encoder_weight_bytes),
            "kv_bytes_per_token": float(lm.kv_bytes_per_token),
            "activation_bytes": float(f"{lm.activation_bytes:.4g}"),
            "utilisation": UTILISATION}


def _sections(lm: LatencyModel, errors: dict, suffix: str, comp: dict | None = None) -> dict:
    if comp is not None:      # how MoE / MLA parts were timed, where it differs from the base
        for k, v in lm.composition().items():
            if comp.setdefault(k, v) != v:
                comp[k + suffix] = v
    pre, dec = fit_prefill(lm), fit_decode(lm)
    errors["prefill" + suffix] = pre.stat()
    errors["decode" + suffix] = dec.stat()
    return {"prefill": {**pre.as_dict(), "max_batch_tokens": MAX_BATCH_TOKENS},
            "decode": {**dec.as_dict(), "max_batch": MAX_SEQS},
            "memory": _memory(lm)}


def _encode(lm: LatencyModel, errors: dict) -> dict:
    if lm.arch.encoder is None:
        return {"fixed_s": 0.0, "per_item_s": 0.0, "per_token_s": 0.0, "per_token_sq_s": 0.0}
    enc: LinearFit = fit_encode(lm)
    errors["encode"] = enc.stat()
    return {**enc.as_dict(), "sm_curve": {b: sm_curve(f) for b, f in F_SAT.items()}}


def _source(dev: Device) -> str:
    hw, gpu = dev.kernels.hw, dev.gpu
    tables = f"{hw.system} kernel tables ({hw.measured_with})"
    if gpu.derived:
        return (f"DERIVED: no kernel table for {gpu.label}; {tables} scaled to its nominal "
                f"specs. Fitted on the {dev.kernels.database}.")
    return f"CALIBRATED: fitted on measured {tables}, {dev.kernels.database}."


def _method(model: str | ModelArch, dev: Device) -> str:
    arch = _arch(model)
    c, b, i = dev.scale
    parts = [
        "Per-layer latency model (hastune.calibrate): GEMMs and attention interpolated in "
        "the kernel tables where the shape was measured, roofline x fitted efficiency "
        "elsewhere; TP all-reduce from the all-reduce table; element-wise kernels from bytes "
        "/ bandwidth. The linear forms below are least-squares fits (relative error) to that "
        "model over a grid of batches and lengths; `fit.error` gives their error. Held-out "
        "kernel rows: `hastune profile check`.",
        f"LLM: {arch.note}. Memory per GPU of the TP group, KV for every layer.",
    ]
    if arch.encoder is not None:
        parts.append(f"Encoder (one GPU): {arch.encoder.name}; {arch.encoder.note}. "
                     "SM-share curves keep the EAServe seed's shape.")
        if "encoder_attention" not in dev.kernels.models:
            parts.append(f"{dev.kernels.hw.system} has no encoder-attention table: the "
                         f"{ATTENTION_PROXY_SYSTEM} one, scaled by the ratio of the two "
                         "systems' causal-attention times.")
    else:
        parts.append("Text-only model: the encode section is zero.")
    if arch.llm.moe or arch.llm.mla:
        parts.append("MoE / MLA parts as hastune.calibrate.latency composes them; which tables "
                     "timed them: `fit.composition`." + (" Expert-parallel sections (whole "
                                                          "experts per GPU, all-to-all per MoE "
                                                          "layer): `ep_variants`."
                                                          if arch.llm.moe else ""))
    if dev.gpu.derived:
        parts.append(f"Derived GPU: {dev.gpu.note}. Kernel times scaled by the roofline ratio "
                     f"(compute x{c:.3f}, memory bandwidth x{b:.3f}), all-reduce bandwidth "
                     f"x{i:.3f}; the launch latency is kept.")
    return " ".join(parts)


def profile_dict(model: str | ModelArch, gpu: str | GPUSpec, root: Path | KernelSource
                 ) -> dict:
    """The profile mapping for `model` (a name in MODELS or an architecture) on `gpu`,
    fitted on the kernel tables under `root` (a calibration folder or a kernel source)."""
    arch = _arch(model)
    refuse_experts_only(getattr(root, "gemm_dtype", "bf16"), arch)
    dev = build_device(root, gpu)
    model, gpu = arch.name, dev.gpu.name
    # a model too large for one node is profiled at the TP degrees that fit once its layers
    # are split over the fewest pipeline stages that hold it (a config then needs pp ≥ that:
    # the memory rule removes the others)
    fits = fitting(arch, dev)
    if fits is None:
        raise ValueError(f"{model} does not fit on {gpu} at any TP degree in {TP_DEGREES} "
                         f"with up to {PP_DEGREES[-1]} pipeline stages")
    pp, degrees = fits
    base = degrees[0]
    errors: dict[str, dict] = {}
    lm = LatencyModel(arch, dev, base, pp=pp)
    comp: dict[str, str] = {}
    sections = _sections(lm, errors, "", comp)
    encode = _encode(lm, errors)
    variants = {tp: _sections(LatencyModel(arch, dev, tp, pp=pp), errors, f"@tp{tp}", comp)
                for tp in degrees[1:]}
    ep_variants = {tp: {ep: {**_sections(LatencyModel(arch, dev, tp, ep, pp), errors,
                                         f"@tp{tp}ep{ep}", comp), "ep": ep}
                        for ep in ep_degrees(arch, dev, tp, pp)} for tp in degrees}
    ep_variants = {tp: v for tp, v in ep_variants.items() if v}
    dp_variants = {n: {**_sections(LatencyModel(arch, dev, 1, n), errors, f"@dp{n}", comp),
                       "ep": n} for n in dp_degrees(arch, dev)}
    c, b, i = dev.scale
    fit = {"calibration": dev.kernels.hw.system,
           "holdout_fraction": dev.kernels.holdout_fraction,
           "holdout_seed": dev.kernels.holdout_seed,
           "scale": ({"compute": round(c, 4), "memory_bandwidth": round(b, 4),
                      "interconnect": round(i, 4)} if dev.gpu.derived else None),
           "error": errors}
    ksrc = _kernel_source(dev)
    if ksrc is not None:
        fit["kernel_source"] = ksrc
    if comp:
        fit["composition"] = comp
    data = {
        "kind": "profile", "name": f"{model}@{gpu}", "model": model, "gpu": gpu,
        "source": _source(dev), "method": _method(arch, dev),
        "tp": base, "memory": sections["memory"],
        "embedding_bytes_per_token": float(arch.llm.hidden * 2),
        "encode": encode, "prefill": sections["prefill"], "decode": sections["decode"],
        "variants": variants, "fit": fit,
    }
    if ep_variants:
        data["ep_variants"] = ep_variants
    if dp_variants:
        data["dp_variants"] = dp_variants
    if pp > 1:
        data["min_pp"] = pp
    data["fit"] = data.pop("fit")          # the fit record stays last
    return data


HEADER = ("# {how} profile: {name} (tp {tp}; variants at tp {variants}).\n"
          "# Generated by scripts/make_profiles.py from the kernel tables in "
          "{origin} ({system}) -- do not edit by hand.\n"
          "# Fit error of the linear forms vs the per-layer model (median / P90 %): {errs}\n"
          "# Check against held-out kernel rows: hastune profile check <this file>\n")


def render(data: dict, origin: str = "hastune/data/calibration") -> str:
    """The profile as YAML under its header; `origin`: where its kernel tables came from."""
    errs = ", ".join(f"{k} {v['median_pct']:.1f}/{v['p90_pct']:.1f}"
                     for k, v in data["fit"]["error"].items() if "@" not in k)
    how = "Derived" if data["fit"]["scale"] else "Calibrated"
    head = HEADER.format(how=how, name=data["name"], tp=data["tp"],
                         variants=", ".join(map(str, data["variants"])) or "none",
                         system=data["fit"]["calibration"], errs=errs, origin=origin)
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True,
                                 default_flow_style=None, width=100)

