"""Discrete-event simulation of `epd` (EAServe) and `epd-static` (Dynamo-like) deployments.

GPUs are placed in order: encode GPUs 0..n_E−1, remote prefill GPUs next, decode GPUs last,
`gpus_per_node` to a node. A request's life:

  arrival → encode worker (round robin) → micro-batcher → encoder (SM share f from the
  partitioner; the co-resident local prefill gets 1 − f meanwhile, 1.0 when the encoder idles)
  → deficit router: local prefill on the same GPU, or remote prefill (embeddings sent E→P)
  → prefill batch done = first token (TTFT) → KV sent P→D → decode worker (continuous
  batching, closed-form steps) → last token (TPOT = (t_last − t_first)/(n_out − 1)).

Text-only requests skip the encoder. `epd-static`: no local prefill, every prefill remote,
encode batches on a fixed timeout, the encoder has the whole GPU.
"""

from __future__ import annotations

import time
from collections import deque
from heapq import heappush

from hastune.cluster import Cluster
from hastune.config import EPDConfig, EPDStaticConfig
from hastune.policies import DeficitRouter, PoissonGapBatcher, SMPartitioner, TimeoutBatcher
from hastune.profile import Profile, interp_curve
from hastune.sim.common import EventLoop, StopRule, build_result, check_gpus, request_lists
from hastune.sim.decode import DecodeWorker
from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE, PRIO_TIMER
from hastune.sim.network import Network
from hastune.sim.prefill import PrefillWorker
from hastune.sim.result import RunResult
from hastune.workload import RequestSet

ENC_DONE, ENC_TIMER, PF_ARRIVE, PF_DONE, DEC_ARRIVE, DEC_WAKE = range(6)


