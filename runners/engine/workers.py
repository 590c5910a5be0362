"""Worker processes. Each loads the model once, then serves its inbox until told to stop.

- encode (`E<i>`): micro-batches with the shared Poisson-gap (EAServe) or timeout (the static
  baseline) batcher, encodes, and routes each prompt with the shared deficit router (both
  built from the parsed config by hastune.policies.encode, as in the simulator): to its co-resident
  local prefill (a thread of the same process; on CUDA the two get disjoint SM groups through
  green contexts, on CPU they share the cores as threads: runners/engine/partition.py) or to
  the remote prefill worker with the fewest outstanding tokens;
- prefill (`P<i>`, and each encode worker's local prefill): batches prompts up to a token
  budget, runs them, reports the first token, and hands the KV to the decode worker with the
  least KV reserved;
- decode (`D<i>`): continuous batching under a KV-token budget, one token per step per request,
  reports the last token.
Load counters live in shared arrays, so routing sees every worker's load without messages.
"""

from __future__ import annotations

import functools
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

from runners.engine.counters import Load
from runners.engine.messages import (
    EV_DONE,
    EV_ENCODED,
    EV_FIRST,
    EV_READY,
    EV_SPLIT,
    EV_STEP,
    STOP,
    Job,
)
from runners.engine.steplog import FLUSH, StepLog


def step_log(name: str, opts: dict, events: Any) -> StepLog:
    return StepLog(name, events, on=opts.get("record_steps", True))


def encoder_tokens(model: Any, payloads: list, embs: list) -> list[int]:
    """Each payload's encoder input tokens, for the step log: the model's token_counts when
    it has its own (the default one encodes again: then the embeddings' rows)."""
    from runners.model.base import ServingModel

    if type(model).token_counts is ServingModel.token_counts:
        return [int(e.shape[0]) for e in embs]
    return [int(model.token_counts(p)[0]) for p in payloads]


def handoff(log: StepLog, kind: str, job: Job, tokens: int, now: float) -> None:
    """An item's hand-off from its sender's put (job.stamps["sent"]) to this get."""
    sent = job.stamps.pop("sent", None)
    if sent is not None:
        log.add(kind, sent, now - sent, 1, tokens)


class Shared:
    """Counters every process reads: outstanding prefill tokens, reserved decode KV tokens
    (Load), and which workers are alive (written by the engine process only). No locks: a
    worker killed holding one would stop the others."""

    def __init__(self, ctx: Any, n_prefill: int, n_decode: int, names: list[str]):
        self.prefill_load = Load(ctx, len(names), n_prefill)
        self.decode_load = Load(ctx, len(names), n_decode)
        self.alive = ctx.Array("b", [1] * len(names), lock=False)
        self.names = names

    def writer(self, name: str) -> int:
        return self.names.index(name)

    def is_alive(self, name: str) -> bool:
        return bool(self.alive[self.names.index(name)])


def _least(load: Any, names: list[str], shared: Shared) -> int | None:
    best, idx = None, None
    for i, n in enumerate(names):
        if shared.is_alive(n) and (best is None or load[i] < best):
            best, idx = load[i], i
    return idx


def guarded(main: Any) -> Any:
    """A worker main that ends in one line, not a traceback: a worker that fails (or whose
    peers or frontend went away: broken pipes, closed queues) prints `worker NAME stopped:
    Type: message` on stderr and exits 1, which the frontend sees as a dead worker.
    HASTUNE_DEBUG=1 keeps the traceback."""

    @functools.wraps(main)
    def run(name: str, *args: Any) -> Any:
        try:
            return main(name, *args)
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("HASTUNE_DEBUG"):
                raise
            msg = str(exc).splitlines()[0] if str(exc) else ""
            print(f"worker {name} stopped: {type(exc).__name__}: {msg}", file=sys.stderr,
                  flush=True)
            sys.exit(1)

    return run


def _setup(opts: dict) -> Any:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:  # Ctrl-C reaches the whole process group: the frontend stops its workers itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        pass  # not the main thread (a Ray actor's task): Ray delivers no SIGINT there
    import torch

    torch.set_num_threads(opts.get("threads", 1))
    from runners.model import load_model

    return load_model(opts["model"], device=opts.get("device", "cpu"))


