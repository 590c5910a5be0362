"""Shared inputs of the paged-KV tests (test_paged_pools.py, test_padg_paged.py): a profile
with a chosen KV capacity per instance, and random requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hastune.profile import Profile, load_profile
from hastune.workload import RequestSet

ROOT = Path(__file__).resolve().parents[2]
BASE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")


def profile_with_kv(paged: bool, kv_tokens: int, tp: int = 2) -> Profile:
    """BASE with `kv_tokens` of KV per instance of `tp` GPUs, KV on demand if `paged`."""
    p = BASE.model_copy(update={"kv_on_demand": paged})
    m = p.for_tp(tp).memory
    gpu = (m.weight_bytes + m.activation_bytes + kv_tokens * m.kv_bytes_per_token) / m.utilisation
    v = p.variants[tp]
    v = v.model_copy(update={"memory": v.memory.model_copy(update={"gpu_bytes": gpu})})
    return p.model_copy(update={"variants": {**p.variants, tp: v}})


def random_requests(n: int, seed: int, out_max: int, out_min: int = 1) -> RequestSet:
    """n text requests at unit-rate Poisson gaps, prompts of 50–1499 tokens, outputs of
    out_min to out_max − 1."""
    rng = np.random.default_rng(seed)
    z = np.zeros(n)
    prompt = rng.integers(50, 1500, n).astype(float)
    out = rng.integers(out_min, out_max, n).astype(float)
    return RequestSet(rng.exponential(1.0, n), z.astype(np.int64), z, z, prompt, out, seed,
                      None, None)
