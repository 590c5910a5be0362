"""Engine-level terms: what a serving engine adds to the kernels' time (issue 13).

A profile built from kernel tables times the GPU kernels of one forward pass. A real engine
(vLLM, SGLang, TensorRT-LLM) runs them inside its own loop, and that loop costs time and shapes
the batches. `EngineTerms` holds, per engine and GPU:

- the scheduler's defaults (`Scheduler`): the token budget of an iteration and whether prompts
  share it with decoding (vLLM V1: decode-first chunked prefill, `max_num_batched_tokens`;
  SGLang: separate prefill batches of `chunked_prefill_size`; TensorRT-LLM: in-flight batching
  under `max_num_tokens`), the most sequences running, and the memory share for weights + KV;
- per-iteration CPU time (`iteration_s`: scheduling, input preparation, kernel launch, the
  sampler's fixed part) and per sequence in the batch (`per_seq_s`: sampling, detokenisation,
  output processing), added to every iteration the simulator times;
- `kernel_scale`: the in-engine time of the kernels against the tables' isolated timings
  (one factor for the whole forward pass), and `prefill_scale` on top of it for the prompt
  tokens' share of an iteration (the context-phase kernels — attention over the prompt,
  GEMMs of thousands of rows — are timed apart from the decode ones in the tables, and
  the engine's version can differ from the tables' in either);
- the front end (`FrontEnd`): per request before the engine sees it and back to the client
  (HTTP, tokenisation, the first token's delivery), served FIFO by one process per instance —
  it adds to the TTFT a client measures, and it spreads requests sent together, which keeps
  closed-loop clients from staying in lockstep or drifting into a perfect stagger
  (hastune.sim.common.Arrivals).

`apply(profile, terms)` returns the profile the simulators run on; every architecture that runs
an engine's iterations (nodg replicas, padg instances, fudg prefill/decode pools, epd's prefill
and decode pools) reads its iteration latencies from there, so the terms apply to all of them.
The encoder's latencies are left as measured (an encoder batch is one forward pass, not an
engine iteration). Profiles measured on a device (`hastune profile`, the bundled engine) already
hold the engine's own costs: no terms apply to them.

The fitted values live in hastune.engine_fitted (written by `hastune fidelity --write`, fitted
only on hastune/data/calibration/e2e/silicon_llama31.csv); docs/fidelity.md has the scorecard.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from hastune import archs
from hastune.profile import Profile, TPVariant

ENGINES = ("vllm", "sglang", "trtllm")

# The spread of each engine's front-end wait (FrontEnd.spread). SGLang runs waiting prompts
# before decoding, so clients whose requests collide once are prefilled together and finish
# together; measured runs sit in a partly clumped state whose queueing is that of arrivals at
# random, which exponential waits give (and keep the simulation out of the one clump that
# identical, deterministic clients settle in). vLLM's and TensorRT-LLM's prompts share
# iterations with decoding, which spreads clients evenly, as measured: their waits are the mean.
FRONTEND_SPREAD = {"sglang": 1.0}
# How measured runs were taken: properties of their benchmark client, not of the engine, so
# hastune.fidelity applies them when it simulates those runs (and fits the terms under them)
# and the terms a recipe gets do not. The rules key on a row's silicon_data_source
# (hastune.fidelity.harness); FRONTEND_QUEUED, by (engine, GPU), only reads a file without
# that column (silicon_llama31.csv, whose TensorRT-LLM H100 rows are aiconfigurator's
# collection's). Queued: the TTFT counts one completion gap more (FrontEnd.queued) — the
# TensorRT-LLM runs on H100 grow with the output length at low concurrency by
# (osl × TPOT) / clients, the time between two completions (8B, TP 1, 8 clients: +0.99 ms per
# output token, TPOT / 8 = 0.94 ms), as if each request waited for the next completion
# before it was sent (benchmarks/fidelity_gap_term.py fits 1.02 gaps; on H200 0.00).
FRONTEND_QUEUED = {("trtllm", "h100-80gb")}
# The front end's time per output token it streams (FrontEnd.per_output_token_s), by engine.
# SGLang's tokens reach the client through one Python process per instance (the tokenizer
# manager: each step's output of every stream is appended to its state, its whole output so
# far copied into the chunk (stream_output off, the default), the HTTP chunk written), so the
# tokens an instance can deliver per second have a ceiling whatever its TP. The measured runs
# at 512 clients sit on it: 14–20k tokens/s on TP 2, 4 and 8 alike (8B), while the engine's
# kernels would give up to 23k; the tokens queue there, the first token too, and in closed
# loop the engine holds fewer requests (hastune.sim.frontend.Delivery). Chosen by a scan
# on silicon_llama31.csv (docs/fidelity.md), not by the fit.
FRONTEND_TOKEN_S = {"sglang": (50e-6, 15e-9)}  # (per token, per token its request made before)
# STREAM_TOKEN_S, by engine: the API server's time per output token it streams (FrontEnd.
# stream_token_s). TensorRT-LLM's trtllm-serve detokenises and sends every token in its one
# server process (no post-processing workers by default), so the tokens it can stream per
# second are bounded whatever the GPUs: its H100 runs at 128 clients deliver 8.6-9.2k output
# tokens/s at TP 2, 4 and 8 alike for 512-token outputs (and 256: 36 requests/s × 256), with
# the same TPOT (10.0-10.9 ms at TP 4 and 8) and 1.0-2.0 s to the first token, the clients
# beyond what the server streams waiting for it; at TP 1 the engine makes 6.4k tokens/s and
# the first token comes in 364 ms. 110 µs a token (1 / 9.1k), from those rows, not fitted.
# A property of the engine's server, so a recipe's terms carry it too.
STREAM_TOKEN_S = {"trtllm": 110e-6}


@dataclass(frozen=True)
class FrontEnd:
    """A request's time in the engine's front end (the API server: HTTP, tokenisation, the
    first token's way back): request_s + per_token_s × prompt tokens before the engine sees
    the request (hastune.sim.common.frontend_delays), and per_stream_s for every request its
    instance's front end is streaming tokens to when it comes (the requests in flight there),
    the wait behind their output processing. A client's TTFT counts it all."""

    request_s: float = 0.0
    per_token_s: float = 0.0
    per_stream_s: float = 0.0  # the wait per request in flight it is streaming tokens for
    # how the per-stream wait varies from request to request, as its coefficient of variation:
    # 0, each request waits the mean, added to its TTFT (the engine sees it at once); > 0, in
    # closed loop each waits a gamma draw of that spread (1: exponential) before the engine
    # sees it (hastune.sim.frontend.stream_waits). SGLang's is 1 (FRONTEND_SPREAD)
    spread: float = 0.0
    # the benchmark client queues each closed-loop request at a completion and sends it at the
    # next one, its TTFT counted from the queueing: one completion gap more (FRONTEND_QUEUED:
    # the measured runs' client, not a recipe's)
    queued: bool = False
    # the API server's serial time per output token it streams (detokenisation and one
    # server-sent event per token, in one process; STREAM_TOKEN_S): in closed loop a request
    # waits for the server while the streams it serves need more than its time
    # (hastune.sim.frontend.SerialFrontEnd), in open loop while the backlog is over a
    # zero-load lifetime (RequestSet.life_s); one server per instance that streams; 0: none
    stream_token_s: float = 0.0
    # the front end's time per output token it streams to a client, served in order by one
    # process per instance: a token reaches its client when the process is through the tokens
    # before it (FRONTEND_TOKEN_S; hastune.sim.frontend.Delivery)
    per_output_token_s: float = 0.0
    # and per token its request has made before: each chunk carries the request's whole
    # output so far (SGLang with stream_output off, its default: the ids copied, the text)
    per_made_token_s: float = 0.0

    @property
    def off(self) -> bool:
        return (self.request_s == 0.0 and self.per_token_s == 0.0 and self.per_stream_s == 0.0
                and not self.queued and self.stream_token_s == 0.0
                and self.per_output_token_s == 0.0 and self.per_made_token_s == 0.0)


@dataclass(frozen=True)
class Scheduler:
    """An engine's scheduling defaults (what a config that does not set them runs with)."""

    chunk_tokens: int | None   # the token budget of a mixed iteration; None: separate prefill
    prefill_tokens: int        # the most prompt tokens of one prefill-only iteration
    max_seqs: int              # the most sequences running at once
    memory_share: float        # of the GPU's memory for weights + KV (+ activations)
    preempts: bool             # KV on demand (paged), preempting when full; False: reserved
    # TensorRT-LLM's batch waiting (batch_wait_timeout_iters / batch_wait_max_tokens_ratio, both
    # 0 by default): while requests decode, waiting prompts are held out of the next iteration
    # until their tokens and the decode tokens reach wait_ratio × chunk_tokens, or wait_iters
    # iterations have passed (PyExecutor._waiting_requests); nodg only (hastune.sim.nodg.plan)
    wait_iters: int = 0
    wait_ratio: float = 0.0


@dataclass(frozen=True)
class EngineTerms:
    engine: str
    gpu: str | None            # None: the engine's terms pooled over the GPUs it was fitted on
    scheduler: Scheduler
    iteration_s: float = 0.0
    per_seq_s: float = 0.0
    kernel_scale: float = 1.0
    frontend: FrontEnd = FrontEnd()
    fitted_on: str = ""        # what the terms were fitted on (rows, CV), for the record
    prefill_scale: float = 1.0  # the prompt tokens' kernels: this × kernel_scale × the tables'
    clients_max: int = 0       # the most closed-loop clients of a run fitted on (0: unknown)


def scheduler_defaults(engine: str, gpu_memory_gib: float, gpu: str = "") -> Scheduler:
    """The engine's own defaults on a GPU with that much memory (read from the engines'
    sources: vLLM engine/arg_utils.py get_batch_defaults — 8192 tokens and 1024 sequences on
    GPUs of ≥ 70 GiB other than A100, else 2048 and 256, gpu_memory_utilization 0.9; SGLang
    server_args.py — chunked_prefill_size 2048 under 35 GB, 8192 under 160 GB, else 16384,
    prefill batches separate from decoding unless --enable-mixed-chunk (simulated beside
    decoding: see below), mem_fraction_static about 0.88, admission against an estimate of
    the outputs, retraction when KV runs out; TensorRT-LLM — max_num_tokens
    8192, max_batch_size 2048, context and generation requests in one in-flight batch,
    free_gpu_memory_fraction 0.9 of what the weights leave, KV reserved up front by the
    default GUARANTEED_NO_EVICT policy). vLLM's and SGLang's KV is paged, on demand, with
    preemption (Profile.kv_on_demand: hastune.sim.nodg.paged, the decode pools of EPD and FuDG
    in hastune.sim.decode_paged, PaDG in hastune.sim.padg.paged)."""
    big = gpu_memory_gib >= 70 and "a100" not in gpu.lower()
    if engine == "vllm":
        return Scheduler(8192 if big else 2048, 8192 if big else 2048, 1024 if big else 256,
                         0.9, True)
    if engine == "sglang":
        chunk = 2048 if gpu_memory_gib < 35 else 8192 if gpu_memory_gib < 160 else 16384
        # SGLang runs waiting prompts as prefill batches of `chunk` tokens before decoding.
        # Simulated that way, closed-loop clients of equal lengths lock into one clump that
        # prefills together (nothing decodes while prompts wait, so its members finish
        # together) and measured runs are not like that: with the kernels alone their TPOT is
        # 31% low clumped, 11% low with the prompts' work spread beside decoding. So the
        # prefill work is spread: chunks of the same budget beside decoding (the same share
        # of the GPU's time). KV: admission against an estimate of the live KV, requests
        # retracted when it runs out (new_token_ratio decays towards 0.1 of what is left to
        # generate): on demand, as vLLM's (hastune.sim.nodg.paged)
        return Scheduler(chunk, chunk, 2048, 0.88, True)
    if engine == "trtllm":
        return Scheduler(8192, 8192, 2048, 0.9, False)
    raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")


def terms_for(engine: str, gpu: str, gpu_memory_gib: float) -> EngineTerms:
    """The fitted terms of (engine, GPU), else the engine's pooled ones, else none but the
    scheduler's defaults (an engine without measurements: kernels only, said by `fitted_on`)."""
    from hastune.engine_fitted import FITTED, POOLED

    sched = scheduler_defaults(engine, gpu_memory_gib, gpu)
    row = FITTED.get((engine, gpu)) or FITTED.get((engine, POOLED.get(engine, "")))
    if row is None:
        return EngineTerms(engine, None, sched, fitted_on="no end-to-end measurements: "
                           "kernels and scheduler defaults only")
    fe = FrontEnd(row["frontend_s"], row.get("frontend_per_token_s", 0.0),
                  row.get("frontend_per_stream_s", 0.0), FRONTEND_SPREAD.get(engine, 0.0),
                  stream_token_s=STREAM_TOKEN_S.get(engine, 0.0),
                  per_output_token_s=FRONTEND_TOKEN_S.get(engine, (0.0, 0.0))[0],
                  per_made_token_s=FRONTEND_TOKEN_S.get(engine, (0.0, 0.0))[1])
    return EngineTerms(engine, gpu if (engine, gpu) in FITTED else None, sched,
                       row["iteration_s"], row["per_seq_s"], row["kernel_scale"], fe,
                       row.get("fitted_on", ""), row.get("prefill_scale", 1.0),
                       row.get("clients_max", 0))


def _section(v: TPVariant | Profile, t: EngineTerms):
    k, kp = t.kernel_scale, t.kernel_scale * t.prefill_scale
    pre, dec = v.prefill, v.decode
    pre2 = pre.model_copy(update={
        "fixed_s": pre.fixed_s * kp + t.iteration_s, "per_token_s": pre.per_token_s * kp,
        "per_token_sq_s": pre.per_token_sq_s * kp,
        "max_batch_tokens": t.scheduler.prefill_tokens})
    dec2 = dec.model_copy(update={
        "fixed_s": dec.fixed_s * k + t.iteration_s,
        "per_seq_s": dec.per_seq_s * k + t.per_seq_s,
        "per_context_token_s": dec.per_context_token_s * k,
        "max_batch": t.scheduler.max_seqs})
    upd = {"prefill": pre2, "decode": dec2}
    if v.memory is not None:
        upd["memory"] = v.memory.model_copy(update={"utilisation": _share(v.memory, t)})
    return v.model_copy(update=upd)


def _share(mem, t: EngineTerms) -> float:
    """The memory share the engine gives weights + KV. TensorRT-LLM gives the KV cache a
    fraction of what the weights leave free: as a share of the whole, u = f + (1 − f)·w/M."""
    f = t.scheduler.memory_share
    if t.engine == "trtllm":
        return min(1.0, f + (1.0 - f) * mem.weight_bytes / mem.gpu_bytes)
    return f


def applies(profile: Profile) -> bool:
    """Whether engine terms apply: profiles timed from kernel tables, not measured ones."""
    fit = profile.fit
    return fit is None or fit.measured is None


def apply(profile: Profile, t: EngineTerms) -> Profile:
    """The profile with the engine's terms in every TP (EP, attention-DP) variant's iteration
    latencies and memory; the encoder as it is."""
    base = _section(profile, t)
    variants = {d: _section(v, t) for d, v in profile.variants.items()}
    eps = {d: {e: _section(v, t) for e, v in m.items()}
           for d, m in profile.ep_variants.items()}
    dps = {n: _section(v, t) for n, v in profile.dp_variants.items()}
    return base.model_copy(update={"variants": variants, "ep_variants": eps,
                                   "dp_variants": dps,
                                   "kv_on_demand": t.scheduler.preempts,
                                   "batch_wait": (t.scheduler.wait_iters,
                                                  t.scheduler.wait_ratio)})


def for_profile(engine, profile: Profile) -> EngineTerms | None:
    """The terms a recipe's `engine` (hastune.model_ref.Engine) puts on `profile`: None when
    it turns them off (`terms: false`) or the profile was measured on a device."""
    if not engine.terms or not applies(profile):
        return None
    t = terms_for(engine.name, profile.gpu, profile.memory.gpu_bytes / 2**30)
    if engine.batch_wait_iters:  # TensorRT-LLM's batch waiting, as the recipe sets it
        t = replace(t, scheduler=replace(t.scheduler, wait_iters=engine.batch_wait_iters,
                                         wait_ratio=engine.batch_wait_ratio))
    return t


def config_defaults(config, t: EngineTerms | None):
    """A config that leaves its architecture's `engine_chunk_knob` (nodg's `chunk_tokens`)
    out runs the engine's scheduler default."""
    knob = archs.of(config).engine_chunk_knob if t is not None else None
    if knob is None or knob in config.model_fields_set:
        return config
    return config.model_copy(update={knob: t.scheduler.chunk_tokens})


def jittered(fe: FrontEnd | None) -> bool:
    """Whether the requests of a closed loop with front end `fe` (RequestSet.frontend,
    `frontend_of`) carry their own jitter: each one's front-end wait varies (FrontEnd.spread
    > 0, SGLang's). Identical clients without it stay in lockstep from a start together, so a
    recipe's closed loop spreads them evenly over a request's lifetime (RequestSet.ramp_s).
    Jittered ones start together, at t = 0, as benchmark tools start them (issue 13's client
    model), in a recipe's closed loop and in `hastune fidelity`. They forget that start
    slowly (Llama-3.1-8B on SGLang's H200 terms, TP 1, 64 clients of 8000 + 1000 tokens: mean
    TTFT 715 ms over the first 100 rounds, 440 from round 800 on; hastune.sim.warmup.known
    runs them until their mean is known), and where they are KV-bound not at all: 512 clients
    started at random (RequestSet.ramp_random) or spread settle at about half the TTFT of a
    start together, and the measured runs are at the latter (benchmarks/closed_loop_starts.py,
    docs/fidelity.md)."""
    return fe is not None and fe.spread > 0


def frontend_of(t: EngineTerms | None) -> FrontEnd | None:
    """The front end a request set gets from the terms (`with_frontend`): None without one."""
    return None if t is None or t.frontend.off else t.frontend


def with_frontend(reqs, t: EngineTerms | None):
    """The request set with the engine's front end (its clients' model) attached."""
    fe = frontend_of(t)
    return reqs if fe is None else replace(reqs, frontend=fe)


def record(engine, profile: Profile, t: EngineTerms | None) -> dict:
    """What a result records about the engine terms its runs had (Evaluation.describe: the
    `engine_terms` of evaluate / simulate / tune output): on — whose fitted terms (the GPU
    they were fitted for, or "pooled": the engine's GPU with the most measured runs, on a GPU
    without measurements; `fitted_on` names the rows) and their values — or off, and why."""
    if t is None:
        why = ("the profile was measured on a device: its measurements hold the engine's costs"
               if not applies(profile) else
               "engine.terms is false: kernels alone (hastune.caveats says what "
               "that misses)")
        return {"on": False, "engine": engine.name, "why": why}
    fe = t.frontend
    return {"on": True, "engine": t.engine, "gpu": profile.gpu,
            "fitted_for": t.gpu or "pooled",
            "fitted_on": t.fitted_on, "clients_max": t.clients_max,
            "kernel_scale": t.kernel_scale,
            "prefill_scale": t.prefill_scale, "iteration_s": t.iteration_s,
            "per_seq_s": t.per_seq_s, "frontend_s": fe.request_s,
            "frontend_per_stream_s": fe.per_stream_s, "stream_token_s": fe.stream_token_s,
            "scheduler": asdict(t.scheduler)}