class _Prefill:
    """Prefill batching and the KV hand-off, shared by remote workers and local threads."""

    def __init__(self, model: Any, name: str, opts: dict, events: Any, decode_inboxes: list,
                 decode_names: list[str], shared: Shared, remote_index: int | None,
                 log: StepLog):
        self.model, self.name, self.events, self.log = model, name, events, log
        self.budget = opts.get("prefill_tokens", 2048)
        self.decode_inboxes, self.decode_names = decode_inboxes, decode_names
        self.shared, self.remote_index = shared, remote_index
        self.me = shared.writer(name)  # its row in the shared counters

    def tokens(self, job: Job) -> int:
        n = len(job.prompt)
        return n + (0 if job.embeddings is None else int(job.embeddings.shape[0]))

    def run(self, jobs: list[Job], share: float = 1.0, overlap: int = 0) -> None:
        t0 = time.monotonic()
        outs = self.model.prefill_batch([(j.prompt, j.embeddings) for j in jobs])
        t = time.monotonic()
        log = self.log
        if log.on:
            n = [self.tokens(j) for j in jobs]
            log.add("prefill", t0, t - t0, len(jobs), sum(n), 0, share, overlap,
                    sum(x * x for x in n))
        for job, (_first_token, handle) in zip(jobs, outs):
            if self.remote_index is not None:
                self.shared.prefill_load.free(self.remote_index, self.tokens(job))
            if job.max_tokens <= 1:
                self.model.free(handle)
                self.events.put((EV_FIRST, job.rid, self.name, t, None))
                self.events.put((EV_DONE, job.rid, self.name, t, 1))
                continue
            d = _least(self.shared.decode_load, self.decode_names, self.shared)
            if d is None:
                self.model.free(handle)
                self.events.put((EV_FIRST, job.rid, self.name, t, "-"))
                continue
            reserve = handle.length + job.max_tokens
            self.shared.decode_load.add(self.me, d, reserve)
            self.events.put((EV_FIRST, job.rid, self.name, t, self.decode_names[d]))
            t1 = time.monotonic()
            state = self.model.export_kv(handle)
            t2 = time.monotonic()
            log.add("kv_export", t1, t2 - t1, 1, handle.length)
            self.model.free(handle)
            job.embeddings = None
            job.stamps["sent"] = t2
            self.decode_inboxes[d].put((job, state, reserve))

    def take(self, first: Job, source: Any) -> list[Job]:
        """`first` plus whatever waits in `source` within the token budget."""
        batch, total = [first], self.tokens(first)
        self.received(first)
        while True:
            try:
                nxt = source.get_nowait()
            except queue.Empty:
                break
            if nxt == STOP or nxt == FLUSH:
                source.put(nxt)
                break
            if total + self.tokens(nxt) > self.budget:
                source.put(nxt)  # goes to the back: prompts may reorder at the budget edge
                break
            batch.append(nxt)
            total += self.tokens(nxt)
            self.received(nxt)
        return batch

    def received(self, job: Job) -> None:
        if "sent" in job.stamps:
            emb = 0 if job.embeddings is None else int(job.embeddings.shape[0])
            handoff(self.log, "handoff_emb", job, emb, time.monotonic())


@guarded
def prefill_main(name: str, index: int, opts: dict, inbox: Any, events: Any,
                 decode_inboxes: list, decode_names: list[str], shared: Shared) -> None:
    model = _setup(opts)
    log = step_log(name, opts, events)
    pf = _Prefill(model, name, opts, events, decode_inboxes, decode_names, shared, index, log)
    events.put((EV_READY, -1, name, time.monotonic(), None))
    while True:
        job = inbox.get()
        if job == STOP:
            return
        if job == FLUSH:
            log.send(final=True)
            continue
        pf.run(pf.take(job, inbox))


def encode_policies(opts: dict) -> Any:
    """The encode worker's batcher, router and partitioner (hastune.policies.encode, as the
    simulator builds them) from the deployment config it was sent: a plain dict, so that any
    backend can ship it, parsed here so that its knobs and defaults are the config's.
    `rate_hint`: the deployment's expected arrival rate (the batcher starts from its share
    per encode worker)."""
    from hastune.config import parse_config
    from hastune.policies.encode import policies_for

    return policies_for(parse_config(opts["config"]), opts["rate_hint"])


def _start_local_prefill(local: _Prefill, inbox: queue.Queue, part: Any,
                         name: str) -> threading.Thread:
    """The encode worker's co-resident local prefill: a thread that serves `inbox`, each batch
    on its side of the device split `part`."""
    def serve() -> None:
        while True:
            job = inbox.get()
            if job == STOP:
                return
            batch = local.take(job, inbox)
            with part.prefilling() as (share, overlap):
                local.run(batch, share, overlap)

    th = threading.Thread(target=serve, name=f"{name}-local-prefill", daemon=True)
    th.start()
    return th


