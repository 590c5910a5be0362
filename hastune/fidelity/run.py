"""Simulating a measured case: the recipe it stands for, the engine terms on its profile, one
closed-loop run, its mean TTFT and TPOT after two rounds (as a benchmark measures; over every
request for the runs whose clients started together, engine_terms.CLIENTS_TOGETHER)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hastune import engine_terms as et
from hastune.cluster import Cluster
from hastune.config import NoDGConfig
from hastune.fidelity.rows import Case, model_dir
from hastune.profile import Profile
from hastune.recipe import Recipe
from hastune.sim.nodg import NoDGSimulator
from hastune.sim.warmup import steady_run
from hastune.workload import sample_requests

ROUNDS = 12        # requests per client in a run (the first two rounds warm up)
MAX_REQUESTS = 4000
# The KV cache's precision of the measured runs, by (engine, weights), where it is not the
# weights' 16 bits: TensorRT-LLM takes the checkpoint's KV quantisation (kv_cache_config
# dtype "auto"), and fp8 checkpoints quantise the KV cache too (ModelOpt's kv_cache_quant_algo
# FP8). The H200 runs (70B fp8, TP 1, 1024 + 8192 tokens, KV reserved for the whole output)
# hold 32 clients without queueing (449 ms to the first token), which a bf16 cache (about
# 22 such requests) cannot, and queue at 64 and 128 clients as about 48 requests at once do.
KV_CACHE = {("trtllm", "fp8"): "fp8"}


@dataclass(frozen=True)
class Simulated:
    ttft_ms: float
    tpot_ms: float
    requests: int
    throughput_rps: float = float("nan")
    settled: bool | None = None  # steady: whether the run stopped settled (steady_run)


def recipe_for(case: Case, models: dict[str, str], path: Path,
               rounds: int = ROUNDS, exact: bool = False) -> Recipe:
    """The recipe a measured run stands for: its model, GPU, precision and engine, `clients`
    closed-loop clients without think time, fixed prompt and output lengths; `rounds`
    requests per client — within MAX_REQUESTS and at least 3–4 rounds, or exactly (`exact`)."""
    n = case.clients * rounds
    if not exact:
        n = max(min(MAX_REQUESTS, max(n, 4 * case.clients)), min(n, 3 * case.clients))
    return Recipe.model_validate({
        "name": case.id[:80], "model": model_dir(case.model, models, path),
        "precision": {"weights": case.weights,
                      "kv_cache": KV_CACHE.get((case.engine, case.weights), "bf16")},
        "engine": {"name": case.engine},
        "cluster": {"gpu": case.gpu, "gpus": case.tp, "gpus_per_node": 8,
                    "intra_node": "nvlink-h100"},
        "workload": {"requests": n, "arrival": {"process": "closed", "think_s": 0.0},
                     "prompt_tokens": {"dist": "fixed", "mean": case.isl, "min": 1,
                                       "max": case.isl},
                     "output_tokens": {"dist": "fixed", "mean": case.osl, "min": 1,
                                       "max": case.osl}},
        "slo": {"ttft_s": 1e6, "tpot_s": 1e6},
        "architecture": "nodg"})


# How the measured runs' clients are simulated (`simulate`'s `clients`): "spread" — started
# evenly over a request's zero-load lifetime, the mean after two rounds (a benchmark's);
# "together" — started at once, the mean over every request, the first round's too (the runs
# of engine_terms.CLIENTS_TOGETHER); "together-after-two" — started at once, the mean after
# two rounds (clients with their own jitter, SGLang's, as benchmark tools start them: the
# measured runs and a recipe's closed loop; benchmarks/fidelity_client_models.py); "random" —
# started at independent random times over that lifetime (benchmarks/closed_loop_starts.py)
CLIENT_MODELS = ("spread", "together", "together-after-two", "random")


def client_model(case: Case, terms: et.EngineTerms | None) -> str:
    """The client model a measured case is simulated with (under `terms`): as the runs of
    engine_terms.CLIENTS_TOGETHER were measured; else as a recipe's closed loop starts them
    (`recipe_clients`)."""
    if (case.engine, case.gpu) in et.CLIENTS_TOGETHER:
        return "together"
    return recipe_clients(terms)


def recipe_clients(terms: et.EngineTerms | None) -> str:
    """How a recipe's closed loop under `terms` starts its clients (hastune.evaluate's
    _ramped): together, counted after two rounds, where the requests carry their own jitter
    (engine_terms.jittered), as benchmark tools start them; else evenly over a request's
    lifetime."""
    return "together-after-two" if et.jittered(et.frontend_of(terms)) else "spread"


def simulate(case: Case, base: Profile, terms: et.EngineTerms | None, recipe: Recipe,
             seed: int = 0, steady: bool = False, clients: str | None = None) -> Simulated:
    """One closed-loop run of the case's deployment (nodg, one replica of tp GPUs, the
    engine's scheduler defaults) with `terms` on `base` (None: kernels only), its clients as
    `clients` (CLIENT_MODELS; None: as the case was measured, `client_model`). `steady`: the
    mean from where the steady state begins, as a recipe's closed loop (hastune.sim.warmup)."""
    clients = clients or client_model(case, terms)
    if clients not in CLIENT_MODELS:
        raise ValueError(f"clients must be one of {CLIENT_MODELS}, not {clients!r}")
    prof = et.apply(base, terms) if terms is not None else base
    cfg = et.config_defaults(NoDGConfig(architecture="nodg", replicas=1, tp=case.tp, pp=1),
                             terms)
    cluster: Cluster = recipe.cluster
    pt = prof.for_tp(case.tp)  # clients start spread over a request's zero-load lifetime
    ramp = (pt.prefill.latency(case.isl, case.isl ** 2)
            + (case.osl - 1) * pt.decode.step(1, case.isl + case.osl / 2))
    if clients not in ("spread", "random"):  # the clients start together
        ramp = 0.0

    def make(n: int):
        reqs = et.with_frontend(sample_requests(recipe.workload, n, seed), terms)
        return replace(reqs, ramp_s=float(ramp), steady=steady,
                       ramp_random=clients == "random")

    sim = NoDGSimulator(prof, cluster, cfg, warmup=0.0)
    # steady: as a recipe's closed loop, run until its steady mean is known (steady_run)
    res = steady_run(sim, make, recipe.workload.requests, float(case.clients))
    if clients == "together" and not steady:  # every request, the first round's too
        tt, tp = res.ttft, res.tpot[~np.isnan(res.tpot)]
    else:
        tt, tp = res.ttft_measured(), res.tpot_measured()
    ok = np.isfinite(tt)
    return Simulated(float(np.mean(tt[ok])) * 1e3 if ok.any() else float("inf"),
                     float(np.mean(tp[np.isfinite(tp)])) * 1e3, len(res.ttft),
                     float(res.extra.get("throughput_rps", float("nan"))),
                     res.extra.get("settled"))
