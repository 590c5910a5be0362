"""Latency profile of one model on one GPU: the clock of the simulator.

A profile gives, for one model on one GPU type:
- encode latency of a batch: fixed + per item + per encoder token (+ per token² within an item,
  for attention), and its slowdown at an SM share f < 1 (`sm_curve`, per batch size);
- prefill latency of a batch: fixed + per token + per token² (attention), and its SM-share curve;
- decode step latency: fixed (weights read) + per sequence + per context token (KV read);
- memory: GPU bytes, LLM and encoder weight bytes, KV bytes per token, activation headroom.

`tp` is the tensor-parallel degree the sections describe (latencies of one TP group; memory
figures per GPU of it). A model too big for one GPU has a base `tp` > 1. `variants` holds the
sections at other TP degrees; `Profile.for_tp(tp)` returns the profile at one of them. `fit`
records how the profile was fitted: on kernel tables (calibrated, see hastune.calibrate) or on
measurements of a real model (`hastune profile`, hastune.calibrate.measure); docs/profiles.md.

Latencies are linear in their features so the simulator can advance a decode batch in closed
form (see hastune.sim.decode) instead of step by step.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from hastune.errors import from_pydantic
from hastune.schema import drop_new_defaults
from hastune.yamlio import read_yaml_mapping

Curve = list[tuple[float, float]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no NaN / ±inf
    # fields added since a model's first release, left out of a dump while at their default,
    # so a profile that does not use them dumps (and hashes, hastune.tune.identity) as before
    _since: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_new_defaults(self, handler: Any) -> Any:
        return drop_new_defaults(self, handler(self), self._since)


def _check_curve(points: Curve, what: str) -> Curve:
    if len(points) < 2:
        raise ValueError(f"{what} needs at least two (share, relative latency) points")
    shares = [s for s, _ in points]
    if shares != sorted(shares) or len(set(shares)) != len(shares):
        raise ValueError(f"{what} shares must be strictly increasing")
    if shares[0] <= 0 or shares[-1] != 1.0:
        raise ValueError(f"{what} shares must lie in (0, 1] and end at 1.0")
    if abs(points[-1][1] - 1.0) > 1e-9:
        raise ValueError(f"{what} must have relative latency 1.0 at share 1.0")
    rels = [r for _, r in points]
    if any(r < 1.0 - 1e-9 for r in rels) or any(a < b - 1e-9 for a, b in zip(rels, rels[1:])):
        raise ValueError(f"{what} relative latency must be ≥ 1 and not rise as share grows")
    return [(float(s), float(r)) for s, r in points]


def interp_curve(points: Curve, share: float) -> float:
    """Relative latency at `share` by linear interpolation in 1/share-free piecewise form."""
    if share >= 1.0:
        return 1.0
    shares = [s for s, _ in points]
    if share <= shares[0]:
        # below the first point latency grows like 1/share (nothing runs at share 0)
        return points[0][1] * shares[0] / max(share, 1e-6)
    i = bisect_left(shares, share)
    s0, r0 = points[i - 1]
    s1, r1 = points[i]
    return r0 + (r1 - r0) * (share - s0) / (s1 - s0)


class MemorySpec(_Strict):
    """Per GPU of a TP group: weights and KV heads are split across the group's GPUs."""

    gpu_bytes: float = Field(gt=0, description="usable device memory in bytes")
    weight_bytes: float = Field(gt=0, description="LLM weights in bytes (per GPU)")
    encoder_weight_bytes: float = Field(ge=0, description="encoder + projector weights in bytes")
    kv_bytes_per_token: float = Field(gt=0)
    activation_bytes: float = Field(ge=0, default=0.0, description="headroom kept free")
    utilisation: float = Field(gt=0, le=1.0, default=0.9, description="share of gpu_bytes usable")

    def kv_capacity_tokens(self, with_encoder: bool = False, pp: int = 1) -> int:
        """KV tokens one GPU holds; over `pp` pipeline stages it holds 1/pp of the LLM's
        weights and of each token's KV."""
        free = self.gpu_bytes * self.utilisation - self.weight_bytes / pp - self.activation_bytes
        if with_encoder:
            free -= self.encoder_weight_bytes
        return max(0, int(free // (self.kv_bytes_per_token / pp)))


class EncodeSpec(_Strict):
    fixed_s: float = Field(ge=0)
    per_item_s: float = Field(ge=0, default=0.0)
    per_token_s: float = Field(ge=0, description="per encoder input token (patch/frame)")
    per_token_sq_s: float = Field(ge=0, default=0.0, description="× Σ tokens² per item (attention)")
    sm_curve: dict[int, Curve] | None = Field(
        default=None, description="batch size → [(SM share, latency relative to share 1.0)]"
    )

    @field_validator("sm_curve")
    @classmethod
    def _curves(cls, v: dict[int, Curve] | None) -> dict[int, Curve] | None:
        if v is None:
            return None
        if not v or any(k < 1 for k in v):
            raise ValueError("sm_curve keys are batch sizes ≥ 1")
        return {int(k): _check_curve(pts, f"sm_curve[{k}]") for k, pts in sorted(v.items())}

    def latency(self, items: int, tokens: float, tokens_sq: float) -> float:
        """Seconds to encode a batch on the whole GPU."""
        return (self.fixed_s + self.per_item_s * items + self.per_token_s * tokens
                + self.per_token_sq_s * tokens_sq)

    def curve_for(self, batch: int) -> Curve | None:
        """The SM curve of the smallest profiled batch ≥ `batch` (the conservative one)."""
        if not self.sm_curve:
            return None
        for k, pts in self.sm_curve.items():
            if k >= batch:
                return pts
        return self.sm_curve[max(self.sm_curve)]


class PrefillSpec(_Strict):
    fixed_s: float = Field(ge=0)
    per_token_s: float = Field(gt=0)
    per_token_sq_s: float = Field(ge=0, default=0.0, description="× Σ L² (attention)")
    max_batch_tokens: int = Field(gt=0, default=8192)
    sm_curve: Curve = Field(
        default=[(0.1, 9.0), (0.3, 3.2), (0.5, 1.95), (0.7, 1.38), (0.9, 1.08), (1.0, 1.0)]
    )

    @field_validator("sm_curve")
    @classmethod
    def _curve(cls, v: Curve) -> Curve:
        return _check_curve(v, "sm_curve")

    def latency(self, tokens: float, tokens_sq: float) -> float:
        return self.fixed_s + self.per_token_s * tokens + self.per_token_sq_s * tokens_sq


class DecodeSpec(_Strict):
    fixed_s: float = Field(gt=0, description="per step, independent of batch (weights read)")
    per_seq_s: float = Field(ge=0)
    per_context_token_s: float = Field(ge=0, description="per token of KV read per step")
    max_batch: int = Field(gt=0, default=256)

    def step(self, batch: int, context_tokens: float) -> float:
        return self.fixed_s + self.per_seq_s * batch + self.per_context_token_s * context_tokens


class TPVariant(_Strict):
    """The sections of a profile at another tensor-parallel degree. `encode` absent: the
    base's (the encoder runs on one GPU either way). `memory` absent: the base's, with weight
    and KV bytes per GPU scaled by base tp / this tp."""

    prefill: PrefillSpec
    decode: DecodeSpec
    encode: EncodeSpec | None = None
    memory: MemorySpec | None = None
    ep: int = Field(default=1, ge=1, description="expert-parallel degree of these sections "
                    "(1: every expert split over the TP group; > 1: whole experts spread "
                    "over ep GPUs, MoE models, see Profile.ep_variants)")
    _since: ClassVar[tuple[str, ...]] = ("ep",)


class FitStat(_Strict):
    """Relative error of a fitted linear form against the model it was fitted to, in %."""

    median_pct: float = Field(ge=0)
    p90_pct: float = Field(ge=0)
    max_pct: float = Field(ge=0)
    points: int = Field(gt=0)


class MeasuredFit(_Strict):
    """How a measured profile was made (`hastune profile`): the device, the grid, and the
    linear forms' error on the rows they were fitted on (`FitRecord.error` holds the error on
    the held-out measured rows)."""

    device: str = Field(description="what was measured on, e.g. 'cpu: AMD EPYC, 2 threads'")
    torch: str = Field(description="torch version")
    command: str = Field(description="the command that regenerates the profile")
    warmup: int = Field(ge=0, description="untimed runs before each measured shape")
    repeats: int = Field(ge=1, description="timed runs per shape; the median is kept")
    rows: dict[str, int] = Field(description="stage → measured shapes (fitted + held out)")
    share: str = Field(description="what the sm_curve shares mean on this device")
    fitted_error: dict[str, FitStat] = Field(
        default_factory=dict, description="stage → error on the fitted rows")


class FitRecord(_Strict):
    """How a profile was fitted: on kernel tables (`calibration`: the hold-out, any scaling)
    or on measurements of a real model (`measured`)."""

    calibration: str | None = Field(
        default=None, description="kernel-table system, e.g. a100_sxm (calibrated profiles)")
    measured: MeasuredFit | None = Field(
        default=None, description="measured profiles: device, grid, fitted-row errors")
    holdout_fraction: float = Field(ge=0, lt=1, default=0.2)
    holdout_seed: int = 0
    scale: dict[str, float] | None = Field(
        default=None, description="derived GPU: compute / memory_bandwidth / interconnect ratios")
    error: dict[str, FitStat] = Field(
        default_factory=dict, description="stage (or stage@tpN) → linear-fit error (measured "
        "profiles: on held-out measured rows)")
    kernel_source: dict[str, str | None] | None = Field(
        default=None, description="the kernel database when not the calibration folder "
        "(database, package, engine, version, gemm_dtype, kv_dtype, moe_distribution): what "
        "`hastune profile check` reads again; `collectives` where a rack-scale GPU's "
        "collectives past its measured GPU counts are its 8-GPU twin's, scaled, or built by "
        "the bus factor; `tp_built` the TP degrees whose all-reduce no table measured")
    composition: dict[str, str] | None = Field(
        default=None, description="MoE / MLA models: which tables timed the experts, the "
        "all-to-all and the MLA block (e.g. grouped GEMMs where the MoE table lacks a shape)")
    _since: ClassVar[tuple[str, ...]] = ("kernel_source", "composition")

    @model_validator(mode="after")
    def _one_source(self) -> FitRecord:
        if (self.calibration is None) == (self.measured is None):
            raise ValueError("a fit record names either calibration (the kernel-table system) "
                             "or measured (a `hastune profile` run), not both or neither. Fix: "
                             "regenerate the profile")
        return self


class Profile(_Strict):
    kind: Literal["profile"] = "profile"
    name: str
    model: str
    gpu: str
    source: str = Field(description="where the numbers come from (measured, fitted, starter)")
    method: str = ""
    memory: MemorySpec
    embedding_bytes_per_token: float = Field(gt=0, description="E→P bytes per LLM token")
    encode: EncodeSpec
    prefill: PrefillSpec
    decode: DecodeSpec
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree the sections describe")
    variants: dict[int, TPVariant] = Field(
        default_factory=dict, description="TP degree → sections at that degree")
    ep_variants: dict[int, dict[int, TPVariant]] = Field(
        default_factory=dict, description="MoE models: TP degree → expert-parallel degree "
        "(> 1) → sections with whole experts over ep GPUs (memory included)")
    dp_variants: dict[int, TPVariant] = Field(
        default_factory=dict, description="MoE models: attention-DP group size n → the sections "
        "of one of its n ranks (attention and dense layers at TP 1 on the rank's own batch, "
        "whole experts over the n GPUs: ep n; memory included)")
    min_pp: int = Field(default=1, ge=1, le=16, description="pipeline stages the weights need "
                        "to fit at these TP degrees (> 1: a model larger than one node)")
    fit: FitRecord | None = None
    kv_on_demand: bool = Field(default=False, description="KV taken as tokens come, requests "
                               "preempted when it runs out (vLLM, SGLang; engine_terms)")
    batch_wait: tuple[int, float] = (0, 0.0)  # TensorRT-LLM's (iters, ratio): Scheduler.wait_*
    path: str | None = Field(default=None, exclude=True)
    _since: ClassVar[tuple[str, ...]] = ("ep_variants", "min_pp", "kv_on_demand", "batch_wait",
                                         "dp_variants")

    @model_validator(mode="after")
    def _fits(self) -> Profile:
        pp = self.min_pp
        if self.memory.kv_capacity_tokens(pp=pp) <= 0:
            raise ValueError(
                f"the LLM weights do not fit in GPU memory at tp {self.tp}"
                + (f" over {pp} pipeline stages" if pp > 1 else "") + " (no room left for "
                "KV cache). Fix: check memory.gpu_bytes / weight_bytes (per GPU), raise tp "
                "or min_pp, or use a larger GPU"
            )
        for deg in self.variants:
            if deg < 1 or deg == self.tp:
                raise ValueError(
                    f"variants has tp {deg}. Fix: use TP degrees ≥ 1 other than the base tp "
                    f"{self.tp} (the base sections describe tp {self.tp})")
            if self.memory_at(deg).kv_capacity_tokens(pp=pp) <= 0:
                raise ValueError(
                    f"variants[{deg}]: the LLM weights do not fit in GPU memory at tp {deg}. "
                    "Fix: drop that variant or correct its memory section")
        for deg, eps in self.ep_variants.items():
            for ep, v in eps.items():
                where = f"ep_variants[{deg}][{ep}]"
                if deg not in self.tp_degrees or ep < 2 or v.ep != ep or v.memory is None:
                    raise ValueError(
                        f"{where}: an expert-parallel variant needs a TP degree of the profile "
                        f"({', '.join(map(str, self.tp_degrees))}), ep ≥ 2 equal to its `ep` "
                        "and its own memory section. Fix: regenerate the profile")
                if v.memory.kv_capacity_tokens(pp=pp) <= 0:
                    raise ValueError(f"{where}: the LLM weights do not fit in GPU memory. "
                                     "Fix: drop that variant or correct its memory section")
        for n, v in self.dp_variants.items():
            if n < 2 or v.ep != n or v.memory is None or v.memory.kv_capacity_tokens() <= 0:
                raise ValueError(
                    f"dp_variants[{n}]: an attention-DP variant needs n ≥ 2 equal to its `ep` "
                    "and its own memory section that leaves room for KV. Fix: regenerate the "
                    "profile")
        return self

    def ep_degrees(self, tp: int) -> list[int]:
        """Expert-parallel degrees the profile has at TP degree `tp` (1: experts TP-split)."""
        return [1, *sorted(self.ep_variants.get(tp, {}))]

    def for_parallel(self, tp: int, ep: int = 1) -> Profile:
        """This profile at TP degree `tp` with experts over `ep` GPUs (1: `for_tp(tp)`);
        ValueError naming what there is if absent."""
        p = self.for_tp(tp)
        if ep == 1:
            return p
        v = self.ep_variants.get(tp, {}).get(ep)
        if v is None:
            raise ValueError(
                f"profile {self.name} has no expert-parallel variant tp={tp}, ep={ep} (ep "
                f"degrees at tp {tp}: {', '.join(map(str, self.ep_degrees(tp)))}). Fix: use "
                "one of those, or regenerate the profile")
        return p.model_copy(update={"prefill": v.prefill, "decode": v.decode,
                                    "encode": v.encode or p.encode, "memory": v.memory})

    def for_dp(self, n: int) -> Profile:
        """One rank of an attention-DP group of n GPUs (`dp_variants`) as a profile at TP 1
        without other variants; ValueError naming the group sizes there are if absent."""
        v = self.dp_variants.get(n)
        if v is None:
            have = ", ".join(map(str, sorted(self.dp_variants))) or "none"
            raise ValueError(f"profile {self.name} has no attention-DP variant of {n} ranks "
                             f"(it has {have}). Fix: use one of those, or regenerate the "
                             "profile")
        return self.model_copy(update={
            "tp": 1, "prefill": v.prefill, "decode": v.decode, "encode": v.encode or self.encode,
            "memory": v.memory, "variants": {}, "ep_variants": {}, "dp_variants": {},
            "min_pp": 1})

    def memory_at(self, tp: int) -> MemorySpec:
        """Per-GPU memory at TP degree `tp` (the variant's, or the base's scaled)."""
        if tp == self.tp:
            return self.memory
        v = self._variant(tp)
        if v.memory is not None:
            return v.memory
        return self._split(tp)

    def _split(self, tp: int) -> MemorySpec:
        """The base's memory split `tp` ways instead of its own tp."""
        r = self.tp / tp
        return self.memory.model_copy(update={
            "weight_bytes": self.memory.weight_bytes * r,
            "kv_bytes_per_token": self.memory.kv_bytes_per_token * r})

    def _variant(self, tp: int) -> TPVariant:
        v = self.variants.get(tp)
        if v is None:
            have = ", ".join(str(k) for k in sorted({self.tp, *self.variants}))
            head = f"profile {self.name} has no tensor-parallel variant tp={tp} (it has tp {have})"
            need = self._split(max(tp, 1)).weight_bytes
            if 0 < self.memory.gpu_bytes < need:  # no profile at that degree could hold them
                raise ValueError(
                    f"{head}: the weights need {need / 1e9:.0f} GB per GPU at tp={tp}, more "
                    f"than the GPU's {self.memory.gpu_bytes / 1e9:.0f} GB. Fix: use one of "
                    "those degrees")
            raise ValueError(f"{head}. Fix: use one of those, or regenerate the profile with "
                             "that degree")
        return v

    @property
    def tp_degrees(self) -> list[int]:
        return sorted({self.tp, *self.variants})

    def for_tp(self, tp: int) -> Profile:
        """This profile at TP degree `tp`; the base becomes one of its variants, so
        `p.for_tp(2).for_tp(p.tp)` gives back `p`'s sections. ValueError if absent."""
        if tp == self.tp:
            return self
        v = self._variant(tp)
        others = {k: x for k, x in self.variants.items() if k != tp}
        others[self.tp] = TPVariant(prefill=self.prefill, decode=self.decode,
                                    encode=self.encode, memory=self.memory)
        return self.model_copy(update={
            "tp": tp, "prefill": v.prefill, "decode": v.decode,
            "encode": v.encode or self.encode, "memory": self.memory_at(tp),
            "variants": dict(sorted(others.items()))})


def load_profile(path: str | Path) -> Profile:
    data = read_yaml_mapping(path, "profile")
    try:
        prof = Profile.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(path, exc, model=Profile) from None
    return prof.model_copy(update={"path": str(path)})


def profile_search_dirs(base: Path | None = None) -> list[Path]:
    """Where profiles are looked up: next to the recipe, $HASTUNE_PROFILES, the shipped ones."""
    dirs: list[Path] = []
    if base is not None:
        dirs += [base / "profiles", base.parent / "profiles"]
    env = os.environ.get("HASTUNE_PROFILES")
    if env:
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parent.parent / "profiles")
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


def find_profile(model: str, gpu: str, base: Path | None = None,
                 precision: str = "bf16") -> Path | None:
    """<dir>/<gpu>/<model>.yaml (bf16), or <model>.<precision>.yaml for another precision tag
    (fp8, fp8-kvfp8, bf16-kvfp8: hastune.model_ref.Precision.tag), in the first search dir
    holding one."""
    name = f"{model}.yaml" if precision == "bf16" else f"{model}.{precision}.yaml"
    for d in profile_search_dirs(base):
        cand = d / gpu / name
        if os.path.exists(cand):  # False, not OSError, for a name too long for a path
            return cand
    return None


def available_profiles(base: Path | None = None) -> list[str]:
    found = []
    for d in profile_search_dirs(base):
        for p in sorted(d.glob("*/*.yaml")):
            found.append(f"{p.parent.name}/{p.stem}")
    return sorted(set(found))