@guarded
def encode_main(name: str, index: int, opts: dict, inbox: Any, events: Any,
                prefill_inboxes: list, prefill_names: list[str], decode_inboxes: list,
                decode_names: list[str], shared: Shared) -> None:
    from runners.engine.partition import DevicePartition

    model = _setup(opts)
    pol = encode_policies(opts)
    batcher, router = pol.batcher, pol.router
    import torch

    # encoder and local prefill: SM split (green contexts) on CUDA, threads on CPU
    part = DevicePartition.open(torch, opts.get("device", "cpu"), opts.get("threads", 1),
                                pol.partitioner, local_prefill=pol.local_prefill)
    local_q: queue.Queue = queue.Queue()
    local_thread: threading.Thread | None = None
    log = step_log(name, opts, events)  # the encoder's and its local prefill's steps
    if pol.local_prefill:
        local_thread = _start_local_prefill(
            _Prefill(model, name, opts, events, decode_inboxes, decode_names, shared, None,
                     log), local_q, part, name)
    events.put((EV_READY, -1, name, time.monotonic(), part.report()))

    me = shared.writer(name)  # its row in the shared counters

    def route(job: Job, t: float) -> None:
        remote = bool(prefill_names) and router.route()
        p = _least(shared.prefill_load, prefill_names, shared) if remote else None
        if p is None and not pol.local_prefill:
            events.put((EV_ENCODED, job.rid, name, t, "-"))  # no remote prefill left
            return
        if p is None:
            events.put((EV_ENCODED, job.rid, name, t, name))
            local_q.put(job)
            return
        n = len(job.prompt) + (0 if job.embeddings is None else int(job.embeddings.shape[0]))
        shared.prefill_load.add(me, p, n)
        events.put((EV_ENCODED, job.rid, name, t, prefill_names[p]))
        job.stamps["sent"] = time.monotonic()
        prefill_inboxes[p].put(job)

    def encode(batch: list[Job]) -> None:
        with part.encoding(len(batch)) as (share, overlap):
            payloads = [model.example_payload(j.modality, j.payload_size, seed=j.rid)
                        for j in batch]
            t0 = time.monotonic()
            embs = model.encode(payloads)
        t = time.monotonic()
        if log.on:
            x = encoder_tokens(model, payloads, embs)
            log.add("encode", t0, t - t0, len(batch), sum(x), 0, share, overlap,
                    sum(v * v for v in x))
        events.put((EV_SPLIT, -1, name, t, part.report()))  # shares and counts so far
        for j, e in zip(batch, embs):
            j.embeddings = e
            route(j, t)

    while True:
        d = batcher.deadline()
        timeout = None if d is None else max(0.0, d - time.monotonic())
        try:
            job = inbox.get(timeout=timeout)
        except queue.Empty:
            batch = batcher.poll(time.monotonic())
            if batch:
                encode(batch)
            continue
        if job == STOP:
            local_q.put(STOP)
            if local_thread is not None:
                local_thread.join(timeout=10)
            return
        if job == FLUSH:
            log.send(final=True)
            continue
        now = time.monotonic()
        if job.modality is None:
            route(job, now)
            continue
        batch = batcher.add(now, job)
        if batch:
            encode(batch)


@guarded
def decode_main(name: str, index: int, opts: dict, inbox: Any, events: Any,
                shared: Shared) -> None:
    model = _setup(opts)
    log = step_log(name, opts, events)
    budget = opts.get("kv_tokens", 1 << 20)
    max_batch = opts.get("max_batch", 64)
    events.put((EV_READY, -1, name, time.monotonic(), None))
    pending: deque = deque()
    running: list[list[Any]] = []  # [job, handle, tokens left, tokens made, reserve]
    reserved = 0
    steps, model_s, loop_s = 0, 0.0, 0.0
    while True:
        it0 = time.monotonic()  # scheduling + hand-off (import_kv) count as engine overhead
        try:
            msg = inbox.get() if not running and not pending else inbox.get_nowait()
        except queue.Empty:
            msg = None
        while msg is not None:
            if msg == STOP:
                return
            if msg == FLUSH:
                log.send(final=True)
            else:
                handoff(log, "handoff_kv", msg[0], msg[1].length, time.monotonic())
                pending.append(msg)
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                msg = None
        while pending and len(running) < max_batch and reserved + pending[0][2] <= budget:
            job, state, reserve = pending.popleft()
            ti = time.monotonic()
            handle = model.import_kv(state)
            log.add("kv_import", ti, time.monotonic() - ti, 1, state.length)
            running.append([job, handle, job.max_tokens - 1, 1, reserve])
            reserved += reserve
        if not running:
            continue
        t0 = time.monotonic()
        if t0 - it0 > 0.05:  # it blocked waiting for work: that is idle time, not overhead
            it0 = t0
        handles = [r[1] for r in running]
        ctx = sum(h.length for h in handles)
        t0 = time.monotonic()
        model.decode_step(handles)
        t1 = time.monotonic()
        log.add("decode", t0, t1 - t0, len(handles), len(handles), ctx)
        keep = []
        for r in running:
            r[2] -= 1
            r[3] += 1
            if r[2] <= 0:
                model.free(r[1])
                reserved -= r[4]
                shared.decode_load.free(index, r[4])
                events.put((EV_DONE, r[0].rid, name, t1, r[3]))
            else:
                keep.append(r)
        running = keep
        steps += 1
        model_s += t1 - t0
        loop_s += time.monotonic() - it0
        if steps % 50 == 0:
            events.put((EV_STEP, -1, name, t1, (model_s, loop_s - model_s, steps)))