class EPDSimulator:
    """Simulates one epd / epd-static deployment; `run(requests, rate)` is deterministic."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed

    def __init__(self, profile: Profile, cluster: Cluster, config: EPDConfig | EPDStaticConfig,
                 warmup: float = 0.1):
        check_gpus(config, cluster)
        self.profile = profile
        self.cluster = cluster
        self.config = config
        self.warmup = warmup
        self.static = isinstance(config, EPDStaticConfig)
        mem = profile.memory
        self.decode_cap = mem.kv_capacity_tokens()
        self.partitioner = SMPartitioner(
            profile.encode.curve_for, budget=getattr(config, "sm_budget", 0.2))

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        wall0 = time.perf_counter()
        cfg, prof = self.config, self.profile
        static = self.static
        n = len(reqs)
        loop = EventLoop(reqs, rate, closed_loop=False)  # open loop only
        heap, seq = loop.heap, loop.seq
        pre_tok, enc_tok, out_tok, _, t_first, t_last, rejected = request_lists(reqs)
        loop.watch(self.stop_rule, t_first, t_last, out_tok)
        llm_tok = reqs.llm_tokens.tolist()

        n_E, n_P, n_D = cfg.n_E, cfg.n_P, cfg.n_D
        net = Network(self.cluster, n_E + n_P + n_D)
        emb_bytes = prof.embedding_bytes_per_token
        kv_bytes = prof.memory.kv_bytes_per_token
        enc_spec = prof.encode
        e_fixed, e_item, e_tok, e_sq = (enc_spec.fixed_s, enc_spec.per_item_s,
                                        enc_spec.per_token_s, enc_spec.per_token_sq_s)
        mm_share = float((reqs.encoder_tokens > 0).mean()) if n else 0.0
        per_worker_rate = max(rate * mm_share / n_E, 1e-6)
        if static:
            batchers = [TimeoutBatcher(cfg.batch, cfg.timeout_ms / 1e3) for _ in range(n_E)]
        else:
            cap = cfg.max_gap_ms / 1e3 if cfg.max_gap_ms is not None else None
            batchers = [PoissonGapBatcher(cfg.B, cfg.p, per_worker_rate, max_gap=cap)
                        for _ in range(n_E)]
        router = DeficitRouter(1.0 if static else cfg.s)
        partition = self.partitioner.encode_share
        # prefill workers: local ones (epd only) at index e, remote ones after
        pws: list[PrefillWorker] = []
        if not static:
            pws += [PrefillWorker(prof.prefill, e, share=1.0) for e in range(n_E)]
        n_local = len(pws)
        pws += [PrefillWorker(prof.prefill, n_E + j) for j in range(n_P)]
        remote_idx = list(range(n_local, n_local + n_P))
        dws = [DecodeWorker(prof.decode, self.decode_cap, n_E + n_P + k) for k in range(n_D)]
        inflight = [0.0] * n_D  # KV tokens routed to a decode worker, still on the wire

        enc_queue: list[deque[list[int]]] = [deque() for _ in range(n_E)]
        enc_batch: list[list[int] | None] = [None] * n_E
        enc_share = [1.0] * n_E
        enc_start = [0.0] * n_E
        enc_sm_busy = [0.0] * n_E
        enc_batches = [0] * n_E
        timer_at: list[float | None] = [None] * n_E
        timer_ver = [0] * n_E

        def push(t: float, prio: int, kind: int, a: object, b: object = None) -> None:
            heappush(heap, (t, prio, next(seq), kind, a, b))

        share_of: dict[int, tuple[float, float]] = {}  # batch size → (share, slowdown)

        def start_encode(e: int, t: float) -> None:
            batch = enc_queue[e].popleft()
            toks = 0.0
            sq = 0.0
            for r in batch:
                x = enc_tok[r]
                toks += x
                sq += x * x
            nb = len(batch)
            fs = share_of.get(nb)
            if fs is None:
                f = 1.0 if static else partition(nb)
                curve = enc_spec.curve_for(nb)
                slow = (1.0 if f >= 1.0 else interp_curve(curve, f) if curve
                        else 1.0 + self.partitioner.budget)
                fs = share_of[nb] = (f, slow)
            f = fs[0]
            dur = (e_fixed + e_item * nb + e_tok * toks + e_sq * sq) * fs[1]
            enc_batch[e] = batch
            enc_share[e] = f
            enc_start[e] = t
            enc_batches[e] += 1
            heappush(heap, (t + dur, PRIO_DONE, next(seq), ENC_DONE, e, None))
            if not static:
                set_local_share(e, t, 1.0 - f)

        def set_local_share(e: int, t: float, share: float) -> None:
            w = pws[e]
            ft = w.set_share(t, share)
            if ft is not None:
                push(ft, PRIO_DONE, PF_DONE, e, w.version)

        def prefill_enqueue(wi: int, r: int, t: float) -> None:
            w = pws[wi]
            w.queue.append((r, pre_tok[r]))
            if w.batch is None:
                ft = w.start(t)
                push(ft, PRIO_DONE, PF_DONE, wi, w.version)

        def route(e: int, r: int, t: float) -> None:
            if n_P and router.route():  # epd-static: s = 1, always remote
                wi = remote_idx[0]
                best = pws[wi].outstanding
                for j in remote_idx:
                    if pws[j].outstanding < best:
                        wi, best = j, pws[j].outstanding
                w = pws[wi]
                w.outstanding += pre_tok[r]
                src = e if e >= 0 else w.gpu
                at = net.transfer(src, w.gpu, llm_tok[r] * emb_bytes, t)
                if at == t:
                    prefill_enqueue(wi, r, t)
                else:
                    push(at, PRIO_ARRIVE, PF_ARRIVE, wi, r)
            else:
                pws[e].outstanding += pre_tok[r]
                prefill_enqueue(e, r, t)

        rr_text = 0
        rr = 0

        def arrive(r: int, t: float) -> None:
            nonlocal rr_text, rr
            if enc_tok[r] <= 0:  # text only: straight to prefill
                if static:
                    route(-1, r, t)
                else:
                    route(rr_text % n_E, r, t)
                    rr_text += 1
                return
            e = rr % n_E
            rr += 1
            b = batchers[e]
            batch = b.add(t, r)
            if batch is not None:
                enc_queue[e].append(batch)
                if enc_batch[e] is None:
                    start_encode(e, t)
            else:
                d = b.deadline()
                ta = timer_at[e]
                if ta is None or d < ta:
                    timer_ver[e] += 1
                    timer_at[e] = d
                    heappush(heap, (d, PRIO_TIMER, next(seq), ENC_TIMER, e, timer_ver[e]))

        for t, _, _, kind, a, b_ in loop.events(arrive):
            if kind == DEC_WAKE:
                dw = dws[a]
                if b_ == dw.version:
                    nxt = dw.wake(t, t_last, rejected)
                    if nxt is not None:
                        heappush(heap, (nxt[0], PRIO_DONE, next(seq), DEC_WAKE, a, dw.version))
            elif kind == DEC_ARRIVE:
                dw = dws[a]
                inflight[a] -= pre_tok[b_] + out_tok[b_]
                nxt = dw.add(b_, pre_tok[b_] + 1.0, out_tok[b_], t)
                if nxt is not None:
                    heappush(heap, (nxt[0], PRIO_DONE, next(seq), DEC_WAKE, a, dw.version))
            elif kind == PF_DONE:
                w = pws[a]
                if b_ != w.version:
                    continue
                if t < w.due:  # slowed down after this event was planned
                    w.planned = w.due
                    heappush(heap, (w.due, PRIO_DONE, next(seq), PF_DONE, a, b_))
                    continue
                for r in w.finish(t):
                    w.outstanding -= pre_tok[r]
                    t_first[r] = t
                    if out_tok[r] <= 1:
                        t_last[r] = t
                        continue
                    di = 0
                    best = dws[0].load + inflight[0]
                    for k in range(1, n_D):
                        x = dws[k].load + inflight[k]
                        if x < best:
                            di, best = k, x
                    inflight[di] += pre_tok[r] + out_tok[r]
                    at = net.transfer(w.gpu, dws[di].gpu, pre_tok[r] * kv_bytes, t)
                    heappush(heap, (at, PRIO_ARRIVE, next(seq), DEC_ARRIVE, di, r))
                ft = w.start(t)
                if ft is not None:
                    heappush(heap, (ft, PRIO_DONE, next(seq), PF_DONE, a, w.version))
            elif kind == PF_ARRIVE:
                prefill_enqueue(a, b_, t)
            elif kind == ENC_DONE:
                e = a
                batch = enc_batch[e]
                enc_sm_busy[e] += enc_share[e] * (t - enc_start[e])
                enc_batch[e] = None
                if enc_queue[e]:
                    start_encode(e, t)
                elif not static:
                    set_local_share(e, t, 1.0)
                for r in batch:  # type: ignore[union-attr]
                    route(e, r, t)
            elif kind == ENC_TIMER:
                e = a
                if b_ != timer_ver[e]:
                    continue
                timer_at[e] = None
                bt = batchers[e]
                batch = bt.poll(t)
                if batch is not None:
                    enc_queue[e].append(batch)
                    if enc_batch[e] is None:
                        start_encode(e, t)
                else:
                    d = bt.deadline()
                    if d is not None:
                        timer_ver[e] += 1
                        timer_at[e] = d
                        heappush(heap, (d, PRIO_TIMER, next(seq), ENC_TIMER, e, timer_ver[e]))

        span = loop.span()
        local_sm = sum(w.sm_busy_s for w in pws[:n_local])
        remote_sm = sum(w.sm_busy_s for w in pws[n_local:])
        util = {
            "encode": sum(enc_sm_busy) / (n_E * span),
            "local_prefill": local_sm / (n_E * span),
            "encode_gpus": (sum(enc_sm_busy) + local_sm) / (n_E * span),
            "prefill": remote_sm / (n_P * span) if n_P else 0.0,
            "decode": sum(d.busy_s for d in dws) / (n_D * span),
        }
        util["gpus"] = (util["encode_gpus"] * n_E + util["prefill"] * n_P
                        + util["decode"] * n_D) / (n_E + n_P + n_D)
        nb = sum(enc_batches)
        extra = {
            "mean_encode_batch": (sum(1 for x in enc_tok if x > 0) / nb) if nb else 0.0,
            "remote_prefill_share": router.remote / max(router.remote + router.local, 1),
            "network_GB": net.bytes_moved / 1e9,
        }
        return build_result(rate, loop, t_first, t_last, out_tok, rejected, self.warmup, util,
                            wall0, extra, load_stats=False)
