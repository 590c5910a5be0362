"""One full-model instance of tp × pp GPUs: its timing, its memory, and its decode batch.

Shared by the simulators of full-model replicas, colocated or fully disaggregated.

Timing comes from the profile at the instance's TP degree (`Profile.for_tp`: the TP
all-reduce is inside those latencies), or, with experts spread whole over the TP group (ep =
tp, MoE models), from its expert-parallel sections (`Profile.for_parallel`: the all-to-all of
each MoE layer inside). Pipeline parallelism is derived from it, with the
layers split evenly over `pp` stages and a hop of the activations (hidden × 2 bytes per token,
the profile's `embedding_bytes_per_token`) between consecutive stages over the intra-node
link, or the inter-node one when the instance spans nodes:

- prefill of a batch: latency = t_tp(batch) + (pp − 1)·hop(tokens); a following batch can
  enter the first stage after t_tp(batch)/pp + hop (batches pipeline);
- decode: `pp` micro-batches of n/pp sequences in flight, so one token of every sequence takes
  step_tp(n/pp) + pp·hop — the fixed (weight-read) cost once, per-sequence and per-context
  costs divided by pp — a linear form again, so decoding stays closed-form;
- a mixed iteration (chunked prefill beside decoding): the chunk runs in one micro-batch, so
  its full cost sets the pipeline's cycle (the bubble that makes PP a poor fit for NoDG);
- memory per GPU: weights / pp, KV of layers / pp; the instance holds `kv_cap` tokens.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

from hastune.cluster import Cluster
from hastune.profile import DecodeSpec, Profile
from hastune.sim.decode import DecodeWorker


class InstanceTiming:
    """Latencies and KV capacity of one instance of tp × pp GPUs starting at `first_gpu`, its
    experts over `ep` GPUs (1: split over the TP group)."""

    def __init__(self, profile: Profile, tp: int, pp: int, cluster: Cluster,
                 first_gpu: int = 0, with_encoder: bool = False, ep: int = 1):
        prof = profile.for_parallel(tp, ep)  # ValueError naming the degrees the profile has
        self.tp, self.pp, self.ep, self.gpus = tp, pp, ep, tp * pp
        per_node = cluster.gpus_per_node
        self.first_gpu = first_gpu
        self.node = first_gpu // per_node
        spans = (first_gpu // per_node) != ((first_gpu + self.gpus - 1) // per_node)
        link = cluster.inter_node if spans else cluster.intra_node
        emb = profile.embedding_bytes_per_token
        self.hop_lat = link.latency_us * 1e-6 if pp > 1 else 0.0
        self.hop_tok = emb / (link.bandwidth_GBps * 1e9) if pp > 1 else 0.0
        pre, dec, mem = prof.prefill, prof.decode, prof.memory
        self.p_fixed, self.p_tok, self.p_sq = pre.fixed_s, pre.per_token_s, pre.per_token_sq_s
        self.max_batch_tokens = pre.max_batch_tokens
        self.d_fixed = dec.fixed_s
        self.decode = DecodeSpec(
            fixed_s=dec.fixed_s + pp * self.hop_lat,
            per_seq_s=dec.per_seq_s / pp + (self.hop_tok if pp > 1 else 0.0),
            per_context_token_s=dec.per_context_token_s / pp,
            max_batch=dec.max_batch * pp)
        self.encode = prof.encode
        fixed = self.d_fixed if self.d_fixed > self.p_fixed else self.p_fixed
        self.mixed_fixed = fixed + pp * self.hop_lat  # mixed(): the first sum of a mixed step
        self.kv_cap_text = mem.kv_capacity_tokens(pp=pp)
        # an inline encoder's weights sit beside the LLM's
        self.kv_cap_mm = mem.kv_capacity_tokens(with_encoder=True, pp=pp)
        self.kv_cap = self.kv_cap_mm if with_encoder else self.kv_cap_text
        # the whole KV of one token across the instance (what FuDG moves)
        self.kv_bytes_per_token = mem.kv_bytes_per_token * tp

    # -- prefill --------------------------------------------------------------------------
    def prefill_latency(self, tokens: float, tokens_sq: float) -> float:
        """One batch through every stage."""
        t = self.p_fixed + self.p_tok * tokens + self.p_sq * tokens_sq
        if self.pp > 1:
            t += (self.pp - 1) * (self.hop_lat + tokens * self.hop_tok)
        return t

    def prefill_stage(self, tokens: float, tokens_sq: float) -> float:
        """How long a batch holds the first stage: when the next batch may enter."""
        t = self.p_fixed + self.p_tok * tokens + self.p_sq * tokens_sq
        if self.pp > 1:
            return t / self.pp + self.hop_lat + tokens * self.hop_tok
        return t

    def encode_latency(self, items: int, tokens: float, tokens_sq: float) -> float:
        e = self.encode
        return (e.fixed_s + e.per_item_s * items + e.per_token_s * tokens
                + e.per_token_sq_s * tokens_sq)

    # -- mixed iteration (NoDG) ------------------------------------------------------------
    def mixed(self, n: int, ctx: float, chunk: float, chunk_sq: float) -> float:
        """An iteration decoding n sequences (total context ctx) beside a prefill chunk of
        `chunk` tokens whose attention adds `chunk_sq` to Σ L²."""
        d = self.decode
        if chunk <= 0:
            return d.fixed_s + d.per_seq_s * n + d.per_context_token_s * ctx
        pf = self.p_tok * chunk + self.p_sq * chunk_sq
        if self.pp > 1:
            pf += (self.pp - 1) * (self.hop_lat + chunk * self.hop_tok)
        if n == 0:
            return self.p_fixed + pf
        return self.mixed_fixed + d.per_seq_s * n + d.per_context_token_s * ctx + pf

    def mixed_run(self, k: int, t: float, n: int, ctx: float, chunk: float, done: float,
                  busy: float, longest: float,
                  last: float = 0.0) -> tuple[float, float, float, float]:
        """k consecutive iterations that each decode the same n sequences (total context ctx
        at the first, n more at each next) beside the next `chunk` tokens of one prompt
        (`done` tokens in at the first). The same float operations, in the same order, as k
        calls of `mixed` timed one after the other, so the same timestamps as running them
        event by event: (t + the durations, busy + the durations, the longest of them and
        `longest`), each sum taken one duration at a time; and, with `last` > 0, the duration
        of one more such iteration with `last` tokens of the prompt (`mixed` of it; 0.0
        without)."""
        pf0 = self.p_tok * chunk
        p_sq = self.p_sq
        if n == 0:
            base, per_ctx = self.p_fixed, 0.0  # p_fixed + 0.0 × ctx is p_fixed exactly
        else:
            d = self.decode
            base, per_ctx = self.mixed_fixed + d.per_seq_s * n, d.per_context_token_s
        if self.pp > 1:
            hop = (self.pp - 1) * (self.hop_lat + chunk * self.hop_tok)
            for _ in range(k):
                d1 = done + chunk
                dur = base + per_ctx * ctx + (pf0 + p_sq * (d1 * d1 - done * done) + hop)
                t += dur
                busy += dur
                if dur > longest:
                    longest = dur
                ctx += n
                done = d1
        else:
            for _ in range(k):  # the same without the hops, as mixed() (the common case)
                d1 = done + chunk
                dur = base + per_ctx * ctx + (pf0 + p_sq * (d1 * d1 - done * done))
                t += dur
                busy += dur
                if dur > longest:
                    longest = dur
                ctx += n
                done = d1
        if last <= 0:
            return t, busy, longest, 0.0
        d1 = done + last
        pf = self.p_tok * last + p_sq * (d1 * d1 - done * done)
        if self.pp > 1:
            pf += (self.pp - 1) * (self.hop_lat + last * self.hop_tok)
        return t, busy, longest, base + per_ctx * ctx + pf


class ReplicaDecode(DecodeWorker):
    """A closed-form decode batch that its instance drives boundary by boundary: requests join
    at a boundary (`join`), the instance may run something else between two boundaries (a
    prefill window, a mixed iteration) and then `advance`s to the next one. Running entries
    are (finish step, request, ctx0 − join step, KV reserve, slack key)."""

    __slots__ = ()

    def __init__(self, spec: DecodeSpec, gpu: int = 0):
        super().__init__(spec, 1 << 62, gpu)

    def boundary(self, t: float) -> tuple[float, int]:
        """The first step boundary at or after t (t itself when nothing is decoding)."""
        n, t0 = self.n, self.t0
        if n == 0 or t <= t0:
            return (t if t > t0 else t0), self.step
        c, step = self.c, self.step  # steps_until(t) and time_of(m), inlined: once per request
        alpha = self.a + self.b * n + c * (self.S + n * step)
        beta = c * n * 0.5
        if beta <= 0.0:
            m = math.ceil((t - t0) / alpha - 1e-9)
        else:
            q = alpha - beta
            m = math.ceil((-q + math.sqrt(q * q + 4.0 * beta * (t - t0))) / (2.0 * beta) - 1e-9)
        if m < 1:
            m = 1
        return t0 + m * alpha + c * n * m * (m - 1) * 0.5, step + m

    def next_finish(self) -> tuple[float, int] | None:
        n = self.n
        if n == 0:
            return None
        s = self.running[0][0]
        m, c, step = s - self.step, self.c, self.step  # time_of(m), inlined
        return (self.t0 + m * (self.a + self.b * n + c * (self.S + n * step))
                + c * n * m * (m - 1) * 0.5), s

    def advance(self, t: float, step: int, t_last: list[float]) -> list[tuple]:
        """Move to boundary `step` at time t; returns the entries that finished there."""
        self.steps_run += step - self.step
        self.step = step
        self.t0 = t
        running = self.running
        done = []
        while running and running[0][0] <= step:
            e = heappop(running)
            t_last[e[1]] = t
            self.n -= 1
            self.S -= e[2]
            self.reserved -= e[3]
            done.append(e)
        return done

    def join(self, req: int, ctx0: float, out: int, reserve: float, key: float = 0.0) -> None:
        """Add a request (out ≥ 2 tokens, its first already produced) at the current boundary."""
        s_i = ctx0 - self.step
        heappush(self.running, (self.step + out - 1, req, s_i, reserve, key))
        self.n += 1
        self.S += s_i
        self.reserved += reserve

    def first_boundary_where(self, slo: float, key: float, need: float, t: float) -> float:
        """The first step boundary at or after t (and before the next finish) at which
        steps·slo − t + key ≥ need, i.e. a saved-TPOT statistic with that key covers `need`
        seconds; ∞ if none. With α the next step's time and β = c·n/2, the statistic after m
        more steps is −β·m² + (slo − α + β)·m + (step·slo − t0 + key): a concave quadratic."""
        n = self.n
        if n == 0:
            return math.inf
        alpha = self.a + self.b * n + self.c * (self.S + n * self.step)
        beta = self.c * n * 0.5
        lin = slo - alpha + beta
        c0 = self.step * slo - self.t0 + key - need
        m_now = self.steps_until(t) if t > self.t0 else 1
        if beta <= 0.0:
            if lin <= 0.0:
                m = m_now
            else:
                m = max(m_now, math.ceil(-c0 / lin - 1e-12))
        else:
            disc = lin * lin + 4.0 * beta * c0
            if disc < 0.0:
                return math.inf
            m = max(m_now, math.ceil((lin - math.sqrt(disc)) / (2.0 * beta) - 1e-12))
        if -beta * m * m + lin * m + c0 < -1e-12:
            return math.inf
        if self.running and self.step + m > self.running[0][0]:
            return math.inf  # a request finishes first; its wake re-offers the request
        return self.time_of(m)

    @property
    def context(self) -> float:
        """Total context of the running batch at the current step."""
        return self.S + self.n * self.step

