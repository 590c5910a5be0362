"""Discrete-event simulation of `fudg` (DistServe/Mooncake-like) deployments: a prefill pool
and a decode pool of full-model instances; the KV cache crosses the cluster's links.

A request goes to the prefill instance with the fewest prompt tokens outstanding; prompts are
batched up to `max_batch_tokens` (multimodal ones encoded inline first) and batches pipeline
through the instance's `pp` stages. A prefill instance keeps a request's KV from its batch's
start until the KV has reached the decode side, and starts a batch only when that fits — a slow
network backs up into prefill. After prefill the KV goes to a decode instance (the least
loaded on the prefill's node if one has room and holds at most one request more than the least
loaded anywhere, else the least loaded anywhere), shard by shard
over `hastune.sim.links.DuplexNetwork` (both GPUs' ports inside a node, both nodes' NICs
between nodes, FIFO contention). TTFT ends when the KV has arrived (EcoServe's definition: the first
token is only useful once decoding can continue), so it includes the transfer; the wait for a
decode slot and memory counts against TPOT. Decoding: continuous batching, closed form.

One run's state is a FuDGRun; each kind of event has a short handler method.
"""

from __future__ import annotations

import math
import time
from collections import deque
from heapq import heappush

import numpy as np

from hastune.archs.fudg import FuDGConfig
from hastune.cluster import Cluster
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.runs import RunResult
from hastune.sim.common import EventLoop, build_result, check_gpus, request_lists
from hastune.sim.compiled import core, core_name
from hastune.sim.decode import DecodeWorker
from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE
from hastune.sim.instance import InstanceTiming
from hastune.sim.links import DuplexNetwork
from hastune.sim.network import network
from hastune.sim.stoprule import StopRule
from hastune.workload import RequestSet

