"""What a recipe's `model`, `precision` and `engine` refer to, and which profile they need.

- `model`: a shipped model's name (hastune.models.shipped) or a path, relative to the recipe,
  to a Hugging Face `config.json` or a folder holding one (hastune.models.load_model).
- `precision: {weights: bf16|fp8, kv_cache: bf16|fp8}`; `precision: fp8` is short for fp8
  weights with a bf16 KV cache (vLLM's `--quantization fp8` alone). Absent: the checkpoint's
  own (fp8 for a config whose `quantization_config` is fp8, else bf16), KV cache bf16.
- `engine: {name: vllm|sglang|trtllm, version: V}` (or `engine: sglang`): whose measured
  kernels a profile built on demand is fitted on; the default is vLLM at the kernel
  database's current version. Nothing else reads it yet.

Core layer: the lookup of a profile file (explicit, or shipped for a named model in bf16 with
the default engine) is here; building one when there is none is hastune.calibrate.ondemand's,
called from the evaluators layer (hastune.evaluators.profile.resolve_profile), so recipes
never import the kernel tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from hastune.errors import InputError
from hastune.profile import available_profiles, find_profile
from hastune.schema import drop_new_defaults

if TYPE_CHECKING:
    from hastune.models.spec import ModelArch
    from hastune.recipe import Recipe

ENGINES = ("vllm", "sglang", "trtllm")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Weights = Literal["bf16", "fp8", "nvfp4", "mxfp4", "int4"]
WEIGHTS: tuple[str, ...] = get_args(Weights)  # what precision.weights may be


class Precision(_Strict):
    """Weights and KV cache: bf16 or fp8 (`precision: fp8` = fp8 weights, bf16 KV cache);
    weights may also be nvfp4 (Blackwell GPUs, an NVFP4 checkpoint), mxfp4 (gpt-oss's own
    format: the routed experts in MXFP4, every other weight bf16) or int4 (weight-only int4
    groups on the routed experts, compressed-tensors: Kimi K2.5's)."""

    weights: Weights = "bf16"
    kv_cache: Literal["bf16", "fp8"] = "bf16"

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: object) -> object:
        if isinstance(data, str):
            return {"weights": data}
        return data

    @property
    def tag(self) -> str:
        """bf16, fp8, fp8-kvfp8, bf16-kvfp8: profile file names and cache keys."""
        return self.weights + ("-kvfp8" if self.kv_cache == "fp8" else "")

    @property
    def label(self) -> str:
        return f"{self.weights} weights, {self.kv_cache} KV cache"


class Engine(_Strict):
    """Whose kernels a profile built on demand is fitted on (`engine: sglang` is short)."""

    name: Literal["vllm", "sglang", "trtllm"] = "vllm"
    version: str | None = Field(default=None, min_length=1, max_length=40,
                                pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$",
                                description="the kernel database's version folder, or "
                                            "'newest' (default: its current one)")
    terms: bool = Field(default=True, description="the engine-level terms fitted on measured "
                        "runs (scheduler defaults, per-iteration CPU time, front end; "
                        "hastune.engine_terms, docs/fidelity.md) on profiles built from "
                        "kernel tables; false: the kernels alone")
    batch_wait_iters: int = Field(default=0, ge=0, le=10_000, description="TensorRT-LLM's "
                                  "batch_wait_timeout_iters: while requests decode, a new "
                                  "prompt waits up to this many iterations for a fuller batch "
                                  "(0, the engine's default: none; nodg, with the terms on)")
    batch_wait_ratio: float = Field(default=0.0, ge=0, le=1, description="TensorRT-LLM's "
                                    "batch_wait_max_tokens_ratio: the wait ends once the next "
                                    "iteration's tokens reach this share of max_num_tokens")
    # fields added since the first release, left out of a dump at their default (identity)
    _since: ClassVar[tuple[str, ...]] = ("batch_wait_iters", "batch_wait_ratio")

    @model_serializer(mode="wrap")
    def _omit_new_defaults(self, handler: Any) -> Any:
        return drop_new_defaults(self, handler(self), self._since)

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: object) -> object:
        if isinstance(data, str):
            return {"name": data}
        return data

    @model_validator(mode="after")
    def _trtllm_only(self) -> Engine:
        if (self.batch_wait_iters or self.batch_wait_ratio) and self.name != "trtllm":
            raise ValueError(f"batch_wait_iters / batch_wait_ratio are TensorRT-LLM's flags, "
                             f"not {self.name}'s. Fix: drop them, or set name: trtllm")
        if bool(self.batch_wait_iters) != bool(self.batch_wait_ratio):
            raise ValueError("batch waiting needs both batch_wait_iters and batch_wait_ratio "
                             "(TensorRT-LLM waits only when both are > 0). Fix: set both, "
                             "e.g. 20 and 0.9, or neither")
        return self

    @property
    def default(self) -> bool:
        return self.name == "vllm" and self.version is None


