"""Discrete-event simulation of encode/prefill/decode deployments: EAServe and its static,
Dynamo-like baseline (hastune/archs/epd.py, epd_static.py).

GPUs are placed in order: encode GPUs 0..n_E−1, remote prefill GPUs next, decode GPUs last,
`gpus_per_node` to a node. A request's life:

  arrival → encode worker (round robin) → micro-batcher → encoder (SM share f from the
  partitioner; the co-resident local prefill gets 1 − f meanwhile, 1.0 when the encoder idles,
  or 1 − f still under a fixed split: sm_split)
  → deficit router: local prefill on the same GPU, or remote prefill (embeddings sent E→P)
  → prefill batch done = first token (TTFT) → KV sent P→D → decode worker (continuous
  batching, closed-form steps) → last token (TPOT = (t_last − t_first)/(n_out − 1)).

Text-only requests skip the encoder. The static baseline: no local prefill, every prefill remote,
encode batches on a fixed timeout, the encoder has the whole GPU. Both get their encode
workers' policies from hastune.policies.encode, as the engine does.

One run is an `_EPDRun`: its state and one short handler per event. Heap entries are
(time, priority, sequence, handler, a, b); the loop calls handler(time, a, b).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from heapq import heappush

from hastune.cluster import Cluster
from hastune.config import AnyConfig
from hastune.policies.encode import policies_for
from hastune.profile import DecodeSpec, EncodeSpec, PrefillSpec, Profile
from hastune.runs import RunResult
from hastune.sim.common import EventLoop, build_result, check_gpus, request_lists
from hastune.sim.compiled import core, core_name
from hastune.sim.decode import DecodeWorker
from hastune.sim.encode import EncodeWorker
from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE, PRIO_TIMER
from hastune.sim.network import Network, network
from hastune.sim.prefill import PrefillWorker
from hastune.sim.stoprule import StopRule
from hastune.workload import RequestSet


@dataclass(frozen=True)
class PoolTiming:
    """What times each pool's work: the profile at each pool's TP degree (latencies with the
    all-reduce inside, memory per GPU), and how the KV cache travels to decode.

    A TP group of tp GPUs holds 1/tp of every token's KV on each GPU; its shards go to the
    decode group's GPUs in parallel, over min(tp_src, tp_D) links at once, so a transfer is
    timed as one link carrying total / links bytes. The encoder of an encode instance runs as
    on one GPU (the profile's encode latency); the instance's local prefill, a TP group whose
    ranks wait for each other, gets 1 − f of every GPU while the encoder holds share f."""

    encode: EncodeSpec
    local_prefill: PrefillSpec
    remote_prefill: PrefillSpec
    decode: DecodeSpec
    decode_kv_tokens: int  # KV tokens one decode instance holds
    tp: tuple[int, int, int] = (1, 1, 1)        # GPUs per encode, prefill, decode instance
    kv_local: tuple[float, int] = (0.0, 1)      # (bytes per token per link, links), E → D
    kv_remote: tuple[float, int] = (0.0, 1)     # the same, P → D
    decode_prefill: PrefillSpec | None = None   # a decode instance's prefill (recomputation)

    @classmethod
    def of(cls, profile: Profile, cfg: AnyConfig,
           pools: dict[str, Profile] | None = None) -> PoolTiming:
        """`pools`: each pool's profile by its letter (E, P, D) where pools sit on several
        GPU types; otherwise every pool's is `profile`."""
        tp_E, tp_P, tp_D = cfg.tp_E, cfg.tp_P, cfg.tp_D  # type: ignore[attr-defined]
        of = pools or {}
        pe = of.get("E", profile).for_tp(tp_E)
        pd = of.get("D", profile).for_tp(tp_D)
        pp = of.get("P", profile).for_tp(tp_P) if cfg.n_P else pe  # type: ignore[attr-defined]

        def kv(src: Profile, tp: int) -> tuple[float, int]:
            links = min(tp, tp_D)
            return src.memory.kv_bytes_per_token * tp / links, links

        return cls(pe.encode, pe.prefill, pp.prefill, pd.decode,
                   pd.memory.kv_capacity_tokens(), (tp_E, tp_P, tp_D), kv(pe, tp_E),
                   kv(pp, tp_P), pd.prefill)


class EPDDecode(DecodeWorker):
    """A decode worker of one run, wired to its heap and request lists so that its events
    call it directly; it also counts the KV tokens routed to it but still on the wire."""

    __slots__ = ("inflight", "heap", "seq", "pre_tok", "out_tok", "t_last", "rejected",
                 "on_arrive", "on_wake")

    def __init__(self, spec: DecodeSpec, cap_tokens: int, gpu: int, run: _EPDRun):
        super().__init__(spec, cap_tokens, gpu)
        self.inflight = 0.0
        self.heap, self.seq = run.heap, run.seq
        self.pre_tok, self.out_tok = run.pre_tok, run.out_tok
        self.t_last, self.rejected = run.t_last, run.rejected
        self.on_arrive, self.on_wake = self._arrive, self._wake  # bound once

    def _arrive(self, t: float, r: int, _: None) -> None:
        """Request r's KV cache arrived."""
        pre, out = self.pre_tok[r], self.out_tok[r]
        self.inflight -= pre + out
        nxt = self.add(r, pre + 1.0, out, t)
        if nxt is not None:
            heappush(self.heap, (nxt[0], PRIO_DONE, next(self.seq), self.on_wake, self.version,
                                 None))

    def _wake(self, t: float, ver: int, _: None) -> None:
        if ver == self.version:
            nxt = self.wake(t, self.t_last, self.rejected)
            if nxt is not None:
                heappush(self.heap, (nxt[0], PRIO_DONE, next(self.seq), self.on_wake,
                                     self.version, None))


class EPDSimulator:
    """Simulates one encode/prefill/decode deployment; `run(requests, rate)` is deterministic."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed
    core: str | None = None  # "python" or "compiled" for this simulator (None: core_name())

    def __init__(self, profile: Profile, cluster: Cluster, config: AnyConfig,
                 warmup: float = 0.1, pools: dict[str, Profile] | None = None,
                 layout: tuple[list[int], int] | None = None):
        """`pools` and `layout`: pools on several GPU types — each pool's profile (by its
        letter) and where its GPUs sit (hastune.cluster.Cluster.node_layout)."""
        check_gpus(config, cluster)
        self.profile = profile
        self.cluster = cluster
        self.config = config
        self.warmup = warmup
        self.timing = PoolTiming.of(profile, config, pools)
        self.layout = layout

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        wall0 = time.perf_counter()
        fast = core_name(self.core) == "compiled"
        run = _EPDRun(self, reqs, rate, lists=not fast)
        if fast:
            core.run(run)  # type: ignore[union-attr]  # the same run: tests/sim/test_core.py
        else:
            for t, _, _, handler, a, b in run.loop.events(run.arrive):
                handler(t, a, b)
        return run.result(wall0)


class _EPDRun:
    """The state of one run and its event handlers."""

    __slots__ = ("sim", "rate", "loop", "heap", "seq", "pre_tok", "enc_tok", "out_tok",
                 "llm_tok", "t_first", "t_last", "rejected", "net", "emb_bytes", "n_mm",
                 "enc", "router", "local", "remote", "dws", "dws_rest", "rr", "rr_text",
                 "text_at_encode", "on_enc_done", "on_timer", "on_pf_arrive", "on_pf_done")

    def __init__(self, sim: EPDSimulator, reqs: RequestSet, rate: float, lists: bool = True):
        """`lists`: the requests' prompt, encoder and LLM tokens as lists (the handlers here
        read them); False: as the request set's arrays, for the compiled core."""
        cfg, prof, tm = sim.config, sim.profile, sim.timing
        self.sim, self.rate = sim, rate
        n = len(reqs)
        # open loop only; one front end per decode instance (it streams)
        self.loop = loop = EventLoop(reqs, rate, closed_loop=False, streams=cfg.n_D,
                                     lists=lists)
        self.heap, self.seq = loop.heap, loop.seq
        (self.pre_tok, self.enc_tok, self.out_tok, _, self.t_first, self.t_last,
         self.rejected) = request_lists(reqs, lists)
        loop.watch(sim.stop_rule, self.t_first, self.t_last, self.out_tok, self.rejected,
                   sim.core)
        self.llm_tok = reqs.llm_tokens.tolist() if lists else reqs.llm_tokens
        n_E, n_P, n_D = cfg.n_E, cfg.n_P, cfg.n_D
        tp_E, tp_P, tp_D = tm.tp
        # GPUs in order: encode instances, remote prefill instances, decode instances; an
        # instance is known by its first GPU
        first_P, first_D = n_E * tp_E, n_E * tp_E + n_P * tp_P
        self.net = network(Network, sim.cluster, cfg.gpus, sim.layout)
        self.emb_bytes = prof.embedding_bytes_per_token
        mm_share = float((reqs.encoder_tokens > 0).mean()) if n else 0.0
        self.n_mm = int((reqs.encoder_tokens > 0).sum())  # multimodal requests in the set
        pols = [policies_for(cfg, rate * mm_share, tm.encode.curve_for) for _ in range(n_E)]
        # one deficit counter for the whole pool (the engine keeps one per encode worker:
        # with round-robin arrivals the shares agree within n_E requests)
        self.router = pols[0].router
        self.local = [PrefillWorker(tm.local_prefill, e * tp_E,
                                    share=p.partitioner.idle_prefill_share)
                      for e, p in enumerate(pols) if p.partitioner is not None]
        self.remote = [PrefillWorker(tm.remote_prefill, first_P + j * tp_P) for j in range(n_P)]
        for ws, kv in ((self.local, tm.kv_local), (self.remote, tm.kv_remote)):
            for w in ws:
                w.kv_bytes, w.kv_links = kv
        # text-only requests: through an encode GPU (its local prefill may take them), or,
        # without local prefill, from the frontend straight to the remote pool
        self.text_at_encode = pols[0].local_prefill
        self.enc = [EncodeWorker(tm.encode, e * tp_E, p.batcher, p.partitioner,
                                 self.local[e] if p.local_prefill else None)
                    for e, p in enumerate(pols)]
        if prof.kv_on_demand:
            self.dws = paged_pool(prof, tm, self, first_D)
        else:
            self.dws = [EPDDecode(tm.decode, tm.decode_kv_tokens, first_D + k * tp_D, self)
                        for k in range(n_D)]
        self.dws_rest = self.dws[1:]
        self.rr = self.rr_text = 0
        # bound once: heap entries hold these
        self.on_enc_done, self.on_timer = self._enc_done, self._timer
        self.on_pf_arrive, self.on_pf_done = self._pf_arrive, self._pf_done

    # -- arrival and encode ---------------------------------------------------------------
    def arrive(self, r: int, t: float) -> None:
        enc = self.enc
        if self.enc_tok[r] <= 0:  # text only: straight to prefill
            if self.text_at_encode:
                self._route(enc[self.rr_text % len(enc)], [r], t)
                self.rr_text += 1
            else:
                self._route(None, [r], t)
            return
        ew = enc[self.rr % len(enc)]
        self.rr += 1
        bt = ew.batcher
        batch = bt.add(t, r)
        if batch is not None:
            ew.queue.append(batch)
            if ew.batch is None:
                self._start_encode(ew, t)
            return
        d = bt.deadline()
        ta = ew.timer_at
        if ta is None or d < ta:  # type: ignore[operator]
            self._arm(ew, d)  # type: ignore[arg-type]

    def _arm(self, ew: EncodeWorker, d: float) -> None:
        """Time the encode worker's batch deadline d (its live timer is later, or none)."""
        ew.timer_ver += 1
        ew.timer_at = d
        heappush(self.heap, (d, PRIO_TIMER, next(self.seq), self.on_timer, ew, ew.timer_ver))

    def _timer(self, t: float, ew: EncodeWorker, ver: int) -> None:
        if ver != ew.timer_ver:
            return
        ew.timer_at = None
        bt = ew.batcher
        batch = bt.poll(t)
        if batch is not None:
            ew.queue.append(batch)
            if ew.batch is None:
                self._start_encode(ew, t)
        else:
            d = bt.deadline()
            if d is not None:
                self._arm(ew, d)

    def _start_encode(self, ew: EncodeWorker, t: float) -> None:
        done = ew.start(t, self.enc_tok)
        heappush(self.heap, (done, PRIO_DONE, next(self.seq), self.on_enc_done, ew, None))
        if ew.local is not None:
            self._set_local_share(ew.local, t, 1.0 - ew.share)

    def _enc_done(self, t: float, ew: EncodeWorker, _: None) -> None:
        batch = ew.finish(t)
        if ew.queue:
            self._start_encode(ew, t)
        elif ew.local is not None:
            self._set_local_share(ew.local, t, ew.partitioner.idle_prefill_share)
        self._route(ew, batch, t)

    # -- prefill --------------------------------------------------------------------------
    def _set_local_share(self, w: PrefillWorker, t: float, share: float) -> None:
        ft = w.set_share(t, share)
        if ft is not None:
            heappush(self.heap, (ft, PRIO_DONE, next(self.seq), self.on_pf_done, w, w.version))

    def _route(self, ew: EncodeWorker | None, batch: list[int], t: float) -> None:
        """Send the prefills of `batch` (their embeddings on encode worker `ew`; None: the
        frontend) to the local prefill or to the remote worker with the least outstanding."""
        pre_tok, router, remote = self.pre_tok, self.router, self.remote
        heap, seq = self.heap, self.seq
        for r in batch:
            pre = pre_tok[r]
            if remote and router.route():  # the static baseline: s = 1, always remote
                w = remote[0]
                best = w.outstanding
                for x in remote:
                    if x.outstanding < best:
                        w, best = x, x.outstanding
                w.outstanding += pre
                src = ew.gpu if ew is not None else w.gpu
                at = self.net.transfer(src, w.gpu, self.llm_tok[r] * self.emb_bytes, t)
                if at != t:
                    heappush(heap, (at, PRIO_ARRIVE, next(seq), self.on_pf_arrive, w, r))
                    continue
            else:
                w = ew.local  # type: ignore[union-attr]
                w.outstanding += pre
            w.queue.append((r, pre))
            if w.batch is None:
                heappush(heap, (w.start(t), PRIO_DONE, next(seq), self.on_pf_done, w,
                                w.version))

    def _pf_arrive(self, t: float, w: PrefillWorker, r: int) -> None:
        w.queue.append((r, self.pre_tok[r]))
        if w.batch is None:
            heappush(self.heap, (w.start(t), PRIO_DONE, next(self.seq), self.on_pf_done, w,
                                 w.version))

    def _pf_done(self, t: float, w: PrefillWorker, ver: int) -> None:
        if ver != w.version:
            return
        heap, seq = self.heap, self.seq
        if t < w.due:  # slowed down after this event was planned
            w.planned = w.due
            heappush(heap, (w.due, PRIO_DONE, next(seq), self.on_pf_done, w, ver))
            return
        pre_tok, out_tok, t_first = self.pre_tok, self.out_tok, self.t_first
        dws, dws_rest, net = self.dws, self.dws_rest, self.net
        kvb, links = w.kv_bytes, w.kv_links
        for r in w.finish(t):
            pre = pre_tok[r]
            w.outstanding -= pre
            t_first[r] = t
            out = out_tok[r]
            if out <= 1:
                self.t_last[r] = t
                continue
            d = dws[0]
            best = d.reserved + d.pending_tokens + d.inflight
            for x in dws_rest:
                v = x.reserved + x.pending_tokens + x.inflight
                if v < best:
                    d, best = x, v
            d.inflight += pre + out
            at = net.transfer(w.gpu, d.gpu, pre * kvb, t)
            if links > 1:  # the other shards, in parallel on their own links
                net.bytes_moved += (links - 1) * pre * kvb
            heappush(heap, (at, PRIO_ARRIVE, next(seq), d.on_arrive, r, None))
        ft = w.start(t)
        if ft is not None:
            heappush(heap, (ft, PRIO_DONE, next(seq), self.on_pf_done, w, w.version))

    # -- result ---------------------------------------------------------------------------
    def result(self, wall0: float) -> RunResult:
        loop, enc, local, remote, dws = self.loop, self.enc, self.local, self.remote, self.dws
        n_E, n_P, n_D = len(enc), len(remote), len(dws)
        span = loop.span()
        enc_sm = sum(e.sm_busy_s for e in enc)
        local_sm = sum(w.sm_busy_s for w in local)
        remote_sm = sum(w.sm_busy_s for w in remote)
        util = {
            "encode": enc_sm / (n_E * span),
            "local_prefill": local_sm / (n_E * span),
            "encode_gpus": (enc_sm + local_sm) / (n_E * span),
            "prefill": remote_sm / (n_P * span) if n_P else 0.0,
            "decode": sum(d.busy_s for d in dws) / (n_D * span),
        }
        tp_E, tp_P, tp_D = self.sim.timing.tp  # an instance's GPUs are busy together
        util["gpus"] = (util["encode_gpus"] * (n_E * tp_E) + util["prefill"] * (n_P * tp_P)
                        + util["decode"] * (n_D * tp_D)) / (n_E * tp_E + n_P * tp_P
                                                           + n_D * tp_D)
        nb = sum(e.batches for e in enc)
        router = self.router
        extra = {
            "mean_encode_batch": self.n_mm / nb if nb else 0.0,
            "remote_prefill_share": router.remote / max(router.remote + router.local, 1),
            "network_GB": self.net.bytes_moved / 1e9,
        }
        if self.sim.profile.kv_on_demand:
            extra["preemptions"] = float(sum(d.preempted for d in dws))  # type: ignore[attr-defined]
        return build_result(self.rate, loop, self.t_first, self.t_last,
                            self.out_tok, self.rejected, self.sim.warmup, util, wall0, extra,
                            load_stats=False)


def paged_pool(prof: Profile, tm: PoolTiming, run: _EPDRun, first_D: int) -> list[EPDDecode]:
    """The decode pool with KV on demand (hastune.sim.decode_paged): a preempted request is
    recomputed by a prefill on its decode instance, at the decode pool's TP."""
    from hastune.sim.decode_paged import paged

    cls = paged(EPDDecode)
    tp_D = tm.tp[2]
    lat = tm.decode_prefill.latency  # type: ignore[union-attr]
    n_D = run.sim.config.n_D  # type: ignore[attr-defined]
    dws = [cls(tm.decode, tm.decode_kv_tokens, first_D + k * tp_D, run) for k in range(n_D)]
    for d in dws:
        d.prefill_s = lat  # type: ignore[attr-defined]
    return dws