# how much more a decode instance on the prefill's node may hold than the least loaded one and
# still be picked, in requests (the one being placed): with grouped pools (the prefill pool's
# node holds few decode instances) a pick on room alone sent a whole run's requests to the one
# decode instance beside the prefill pool, while the rest idled
LOCAL_SLACK = 1.0

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
    """Simulates one fudg deployment; `run(requests, rate)` is deterministic. Open-loop runs
    take the compiled core where it was built (hastune.sim._core.run_fudg, the same run:
    tests/sim/test_core.py); closed-loop ones (benchmark clients) the Python path."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed
    core: str | None = None  # "python" or "compiled" for this simulator (None: core_name())

    def __init__(self, profile: Profile, cluster: Cluster, config: FuDGConfig,
                 warmup: float = 0.1, slo: SLO | None = None,
                 pools: dict[str, Profile] | None = None,
                 layout: tuple[list[int], int] | None = None):
        """`pools` and `layout`: the two pools on different GPU types — each pool's profile
        ("prefill", "decode") and where its GPUs sit (Cluster.node_layout; grouped placement:
        the prefill pool's GPUs first)."""
        check_gpus(config, cluster)
        self.profile, self.cluster, self.config, self.warmup = profile, cluster, config, warmup
        self.layout = layout
        of = pools or {}
        fp, fd = place(config)
        self.ptm = [InstanceTiming(of.get("prefill", profile), config.prefill_tp,
                                   config.prefill_pp, cluster, g, ep=config.prefill_ep)
                    for g in fp]
        self.dtm = [InstanceTiming(of.get("decode", profile), config.decode_tp,
                                   config.decode_pp, cluster, g, ep=config.decode_ep)
                    for g in fd]

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        wall0 = time.perf_counter()
        fast = core_name(self.core) == "compiled" and reqs.think_s is None
        run = FuDGRun(self, reqs, rate, lists=not fast)
        if fast:
            core.run_fudg(run)  # type: ignore[union-attr]
        else:
            run.events()
        extra = {"network_GB": run.net.bytes_moved / 1e9, "network_busy_s": run.net.busy_s}
        if self.profile.kv_on_demand:
            extra["preemptions"] = float(sum(d.preempted for d in run.dws))  # type: ignore
        return build_result(rate, run.loop, run.t_first, run.t_last, run.out_tok,
                            run.rejected, self.warmup, run.utilisation(), wall0, extra)


class FuDGRun:
    """The state of one fudg run (prefill pool, decode pool, network, event heap); `events()`
    runs it. Hot methods bind the attributes they read to locals first."""

    def __init__(self, sim: FuDGSimulator, reqs: RequestSet, rate: float, lists: bool = True):
        """`lists` False: the per-request numbers as arrays, for the compiled core (open
        loop)."""
        cfg, cluster = sim.config, sim.cluster
        self.gpus = cfg.gpus
        self.per_node = cluster.gpus_per_node
        # one front end per decode instance
        self.loop = loop = EventLoop(reqs, rate, streams=cfg.decode_instances, lists=lists)
        self.heap, self.seq, self.done = loop.heap, loop.seq, loop.finished
        (self.pre_tok, _, self.out_tok, mm, self.t_first, self.t_last,
         self.rejected) = request_lists(reqs, lists)
        loop.watch(sim.stop_rule, self.t_first, self.t_last, self.out_tok, self.rejected,
                   sim.core)
        self.src_of = [0] * len(reqs)  # the prefill instance of each request
        self.net = network(DuplexNetwork, cluster, cfg.gpus, sim.layout)
        self.ptm, self.dtm = ptm, dtm = sim.ptm, sim.dtm
        self.P, self.D = P, D = len(ptm), len(dtm)
        # prefill pool
        self.p_cap = [(t.kv_cap_mm if mm else t.kv_cap_text) for t in ptm]
        self.max_tok = [min(t.max_batch_tokens, c) for t, c in zip(ptm, self.p_cap)]
        self.p_queue: list[deque[int]] = [deque() for _ in range(P)]
        self.p_outstanding = [0.0] * P
        self.p_held = [0.0] * P      # KV tokens computed or being computed, not yet sent
        self.p_stage_busy = [False] * P
        self.p_busy_s = [0.0] * P
        self.enc_lat = encode_times(reqs, ptm[0])
        # decode pool
        self.d_cap = [t.kv_cap_text for t in dtm]
        if sim.profile.kv_on_demand:  # KV on demand, recomputed on the decode instance
            from hastune.sim.decode_paged import paged

            cls = paged(DecodeWorker)
            self.dws = [cls(t.decode, c, t.first_gpu) for t, c in zip(dtm, self.d_cap)]
            for w, t in zip(self.dws, dtm):
                w.prefill_s = t.prefill_latency  # type: ignore[attr-defined]
        else:
            self.dws = [DecodeWorker(t.decode, c, t.first_gpu) for t, c in zip(dtm, self.d_cap)]
        self.d_inflight = [0.0] * D
        self.d_node = [t.node for t in dtm]
        self.fits = (max(self.d_cap), max(self.p_cap))  # the most KV any instance can hold
        self.gp, self.gd = ptm[0].gpus, dtm[0].gpus
        self.kv_bytes = ptm[0].kv_bytes_per_token
        self.finished: list[int] = []  # requests a decode wake just finished

    def events(self) -> None:
        """Run to the end: every event goes to its handler."""
        woke, kv_arrived, prefilled = self.woke, self.kv_arrived, self.prefilled
        start, busy, dws = self.start, self.p_stage_busy, self.dws
        for t, _, _, kind, a, b in self.loop.events(self.arrive):
            if kind == DEC_WAKE:
                if b == dws[a].version:  # else re-planned since
                    woke(a, t)
            elif kind == KV_ARRIVE:
                kv_arrived(a, b, t)
            elif kind == PF_DONE:
                prefilled(a, b, t)
            elif kind == PF_NEXT:  # prefill instance a's first stage is free
                busy[a] = False
                start(a, t)
            else:  # ARRIVE (closed loop)
                self.arrive(a, t)

    def arrive(self, r: int, t: float) -> None:
        """Request r goes to the prefill instance with the fewest prompt tokens outstanding."""
        pre = self.pre_tok[r]
        if pre + self.out_tok[r] > self.fits[0] or pre > self.fits[1]:
            self.rejected.append(r)
            self.t_first[r] = self.t_last[r] = math.inf
            self.done(r, t)
            return
        outstanding = self.p_outstanding
        k = 0
        best = outstanding[0]
        for j in range(1, self.P):
            if outstanding[j] < best:
                best, k = outstanding[j], j
        p_cap = self.p_cap
        if pre > p_cap[k]:
            k = max(range(self.P), key=lambda j: p_cap[j])
        self.src_of[r] = k
        outstanding[k] += pre
        self.p_queue[k].append(r)
        if not self.p_stage_busy[k]:  # (start's own test, here: most calls would return)
            self.start(k, t)

    def start(self, k: int, t: float) -> None:
        """Start the next prefill batch on instance k if its first stage is free and the
        batch's KV fits beside what k still holds."""
        q = self.p_queue[k]
        if self.p_stage_busy[k] or not q:
            return
        pre_tok, enc_lat = self.pre_tok, self.enc_lat
        room = self.p_cap[k] - self.p_held[k]
        lim = self.max_tok[k]
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
            enc += enc_lat[r]
        tm = self.ptm[k]
        self.p_held[k] += tokens
        lat = enc + tm.prefill_latency(tokens, sq)
        stage = enc + tm.prefill_stage(tokens, sq)
        self.p_busy_s[k] += stage
        self.p_stage_busy[k] = True
        heap, seq = self.heap, self.seq
        heappush(heap, (t + lat, PRIO_DONE, next(seq), PF_DONE, k, batch))
        heappush(heap, (t + stage, PRIO_DONE, next(seq), PF_NEXT, k, None))

    def prefilled(self, k: int, batch: list[int], t: float) -> None:
        """A batch left prefill instance k: single-token requests are done, the others' KV
        goes to a decode instance."""
        pre_tok, out_tok, outstanding = self.pre_tok, self.out_tok, self.p_outstanding
        for r in batch:
            outstanding[k] -= pre_tok[r]
            if out_tok[r] <= 1:
                self.p_held[k] -= pre_tok[r]
                self.t_first[r] = self.t_last[r] = t
                self.done(r, t)
            else:
                self.send(k, r, t)
        self.start(k, t)

    def pick_decode(self, k: int, need: float) -> int:
        """The least loaded decode instance on prefill k's node if it has room and holds at
        most this request's tokens more than the least loaded anywhere (LOCAL_SLACK), else
        the least loaded anywhere: locality while the pool is balanced, never a pile on the
        prefill's neighbour while others idle."""
        node = self.ptm[k].node
        dws, d_inflight, d_node = self.dws, self.d_inflight, self.d_node
        best_local, bl = math.inf, -1
        best_any, ba = math.inf, 0
        for j, dw in enumerate(dws):
            x = dw.reserved + dw.pending_tokens + d_inflight[j]  # DecodeWorker.load, inline
            if x < best_any:
                best_any, ba = x, j
            if d_node[j] == node and x < best_local:
                best_local, bl = x, j
        if bl >= 0 and best_local + need <= self.d_cap[bl] \
                and best_local <= best_any + LOCAL_SLACK * need:
            return bl
        return ba

    def send(self, k: int, r: int, t: float) -> None:
        """Send r's KV from prefill instance k to a decode instance, shard by shard."""
        pre = self.pre_tok[r]
        need = pre + self.out_tok[r]
        j = self.pick_decode(k, need)
        self.d_inflight[j] += need
        nbytes = pre * self.kv_bytes
        src, dst = self.ptm[k].first_gpu, self.dtm[j].first_gpu
        per_node, gp = self.per_node, self.gp
        if src // per_node == dst // per_node and gp > 1:
            # shards leave from every GPU of the instance in parallel
            transfer, gd = self.net.transfer, self.gd
            shard = nbytes / gp
            at = t
            for s in range(gp):
                a = transfer(src + s, dst + s % gd, shard, t)
                if a > at:
                    at = a
        else:
            at = self.net.transfer(src, dst, nbytes, t)
        heappush(self.heap, (at, PRIO_ARRIVE, next(self.seq), KV_ARRIVE, j, r))

    def kv_arrived(self, j: int, r: int, t: float) -> None:
        """r's KV reached decode instance j: its first token counts now; prefill instance k
        frees the KV and may start a batch that waited for room."""
        pre = self.pre_tok[r]
        k = self.src_of[r]
        self.p_held[k] -= pre
        self.d_inflight[j] -= pre + self.out_tok[r]
        self.t_first[r] = t
        dw = self.dws[j]
        nxt = dw.add(r, pre + 1.0, self.out_tok[r], t)
        if nxt is not None:
            heappush(self.heap, (nxt[0], PRIO_DONE, next(self.seq), DEC_WAKE, j, dw.version))
        if self.p_queue[k] and not self.p_stage_busy[k]:  # (start's own test, inline)
            self.start(k, t)

    def woke(self, j: int, t: float) -> None:
        """Decode instance j reached its planned boundary."""
        dw = self.dws[j]
        finished = self.finished
        nxt = dw.wake(t, self.t_last, self.rejected, finished)
        if nxt is not None:
            heappush(self.heap, (nxt[0], PRIO_DONE, next(self.seq), DEC_WAKE, j, dw.version))
        if finished:
            done = self.done
            for r in finished:
                done(r, t)
            finished.clear()

    def utilisation(self) -> dict[str, float]:
        """Busy share of the prefill pool, of the decode pool, and of all GPUs."""
        span = self.loop.span()
        P, D = self.P, self.D
        util = {"prefill": sum(self.p_busy_s) / (P * span),
                "decode": sum(d.busy_s for d in self.dws) / (D * span)}
        util["gpus"] = (util["prefill"] * P * self.gp + util["decode"] * D * self.gd) / self.gpus
        return util


def encode_times(reqs: RequestSet, tm: InstanceTiming) -> list[float]:
    """Each request's inline encode time on an instance like `tm` (0 for text), as a list:
    one array expression, the same floats as one call per request."""
    x = reqs.encoder_tokens
    if not (x > 0).any():
        return [0.0] * len(x)
    return np.where(x > 0, tm.encode_latency(1, x, x * x), 0.0).tolist()
