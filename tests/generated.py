"""Random recipes for property tests: recipes nobody here picked.

Small budgets (1–4 GPUs), every architecture, shipped profiles of four 80/141 GB GPUs, text or
multimodal mixes, Poisson or Gamma (CV 0.5–2) arrivals, short outputs and SLOs drawn relative to
the deployment's own zero-load latency (so that they bind without being unmeetable). Each comes
with small search spaces (few knob values) so exhaustive search stays cheap.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from hastune.evaluators.sim import Evaluation
from hastune.recipe import Recipe
from hastune.space import SearchSpace

GPUS = ["a100-80gb", "a800-80gb", "h100-80gb", "h200-141gb"]
MULTIMODAL = {"llava-v1.6-34b": "image", "qwen2.5-vl-32b": "video",
              "ultravox-v0.6-27b": "audio"}
TEXT = ["llama-30b", "codellama2-34b"]
EPD_FAMILY = ("epd", "epd-static")
REPLICAS = ("padg", "nodg", "fudg")

SPACES = {
    "epd": {"n_E": {"low": 1}, "n_P": {"low": 0}, "n_D": {"low": 1}, "B": [1, 4],
            "s": [0.0, 0.5, 1.0]},
    "epd-static": {"n_E": {"low": 1}, "n_P": {"low": 1}, "n_D": {"low": 1}, "batch": [1, 4]},
    "padg": {"tp": [1, 2], "pp": [1], "instances": {"low": 1}, "slack": ["mean"]},
    "nodg": {"tp": [1, 2], "pp": [1], "replicas": {"low": 1}, "chunk_tokens": [None, 512]},
    "fudg": {"prefill_tp": [1], "prefill_pp": [1], "prefill_instances": {"low": 1},
             "decode_tp": [1], "decode_pp": [1], "decode_instances": {"low": 1}},
}


def space(arch: str) -> SearchSpace:
    return SearchSpace.model_validate({"architecture": arch, "budget": "exact",
                                       "params": SPACES[arch]})


def _length(rng: np.random.Generator, lo: float, hi: float, cap: int) -> dict:
    return {"dist": str(rng.choice(["lognormal", "gamma", "fixed"])),
            "mean": float(rng.uniform(lo, hi)), "cv": float(rng.uniform(0.2, 1.0)), "min": 2,
            "max": cap}


def random_recipe(seed: int, archs: tuple[str, ...] = EPD_FAMILY + REPLICAS,
                  requests: tuple[int, int] = (150, 400), evaluator: dict | None = None
                  ) -> Recipe:
    """The recipe of one seed: an architecture drawn from `archs` (its `architecture`), SLOs
    at a random multiple of its zero-load latency; `evaluator` overrides evaluator fields."""
    rng = np.random.default_rng(seed)
    arch = str(rng.choice(archs))
    multimodal = arch in EPD_FAMILY or bool(rng.random() < 0.5)
    model = str(rng.choice(sorted(MULTIMODAL) if multimodal else TEXT))
    gpu = str(rng.choice(GPUS))
    low = 3 if arch == "epd-static" else (2 if arch in ("epd", "fudg") else 1)
    gpus = int(rng.integers(low, 5))
    wl: dict = {"requests": int(rng.integers(*requests)), "warmup": 0.1,
                "prompt_tokens": _length(rng, 16, 512, 2048),
                "output_tokens": _length(rng, 4, 96, 256)}
    if rng.random() < 0.5:
        wl["arrival"] = {"process": "gamma", "cv": float(rng.uniform(0.5, 2.0))}
    else:
        wl["arrival"] = {"process": "poisson"}
    if model in MULTIMODAL:
        mod = MULTIMODAL[model]
        share = float(rng.uniform(0.3, 1.0))
        wl["mix"] = {mod: share, "text": 1.0 - share}
        wl["modalities"] = {mod: {"scheme": "tokens",
                                  "encoder_tokens": _length(rng, 64, 2048, 4096)}}
    data = {"kind": "recipe", "name": f"gen-{seed}-{arch}", "model": model,
            "cluster": {"gpu": gpu, "gpus": gpus, "gpus_per_node": 8,
                        "intra_node": str(rng.choice(["pcie4", "nvlink-a100"])),
                        "inter_node": "ib-200g"},
            "workload": wl, "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
            "architecture": arch, "seed": int(rng.integers(0, 1000)),
            "evaluator": dict(evaluator or {})}
    rec = Recipe.model_validate(data)
    # SLOs: a random multiple of what an idle deployment of one GPU per stage achieves
    ev = Evaluation(rec)
    reqs, prof = ev.requests, ev.profile
    tok = reqs.encoder_tokens
    enc = np.where(tok > 0, prof.encode.latency(1, tok, tok * tok), 0.0)
    L = reqs.prefill_tokens
    ttft0 = float(np.percentile(enc + prof.prefill.latency(L, L * L), 90))
    step0 = float(prof.decode.step(1, float(np.mean(L))))
    slo = {"ttft_s": round(ttft0 * float(rng.uniform(2.0, 12.0)), 4),
           "tpot_s": round(step0 * float(rng.uniform(1.5, 6.0)), 5)}
    return rec.model_copy(update={"slo": rec.slo.model_copy(update=slo)})


def recipes(archs: tuple[str, ...] = EPD_FAMILY + REPLICAS,
            requests: tuple[int, int] = (150, 400), evaluator: dict | None = None
            ) -> st.SearchStrategy[Recipe]:
    """Hypothesis strategy: one independent random recipe per example (drawn from a seed)."""
    return st.integers(0, 2**31 - 1).map(lambda s: random_recipe(s, archs, requests,
                                                                 evaluator))
