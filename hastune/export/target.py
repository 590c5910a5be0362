"""What a tuned deployment is for: the `target:` block of best_config.yaml.

`hastune tune` writes it beside the knobs: the model (a shipped name, or the config.json it
read and that file's sha256), the GPU type and count, the precision, the engine, the TP/PP of
every pool, the recipe's SLOs, the goodput it was tuned to and hastune's version. A config
without it (written before, or by hand) still parses: `hastune.config.parse_config` leaves the
block out, and `read_target` returns None.

`serve` and `export` compare it with what they are asked to run (`mismatch`): another model,
GPU or precision is refused with an InputError that says how to fix it.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hastune import __version__, archs
from hastune.errors import InputError, from_pydantic
from hastune.model_ref import Precision
from hastune.yamlio import read_yaml_mapping

if TYPE_CHECKING:
    from hastune.archs.base import ConfigBase
    from hastune.profile import Profile
    from hastune.recipe import Recipe

TARGET_KEY = "target"

# Hugging Face repositories of the shipped model names (hastune.models.shipped): what an
# engine loads for them. A config-path model loads from its own folder (or $MODEL).
HF_REPOS = {
    "llava-v1.6-34b": "llava-hf/llava-v1.6-34b-hf",
    "qwen2.5-vl-32b": "Qwen/Qwen2.5-VL-32B-Instruct",
    "ultravox-v0.6-27b": "fixie-ai/ultravox-v0_6-gemma-3-27b",
    "llama-30b": "huggyllama/llama-30b",
    "codellama2-34b": "codellama/CodeLlama-34b-hf",
    "qwen2-72b": "Qwen/Qwen2-72B-Instruct",
}

# their Hugging Face `architectures[0]`: what an engine's model registry resolves
HF_ARCHITECTURES = {
    "llava-v1.6-34b": "LlavaNextForConditionalGeneration",
    "qwen2.5-vl-32b": "Qwen2_5_VLForConditionalGeneration",
    "ultravox-v0.6-27b": "UltravoxModel",
    "llama-30b": "LlamaForCausalLM",
    "codellama2-34b": "LlamaForCausalLM",
    "qwen2-72b": "Qwen2ForCausalLM",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Pool(_Strict):
    """One pool of model instances: its role, how many, and each one's parallelism."""

    role: Literal["encode", "prefill", "decode", "replica"]
    instances: int = Field(ge=0)
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    expert_parallel: bool = False
    gpu: str | None = Field(default=None, description="its GPU type, on a cluster of several")


class MemoryShares(_Strict):
    """The memory of an encode GPU that holds two servers (sm_split): the encode server's
    share, and the share both may take together (the prefill server gets the difference)."""

    encode: float = Field(gt=0, lt=1)
    total: float = Field(gt=0, le=1)


