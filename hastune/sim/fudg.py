"""Discrete-event simulation of `fudg` (DistServe/Mooncake-like) deployments: a prefill pool
and a decode pool of full-model instances; the KV cache crosses the cluster's links.

A request goes to the prefill instance with the fewest prompt tokens outstanding; prompts are
batched up to `max_batch_tokens` (multimodal ones encoded inline first) and batches pipeline
through the instance's `pp` stages. A prefill instance keeps a request's KV from its batch's
start until the KV has reached the decode side, and starts a batch only when that fits — a slow
network backs up into prefill. After prefill the KV goes to a decode instance (the least
loaded on the prefill's node if one has room, else the least loaded anywhere), shard by shard
over `hastune.sim.links.DuplexNetwork` (both GPUs' ports inside a node, both nodes' NICs
between nodes, FIFO contention). TTFT ends when the KV has arrived (EcoServe's definition: the first
token is only useful once decoding can continue), so it includes the transfer; the wait for a
decode slot and memory counts against TPOT. Decoding: continuous batching, closed form.
"""

from __future__ import annotations

import math
import time
from collections import deque
from heapq import heappush

from hastune.cluster import Cluster
from hastune.config import FuDGConfig
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.sim.common import EventLoop, StopRule, build_result, check_gpus, request_lists
from hastune.sim.decode import DecodeWorker
from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE
from hastune.sim.instance import InstanceTiming
from hastune.sim.links import DuplexNetwork
from hastune.sim.result import RunResult
from hastune.workload import RequestSet

# event kinds after common.ARRIVE (0), a closed-loop client's next request
PF_NEXT, PF_DONE, KV_ARRIVE, DEC_WAKE = range(1, 5)


def place(cfg: FuDGConfig) -> tuple[list[int], list[int]]:
    """First GPU of every prefill and decode instance. `grouped`: the prefill pool, then the
    decode pool. `interleaved`: the two kinds alternate in proportion to their counts, so
    every node holds some of each and most KV stays inside a node."""
    P, D = cfg.prefill_instances, cfg.decode_instances
    gp, gd = cfg.prefill_tp * cfg.prefill_pp, cfg.decode_tp * cfg.decode_pp
    if cfg.placement == "grouped":
        return [i * gp for i in range(P)], [P * gp + j * gd for j in range(D)]
    order: list[str] = []
    p = d = 0
    while p < P or d < D:
        # the kind whose placed share lags its target share goes next
        if d >= D or (p < P and (p + 0.5) / P <= (d + 0.5) / D):
            order.append("p")
            p += 1
        else:
            order.append("d")
            d += 1
    firsts_p, firsts_d = [], []
    g = 0
    for kind in order:  # contiguous; an instance that straddles a node hops over the NIC
        (firsts_p if kind == "p" else firsts_d).append(g)
        g += gp if kind == "p" else gd
    return firsts_p, firsts_d


