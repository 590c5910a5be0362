"""Simulating a measured case: the recipe it stands for, the engine terms on its profile, one
closed-loop run, its mean TTFT and TPOT as its benchmark measured them (hastune.fidelity.harness:
InferenceX's runs start every client at once and count every request; the others after two
rounds). An aggregated run is one nodg replica of tp GPUs; a disaggregated one a fudg
deployment of its prefill and decode workers (`fudg_config`), the KV cache over its GPU's
links (`LINKS`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from hastune import engine_terms as et
from hastune import speculative
from hastune.archs.fudg import FuDGConfig
from hastune.archs.nodg import NoDGConfig
from hastune.cluster import Cluster
from hastune.errors import InputError
from hastune.fidelity.harness import harness
from hastune.fidelity.rows import Case, model_dir
from hastune.profile import Profile
from hastune.recipe import Recipe
from hastune.regimes import gpu_class
from hastune.sim.fudg import FuDGSimulator
from hastune.sim.nodg import NoDGSimulator
from hastune.sim.warmup import steady_run
from hastune.workload import sample_requests

ROUNDS = 12        # requests per client in a run (the first two rounds warm up)
MAX_REQUESTS = 4000


@dataclass(frozen=True)
class Simulated:
    ttft_ms: float
    tpot_ms: float
    requests: int
    throughput_rps: float = float("nan")
    settled: bool | None = None  # steady: whether the run stopped settled (steady_run)


def _lengths(n: int, ratio: float) -> dict:
    """A LengthDist of n tokens, or uniform over ⌊ratio·n⌋ … n (the benchmark's random range)."""
    if ratio >= 1.0:
        return {"dist": "fixed", "mean": n, "min": 1, "max": n}
    return {"dist": "uniform", "min": max(1, int(n * ratio)), "max": n}


# The links a disaggregated run's KV cache crosses, per GPU (nominal, one direction; not fitted):
# inside a node each GPU's NVLink (NVLink 4 on H100/H200, 18 links × 50 GB/s = 900 GB/s both
# ways; NVLink 5 on B200, 1.8 TB/s; NVLink 3 on A100; PCIe 4 on L40S), between nodes the node's
# NICs together (hastune.sim.network: one NIC per node) — an HGX node's eight 400 Gb/s
# ConnectX-7 (A100: 200 Gb/s HDR; L40S: two 100 GbE). The silicon file does not say which
# fabric a run had; these are the reference nodes'. Aggregated runs keep the recipe's
# NVLink 4 as before (their TP collectives are the kernel tables').
LINKS: dict[str, tuple[dict, dict]] = {
    "h100-80gb": ({"bandwidth_GBps": 450.0, "latency_us": 3.0},
                  {"bandwidth_GBps": 400.0, "latency_us": 5.0}),
    "h200-141gb": ({"bandwidth_GBps": 450.0, "latency_us": 3.0},
                   {"bandwidth_GBps": 400.0, "latency_us": 5.0}),
    "b200-180gb": ({"bandwidth_GBps": 900.0, "latency_us": 3.0},
                   {"bandwidth_GBps": 400.0, "latency_us": 5.0}),
    # GB200 NVL72: one NVLink 5 domain over the rack's 72 GPUs, so the trays ("nodes" of
    # GPUS_PER_NODE here) reach each other over NVLink as well
    "gb200-186gb": ({"bandwidth_GBps": 900.0, "latency_us": 3.0},
                    {"bandwidth_GBps": 900.0, "latency_us": 3.0}),
    # Blackwell Ultra: B300 as B200 (NVLink 5, eight 400 Gb/s NICs per HGX node here: the
    # reference node's; B300 nodes may carry 800 Gb/s ConnectX-8), GB300 NVL72 as GB200 NVL72
    "b300-288gb": ({"bandwidth_GBps": 900.0, "latency_us": 3.0},
                   {"bandwidth_GBps": 400.0, "latency_us": 5.0}),
    "gb300-288gb": ({"bandwidth_GBps": 900.0, "latency_us": 3.0},
                    {"bandwidth_GBps": 900.0, "latency_us": 3.0}),
    "a100-80gb": ({"bandwidth_GBps": 300.0, "latency_us": 3.0},
                  {"bandwidth_GBps": 200.0, "latency_us": 5.0}),
    "l40s-48gb": ({"bandwidth_GBps": 25.0, "latency_us": 10.0},
                  {"bandwidth_GBps": 25.0, "latency_us": 8.0}),
}
GPUS_PER_NODE = 8


def cluster_for(case: Case) -> dict:
    """The cluster block of the case's recipe: its GPUs; a disaggregated run's links (LINKS)."""
    if case.pools is None:
        return {"gpu": case.gpu, "gpus": case.gpus, "gpus_per_node": GPUS_PER_NODE,
                "intra_node": "nvlink-h100"}
    if case.gpu not in LINKS:
        raise ValueError(f"disagg: no link figures for {case.gpu} (hastune.fidelity.run.LINKS "
                         f"has {', '.join(LINKS)}): the KV transfer cannot be timed")
    intra, inter = LINKS[case.gpu]
    return {"gpu": case.gpu, "gpus": case.gpus, "gpus_per_node": GPUS_PER_NODE,
            "intra_node": intra, "inter_node": inter}


def fudg_config(case: Case) -> FuDGConfig:
    """A disaggregated case's deployment: its prefill workers × TP, its decode workers × TP,
    experts whole on each GPU where the row's EP = TP; the prefill pool placed first, then the
    decode pool (as deployments place them: hastune.archs.fudg); a pool of attention-DP
    workers as an instance per rank (at TP 1; `simulate` times them as ranks)."""
    p = case.pools
    if p is None:
        raise ValueError(f"{case.id} is an aggregated run")
    return FuDGConfig(architecture="fudg", prefill_instances=p.prefill_workers * p.prefill_dp,
                      prefill_tp=p.prefill_tp, prefill_expert_parallel=p.prefill_ep,
                      decode_instances=p.decode_workers * p.decode_dp, decode_tp=p.decode_tp,
                      decode_expert_parallel=p.decode_ep, placement="grouped")


def weights_run(weights: str, model: str, gpu: str) -> str:
    """The weights a run of `model` (a config folder or file) on `gpu` labelled `weights` ran.
    The file's fp4 (nvfp4) for an MXFP4 checkpoint (gpt-oss's) on a GPU without FP4 tensor
    cores (Hopper) is that checkpoint as the engines run it there: the routed experts MXFP4
    with bf16 activations (the tables' w4a16_mxfp4 MoE rows), every other weight bf16. On
    Blackwell the engines run its experts on the FP4 tensor cores (MXFP4 × MXFP8), whose
    nearest measured kernels are the NVFP4 rows: the label stands (timed with the mxfp4
    rows instead, the B200 rows' TTFT error went from 10% to 32% on vLLM, 44% to 89% on
    TensorRT-LLM)."""
    if weights != "nvfp4" or gpu_class(gpu) == "blackwell":
        return weights
    return "mxfp4" if _checkpoint(model) == "mxfp4" else weights


@lru_cache(maxsize=64)
def _checkpoint(model: str) -> str:
    from hastune.models.hf import load_model

    try:
        return str(load_model(model).llm.checkpoint_precision)
    except (InputError, ValueError, OSError):
        return "unknown"  # (the recipe's own checks say what is wrong with it)


def recipe_for(case: Case, models: dict[str, str], path: Path,
               rounds: int = ROUNDS, exact: bool = False) -> Recipe:
    """The recipe a measured run stands for: its model, GPU, precision and engine, `clients`
    closed-loop clients without think time, its prompt and output lengths as its benchmark
    drew them (hastune.fidelity.harness); as many requests as its benchmark sent, where that
    is known, else `rounds` per client within MAX_REQUESTS and at least 3–4 rounds; or
    exactly `rounds` per client (`exact`)."""
    h = harness(case)
    n = case.clients * rounds
    if h.prompts_per_client and not exact:
        n = case.clients * h.prompts_per_client
    elif not exact:
        n = max(min(MAX_REQUESTS, max(n, 4 * case.clients)), min(n, 3 * case.clients))
    kv = "fp8" if h.kv_fp8 else "bf16"
    model = model_dir(case.model, models, path)
    return Recipe.model_validate({
        "name": case.id[:80], "model": model,
        "precision": {"weights": weights_run(case.weights, model, case.gpu), "kv_cache": kv},
        "engine": {"name": case.engine},
        "cluster": cluster_for(case),
        "workload": {"requests": n, "arrival": {"process": "closed", "think_s": 0.0},
                     "prompt_tokens": _lengths(case.isl, h.range_ratio),
                     "output_tokens": _lengths(case.osl, h.range_ratio)},
        "slo": {"ttft_s": 1e6, "tpot_s": 1e6},
        "architecture": "nodg" if case.pools is None else "fudg"})


# How the measured runs' clients are simulated (`simulate`'s `clients`): "spread" — started
# evenly over a request's zero-load lifetime, the mean after two rounds (a benchmark's);
# "together" — started at once, the mean over every request, the first round's too (the runs
# of a benchmark that says how many it sent: InferenceX's, hastune.fidelity.harness);
# "together-after-two" — started at once, the mean after
# two rounds (clients with their own jitter, SGLang's, as benchmark tools start them: the
# measured runs and a recipe's closed loop; benchmarks/fidelity_client_models.py); "random" —
# started at independent random times over that lifetime (benchmarks/closed_loop_starts.py)
CLIENT_MODELS = ("spread", "together", "together-after-two", "random")


def client_model(case: Case, terms: et.EngineTerms | None) -> str:
    """The client model a measured case is simulated with (under `terms`): "together" for the
    runs of a benchmark that sent a known number of requests at once and counted them all
    (hastune.fidelity.harness: InferenceX's); else as a recipe's closed loop starts them
    (`recipe_clients`)."""
    if harness(case).prompts_per_client:
        return "together"
    return recipe_clients(terms)


def recipe_clients(terms: et.EngineTerms | None) -> str:
    """How a recipe's closed loop under `terms` starts its clients (hastune.evaluators.sim's
    _ramped): together, counted after two rounds, where the requests carry their own jitter
    (engine_terms.jittered), as benchmark tools start them; else evenly over a request's
    lifetime."""
    return "together-after-two" if et.jittered(et.frontend_of(terms)) else "spread"


def rank_of(prof: Profile, n: int) -> Profile:
    """One of n attention-DP ranks: a MoE model's `Profile.for_dp(n)` (ValueError where the
    profile has none); a dense model's (no MoE in how its profile was composed) are replicas
    at TP 1."""
    moe = prof.fit is not None and "moe" in (prof.fit.composition or {})
    return prof.for_dp(n) if moe or prof.dp_variants else prof.for_tp(1)


def prefill_of(case: Case, prof: Profile) -> tuple[Profile, int]:
    """The profile one of `case`'s prefilling instances runs on (`simulate`'s), and how many
    prefill side by side: an aggregated run's replica (or its attention-DP ranks), a
    disaggregated run's prefill workers (or their ranks)."""
    p = case.pools
    if p is None and case.dp > 1:
        return rank_of(prof, case.dp), case.dp
    if p is None:  # experts whole on each GPU (EP = TP) or split over the TP group (EP 1)
        return prof.for_parallel(case.tp, case.tp if case.ep else 1), 1
    if p.prefill_dp > 1:
        return rank_of(prof, p.prefill_dp), p.prefill_workers * p.prefill_dp
    return (prof.for_parallel(p.prefill_tp, p.prefill_tp if p.prefill_ep else 1),
            p.prefill_workers)


# A measured run whose completions need more prefill than its GPUs' kernels can do: past this
# many seconds of prefill per second per prefilling instance it is `overdrawn`
PREFILL_BUSY_MAX = 1.0


def overdrawn(case: Case, prof: Profile) -> str | None:
    """Why `case`'s measurement cannot be a run of full prefills on `prof`'s kernels, or None.
    Its clients complete clients / (TTFT + (osl − 1) · TPOT) requests a second (Little's law,
    every client always holding a request: an upper bound on the rate), each with a prompt of
    the row's lengths (its client's range: hastune.fidelity.harness). The least a prompt of L
    tokens costs on the kernels is its tokens' and its attention's time, per_token · L +
    per_token_sq · L² (the batch's fixed part shared, as in a mixed iteration:
    hastune.sim.instance), with no engine terms (the kernel scales fitted are 0.76–1.05). Past
    PREFILL_BUSY_MAX seconds of that per second per prefilling instance, the run cannot have
    prefilled every prompt in full at the kernels' speed — prefix-cache hits (vLLM's and
    SGLang's on by default), prompts shorter than the row records, or kernels faster than the
    profile's — and a simulation, which prefills every prompt in full on those kernels, cannot
    follow it (docs/fidelity.md)."""
    tpot = case.tpot_ms if case.osl > 1 and np.isfinite(case.tpot_ms) else 0.0
    life_s = (case.ttft_ms + (case.osl - 1) * tpot) / 1e3
    if not (np.isfinite(life_s) and life_s > 0):
        return None
    pre, n = prefill_of(case, prof)
    rate = case.clients / life_s
    r = harness(case).range_ratio
    lo = int(case.isl * r) if r < 1 else case.isl  # uniform ⌊r·L⌋ … L: its mean and E[L²]
    mean = (lo + case.isl) / 2
    sq = (lo * lo + lo * case.isl + case.isl ** 2) / 3
    p = pre.prefill
    each_s = p.per_token_s * mean + p.per_token_sq_s * sq
    busy = rate * each_s / n
    if busy <= PREFILL_BUSY_MAX:
        return None
    return (f"measured: {case.clients} clients at TTFT {case.ttft_ms:.0f} ms and TPOT "
            f"{tpot:.2f} ms complete up to {rate:.1f} requests/s; the profile's kernels "
            f"prefill a {mean:.0f}-token prompt in {each_s * 1e3:.1f} ms at best, so that "
            f"needs {busy:.2f} s of prefill a second on each of {n} prefilling instance(s). "
            f"The run cannot have prefilled every prompt in full at the kernels' speed "
            f"(prefix-cache hits, shorter prompts than the row says, or faster kernels); "
            f"hastune simulates full prefills on them")


def simulate(case: Case, base: Profile, terms: et.EngineTerms | None, recipe: Recipe,
             seed: int = 0, steady: bool = False, clients: str | None = None,
             layers: int = 0) -> Simulated:
    """One closed-loop run of the case's deployment (nodg, one replica of tp GPUs, or one
    per attention-DP rank; the engine's scheduler defaults; a disaggregated case:
    `fudg_config`) with `terms` on `base`
    (None: kernels only), its clients as `clients` (CLIENT_MODELS; None: as the case was
    measured, `client_model`). `steady`: the mean from where the steady state begins, as a
    recipe's closed loop (hastune.sim.warmup). A case whose decode workers predict several
    tokens a step (`Case.nextn`) needs the model's `layers` (hastune.speculative)."""
    clients = clients or client_model(case, terms)
    if clients not in CLIENT_MODELS:
        raise ValueError(f"clients must be one of {CLIENT_MODELS}, not {clients!r}")
    if terms is not None:  # the server flags the run was measured with
        terms = replace(terms, scheduler=harness(case).scheduler(terms.scheduler))
    prof = et.apply(base, terms) if terms is not None else base
    if case.nextn:  # the decode step per token, amortised over what a step yields
        if layers < 1:
            raise ValueError(f"{case.nextn} draft tokens a step (MTP): the model's layers are "
                             "needed to time the step")
        prof = speculative.apply(prof, speculative.Speculative(case.nextn, layers),
                                 *((terms.iteration_s, terms.per_seq_s) if terms else ()))
    cluster: Cluster = recipe.cluster
    if case.pools is None and case.dp > 1:  # attention-DP: a replica per rank at TP 1, each
        # timed as one rank of the group (Profile.for_dp: its experts over all dp GPUs); the
        # ranks do not wait for each other at the MoE layers (docs/fidelity.md)
        rank = rank_of(prof, case.dp)
        cfg = et.config_defaults(NoDGConfig(architecture="nodg", replicas=case.dp, tp=1, pp=1),
                                 terms)
        pre = dec = rank
        sim = NoDGSimulator(rank, cluster, cfg, warmup=0.0)
    elif case.pools is None:
        cfg = et.config_defaults(NoDGConfig(architecture="nodg", replicas=1, tp=case.tp, pp=1,
                                            expert_parallel=case.ep), terms)
        pre = dec = prof.for_parallel(case.tp, cfg.ep)
        sim = NoDGSimulator(prof, cluster, cfg, warmup=0.0)
    else:
        fcfg, p = fudg_config(case), case.pools
        ranks = {k: rank_of(prof, n) for k, n in (("prefill", p.prefill_dp),
                                                  ("decode", p.decode_dp)) if n > 1}
        pre = ranks.get("prefill") or prof.for_parallel(fcfg.prefill_tp, fcfg.prefill_ep)
        dec = ranks.get("decode") or prof.for_parallel(fcfg.decode_tp, fcfg.decode_ep)
        sim = FuDGSimulator(prof, cluster, fcfg, warmup=0.0, pools=ranks or None)
    # clients start spread over a request's zero-load lifetime
    ramp = (pre.prefill.latency(case.isl, case.isl ** 2)
            + (case.osl - 1) * dec.decode.step(1, case.isl + case.osl / 2))
    if clients not in ("spread", "random"):  # the clients start together
        ramp = 0.0

    def make(n: int):
        reqs = et.with_frontend(sample_requests(recipe.workload, n, seed), terms)
        return replace(reqs, ramp_s=float(ramp), steady=steady,
                       ramp_random=clients == "random")

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