class TargetEngine(_Strict):
    """The recipe's engine (name and kernel-database version), as the block records it: its
    own model, so a field the recipe's Engine gains later does not make old blocks invalid."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = "vllm"
    version: str | None = None


class TargetSLO(_Strict):
    ttft_s: float = Field(gt=0)
    tpot_s: float = Field(gt=0)
    percentile: float = Field(default=90.0, gt=0, le=100)


class Target(_Strict):
    """What the deployment was tuned for."""

    hastune: str = Field(description="hastune's version that tuned it")
    recipe: str
    recipe_sha256: str | None = None
    model: str = Field(description="a shipped model's name, or the config path the recipe named")
    model_config_path: str | None = Field(default=None, description="the config.json read")
    model_config_sha256: str | None = None
    hf_repo: str | None = Field(default=None, description="what an engine loads (named models)")
    architecture: str | None = Field(default=None, description="the model's Hugging Face "
                                     "architecture: what an engine's registry resolves")
    multimodal: bool = Field(default=False, description="the workload sends media")
    checkpoint_precision: str = "bf16"
    gpu: str
    gpus: int = Field(ge=1, description="GPUs the deployment uses")
    gpus_per_node: int = Field(default=8, ge=1)
    precision: Precision = Field(default_factory=Precision)
    engine: TargetEngine = Field(default_factory=TargetEngine)
    pools: list[Pool]
    slo: TargetSLO
    goodput_rps: float = Field(ge=0)
    goodput_per_gpu: float = Field(ge=0)
    node_sizes: dict[str, int] | None = Field(
        default=None, description="a cluster of several GPU types: each type's GPUs per node "
        "(its first first), where export lays each pool on its type's nodes")
    memory_shares: MemoryShares | None = Field(
        default=None, description="co-resident encode and prefill servers (sm_split): their "
        "memory shares of an encode GPU")
    cost_per_hour: float | None = Field(default=None, ge=0, description="what its GPUs "
                                        "cost per hour (where the recipe gives prices)")
    goodput_per_dollar: float | None = Field(default=None, ge=0, description="requests "
                                             "served within the SLOs per dollar")

    @property
    def engine_model(self) -> str:
        """What an engine is given as its model: the Hugging Face repository, else the
        folder of the config.json, else the shipped name."""
        if self.hf_repo:
            return self.hf_repo
        if self.model_config_path:
            return str(Path(self.model_config_path).parent)
        return self.model

    @property
    def model_label(self) -> str:
        return self.model if self.model_config_path is None else f"{self.model} (config.json)"


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def hf_architecture(recipe: Recipe) -> str | None:
    """The model's Hugging Face architecture (config.json's first `architectures`, or the
    shipped name's); None where neither says."""
    import json

    cj = config_json(recipe)
    if cj is None:
        return HF_ARCHITECTURES.get(recipe.model)
    try:
        archs_ = json.loads(cj.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return None
    return str(archs_[0]) if archs_ and isinstance(archs_[0], str) else None


def multimodal(recipe: Recipe) -> bool:
    """Whether the workload sends media (images, audio, video)."""
    return any(k != "text" and share > 0 for k, share in recipe.workload.mix.items())


def config_json(recipe: Recipe) -> Path | None:
    """The config.json a config-path model reads (None for a shipped name)."""
    from hastune.model_ref import is_named

    if is_named(recipe.model):
        return None
    p = recipe.resolve(recipe.model)
    return p / "config.json" if p.is_dir() else p


def pools(cfg: ConfigBase, types: list[str] | None = None) -> list[Pool]:
    """The pools of a config, named by role, with their TP/PP (and, on a cluster of several
    GPU types, each one's type, `types` in the order of its GPU terms)."""
    return [Pool(role=p.role, instances=p.instances, tp=p.tp, pp=p.pp,
                 expert_parallel=p.expert_parallel, gpu=t)
            for p, t in zip(archs.of(cfg).role_pools(cfg),
                            types or [None] * len(cfg.gpu_terms))]


GiB = 1024.0 ** 3
ENCODER_WORKSPACE = 2 * GiB  # an encode server's CUDA context, activations and profiling run


def memory_shares(cfg: ConfigBase, profile: Profile | None) -> MemoryShares | None:
    """An encode GPU's memory between its two servers (sm_split): the encode server gets its
    encoder's weights (× 1.2) and ENCODER_WORKSPACE, rounded up to a hundredth; both together
    the profile's usable share; the prefill server the rest (its LLM weights and its KV)."""
    if profile is None or getattr(cfg, "sm_split", None) is None:
        return None
    mem = profile.for_tp(cfg.tp_E).memory  # type: ignore[attr-defined]
    enc = math.ceil(100 * (1.2 * mem.encoder_weight_bytes + ENCODER_WORKSPACE)
                    / mem.gpu_bytes) / 100
    total = mem.utilisation
    if enc >= total:
        return None
    return MemoryShares(encode=enc, total=total)


def build_target(recipe: Recipe, cfg: ConfigBase, goodput_rps: float,
                 recipe_sha256: str | None = None, profile: Profile | None = None) -> Target:
    """What `cfg` was tuned for; `profile` (the recipe's) sizes a co-resident pair's memory
    shares (memory_shares)."""
    from hastune.cost import cost_fields
    from hastune.model_ref import load_arch, precision_of

    cj = config_json(recipe)
    try:
        arch = load_arch(recipe)
        ckpt = arch.llm.checkpoint_precision or "bf16"
    except InputError:
        arch, ckpt = None, "bf16"
    used = {t for t, n in cfg.pool_gpus(recipe.cluster.gpu) if n}
    # the GPU type it runs on (pools on several: the cluster's first, each pool's in pools)
    on = recipe.cluster.only(next(iter(used))) if len(used) == 1 else recipe.cluster
    return Target(
        hastune=__version__, recipe=recipe.name, recipe_sha256=recipe_sha256,
        model=recipe.model,
        model_config_path=str(cj.resolve()) if cj is not None else None,
        model_config_sha256=sha256_file(cj) if cj is not None and cj.is_file() else None,
        hf_repo=HF_REPOS.get(recipe.model), checkpoint_precision=str(ckpt),
        architecture=hf_architecture(recipe), multimodal=multimodal(recipe),
        gpu=on.gpu, gpus=cfg.gpus, gpus_per_node=on.gpus_per_node,
        precision=precision_of(recipe, arch),
        engine=TargetEngine(name=recipe.engine.name, version=recipe.engine.version),
        pools=pools(cfg, [t for t, _ in cfg.pool_gpus(recipe.cluster.gpu)]
                    if len(recipe.cluster.types) > 1 else None),
        slo=TargetSLO(ttft_s=recipe.slo.ttft_s, tpot_s=recipe.slo.tpot_s,
                      percentile=recipe.slo.percentile),
        goodput_rps=goodput_rps, goodput_per_gpu=goodput_rps / cfg.gpus if cfg.gpus else 0.0,
        memory_shares=memory_shares(cfg, profile),
        node_sizes=recipe.cluster.node_sizes if len(used) > 1 else None,  # type: ignore
        **cost_fields(recipe.cluster, cfg, goodput_rps))


def dump_target(t: Target) -> dict[str, Any]:
    return t.model_dump(mode="json", exclude_none=True)


def parse_target(data: dict, file: str | Path | None = None) -> Target | None:
    block = data.get(TARGET_KEY)
    if block is None:
        return None
    if not isinstance(block, dict):
        raise InputError(file, TARGET_KEY, "must be a mapping", "write it as tune does, or "
                         "remove the block")
    try:
        return Target.model_validate(block)
    except ValidationError as exc:
        e = from_pydantic(file, exc)
        raise InputError(file, f"{TARGET_KEY}.{e.field}" if e.field else TARGET_KEY,
                         e.problem, e.fix) from None


def read_target(path: str | Path) -> Target | None:
    """The config file's `target:` block, or None (a config written before it existed)."""
    return parse_target(read_yaml_mapping(path, "deployment config"), path)


def recipe_mismatch(t: Target, recipe: Recipe) -> tuple[str, str] | None:
    """(field, problem) where the recipe names another model, GPU or precision than the one
    the config was tuned for; None when they agree."""
    from hastune.model_ref import precision_of

    cj = config_json(recipe)
    if recipe.model != t.model and (cj is None or t.model_config_sha256 is None
                                    or not cj.is_file()
                                    or sha256_file(cj) != t.model_config_sha256):
        return "model", f"the recipe's model is {recipe.model!r}; the config was tuned for " \
                        f"{t.model_label}"
    if cj is not None and cj.is_file() and t.model_config_sha256 and \
            sha256_file(cj) != t.model_config_sha256:
        return "model", (f"{cj} differs from the config.json the config was tuned for "
                         f"(sha256 {t.model_config_sha256[:12]}…)")
    if recipe.cluster.gpu != t.gpu:
        return "cluster.gpu", (f"the recipe's GPU is {recipe.cluster.gpu}; the config was "
                               f"tuned for {t.gpu}")
    if recipe.precision is not None and precision_of(recipe) != t.precision:
        return "precision", (f"the recipe's precision is {precision_of(recipe).label}; the "
                             f"config was tuned for {t.precision.label}")
    return None


def gpu_matches(target_gpu: str, device_name: str) -> bool:
    """Whether a device's name (torch's or nvidia-smi's, 'NVIDIA A100-SXM4-80GB') is the
    target's GPU type ('a100-80gb'): every alphanumeric part of the type occurs in it."""
    name = "".join(ch for ch in device_name.lower() if ch.isalnum())
    parts = [p for p in target_gpu.lower().replace("_", "-").split("-") if p]
    return bool(parts) and all(p in name for p in parts)