class FuDGSimulator:
    """Simulates one fudg deployment; `run(requests, rate)` is deterministic."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed

    def __init__(self, profile: Profile, cluster: Cluster, config: FuDGConfig,
                 warmup: float = 0.1, slo: SLO | None = None):
        check_gpus(config, cluster)
        self.profile, self.cluster, self.config, self.warmup = profile, cluster, config, warmup
        fp, fd = place(config)
        self.ptm = [InstanceTiming(profile, config.prefill_tp, config.prefill_pp, cluster, g)
                    for g in fp]
        self.dtm = [InstanceTiming(profile, config.decode_tp, config.decode_pp, cluster, g)
                    for g in fd]

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        wall0 = time.perf_counter()
        cfg, cluster = self.config, self.cluster
        per_node = cluster.gpus_per_node
        loop = EventLoop(reqs, rate)
        heap, seq, done = loop.heap, loop.seq, loop.finished
        pre_tok, enc_tok, out_tok, mm, t_first, t_last, rejected = request_lists(reqs)
        loop.watch(self.stop_rule, t_first, t_last, out_tok)
        src_of = [0] * len(reqs)
        net = DuplexNetwork(cluster, cfg.gpus)
        ptm, dtm = self.ptm, self.dtm
        P, D = len(ptm), len(dtm)
        p_cap = [(t.kv_cap_mm if mm else t.kv_cap_text) for t in ptm]
        d_cap = [t.kv_cap_text for t in dtm]
        max_tok = [min(t.max_batch_tokens, c) for t, c in zip(ptm, p_cap)]
        p_queue: list[deque[int]] = [deque() for _ in range(P)]
        p_outstanding = [0.0] * P
        p_held = [0.0] * P          # KV tokens computed or being computed, not yet sent
        p_stage_busy = [False] * P
        p_busy_s = [0.0] * P
        dws = [DecodeWorker(t.decode, c, t.first_gpu) for t, c in zip(dtm, d_cap)]
        d_inflight = [0.0] * D
        d_node = [t.node for t in dtm]
        gp, gd = ptm[0].gpus, dtm[0].gpus
        kv_bytes = ptm[0].kv_bytes_per_token

        def start(k: int, t: float) -> None:
            """Start the next prefill batch on instance k if its first stage is free."""
            q = p_queue[k]
            if p_stage_busy[k] or not q:
                return
            room = p_cap[k] - p_held[k]
            lim = max_tok[k]
            batch: list[int] = []
            tokens = sq = enc = 0.0
            while q:
                r = q[0]
                L = pre_tok[r]
                if batch and (tokens + L > lim or tokens + L > room):
                    break
                if not batch and L > room:
                    return  # wait for transfers to free KV
                q.popleft()
                batch.append(r)
                tokens += L
                sq += L * L
                if enc_tok[r] > 0:
                    x = enc_tok[r]
                    enc += ptm[k].encode_latency(1, x, x * x)
            tm = ptm[k]
            p_held[k] += tokens
            lat = enc + tm.prefill_latency(tokens, sq)
            stage = enc + tm.prefill_stage(tokens, sq)
            p_busy_s[k] += stage
            p_stage_busy[k] = True
            heappush(heap, (t + lat, PRIO_DONE, next(seq), PF_DONE, k, batch))
            heappush(heap, (t + stage, PRIO_DONE, next(seq), PF_NEXT, k, None))

        def pick_decode(k: int, need: float) -> int:
            node = ptm[k].node
            best_local, bl = math.inf, -1
            best_any, ba = math.inf, 0
            for j in range(D):
                x = dws[j].load + d_inflight[j]
                if x < best_any:
                    best_any, ba = x, j
                if d_node[j] == node and x < best_local:
                    best_local, bl = x, j
            if bl >= 0 and best_local + need <= d_cap[bl]:
                return bl
            return ba

        def send(k: int, r: int, t: float) -> None:
            need = pre_tok[r] + out_tok[r]
            j = pick_decode(k, need)
            d_inflight[j] += need
            nbytes = pre_tok[r] * kv_bytes
            src, dst = ptm[k].first_gpu, dtm[j].first_gpu
            if src // per_node == dst // per_node and gp > 1:
                # shards leave from every GPU of the instance in parallel
                shard = nbytes / gp
                at = t
                for s in range(gp):
                    a = net.transfer(src + s, dst + s % gd, shard, t)
                    if a > at:
                        at = a
            else:
                at = net.transfer(src, dst, nbytes, t)
            heappush(heap, (at, PRIO_ARRIVE, next(seq), KV_ARRIVE, j, r))

        def arrive(r: int, t: float) -> None:
            need = pre_tok[r] + out_tok[r]
            if need > max(d_cap) or pre_tok[r] > max(p_cap):
                rejected.append(r)
                t_first[r] = t_last[r] = math.inf
                done(r, t)
                return
            k = 0
            best = p_outstanding[0]
            for j in range(1, P):
                if p_outstanding[j] < best:
                    best, k = p_outstanding[j], j
            if pre_tok[r] > p_cap[k]:
                k = max(range(P), key=lambda j: p_cap[j])
            src_of[r] = k
            p_outstanding[k] += pre_tok[r]
            p_queue[k].append(r)
            start(k, t)

        finished: list[int] = []
        for t, _, _, kind, a, b in loop.events(arrive):
            if kind == DEC_WAKE:
                dw = dws[a]
                if b == dw.version:
                    nxt = dw.wake(t, t_last, rejected, finished)
                    if nxt is not None:
                        heappush(heap, (nxt[0], PRIO_DONE, next(seq), DEC_WAKE, a, dw.version))
                    if finished:
                        for r in finished:
                            done(r, t)
                        finished.clear()
            elif kind == KV_ARRIVE:
                r = b
                k = src_of[r]
                p_held[k] -= pre_tok[r]
                d_inflight[a] -= pre_tok[r] + out_tok[r]
                t_first[r] = t
                dw = dws[a]
                nxt = dw.add(r, pre_tok[r] + 1.0, out_tok[r], t)
                if nxt is not None:
                    heappush(heap, (nxt[0], PRIO_DONE, next(seq), DEC_WAKE, a, dw.version))
                start(k, t)
            elif kind == PF_DONE:
                for r in b:
                    p_outstanding[a] -= pre_tok[r]
                    if out_tok[r] <= 1:
                        p_held[a] -= pre_tok[r]
                        t_first[r] = t_last[r] = t
                        done(r, t)
                    else:
                        send(a, r, t)
                start(a, t)
            elif kind == PF_NEXT:
                p_stage_busy[a] = False
                start(a, t)
            else:  # ARRIVE (closed loop)
                arrive(a, t)

        span = loop.span()
        util = {"prefill": sum(p_busy_s) / (P * span),
                "decode": sum(d.busy_s for d in dws) / (D * span)}
        util["gpus"] = (util["prefill"] * P * gp + util["decode"] * D * gd) / cfg.gpus
        extra = {"network_GB": net.bytes_moved / 1e9,
                 "network_busy_s": net.busy_s}
        return build_result(rate, loop, t_first, t_last, out_tok, rejected, self.warmup, util,
                            wall0, extra)