def is_named(model: str) -> bool:
    """Whether `model` is a shipped model's name (else it is a config path)."""
    from hastune.models.shipped import MODELS

    return model in MODELS


def precision_of(recipe: Recipe, arch: ModelArch | None = None) -> Precision:
    """The recipe's precision, or the checkpoint's (`arch`) where it gives none."""
    if recipe.precision is not None:
        return recipe.precision
    ckpt = arch.llm.checkpoint_precision if arch is not None else "bf16"
    return Precision(weights=ckpt if ckpt in WEIGHTS else "bf16")


def shipped_profile(recipe: Recipe) -> Path | None:
    """The profile file the recipe names (`profile:`), else the shipped (or next to the recipe,
    or $HASTUNE_PROFILES) one for a named model, its precision and the default engine; None
    when a profile must be built (a config path, another precision, engine or GPU)."""
    if recipe.profile:
        p = recipe.resolve(recipe.profile)
        if not p.exists():
            raise InputError(recipe.path, "profile", f"profile file {recipe.profile} not found",
                             "check the path (relative to the recipe)")
        return p
    if not is_named(recipe.model) or not recipe.engine.default:
        return None
    return find_profile(recipe.model, recipe.cluster.gpu, recipe.base_dir,
                        precision_of(recipe).tag)


def no_profile(recipe: Recipe) -> InputError:
    have = available_profiles(recipe.base_dir)
    return InputError(
        recipe.path, "model",
        f"no profile for model {recipe.model!r} on GPU {recipe.cluster.gpu!r} "
        f"({precision_of(recipe).label})",
        "use one of: " + (", ".join(have) if have else "(none found)")
        + " (as cluster.gpu/model), set profile: <path to a profile YAML>, or let hastune "
        "build one from kernel tables (pip install 'hastune[kernels]'; hastune evaluate / "
        "tune do it on first use)")


def load_arch(recipe: Recipe) -> ModelArch:
    """The recipe's model read as an architecture; a bad config is one InputError naming the
    recipe, its `model` field, and the config file and key at fault."""
    from hastune.models import load_model

    try:
        return load_model(recipe.model, base=recipe.base_dir)
    except InputError as exc:
        # the config file and its key at fault; none when the recipe's value itself is wrong
        where = (": ".join(x for x in (exc.file, exc.field and f"key {exc.field}") if x)
                 if exc.file else "")
        raise InputError(recipe.path, "model", f"{where + ': ' if where else ''}{exc.problem}",
                         exc.fix) from None


@dataclass(frozen=True)
class ProfileSource:
    """Where a recipe's profile came from: `file` (the recipe's `profile:`), `shipped`
    (profiles/ or $HASTUNE_PROFILES), `built` (now, from kernel tables, then cached) or
    `cache` (built earlier). Recorded in evaluate / tune output as `profile_source`."""

    kind: Literal["file", "shipped", "built", "cache"]
    path: str
    precision: Precision
    engine: Engine
    kernels: str = ""          # built / cache: the kernel database and version
    build_s: float = 0.0       # built: seconds it took

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "path": self.path,
               "precision": self.precision.model_dump(), "engine": self.engine.model_dump()}
        if self.kernels:
            out["kernels"] = self.kernels
        if self.kind == "built":
            out["build_s"] = round(self.build_s, 2)
        return out
