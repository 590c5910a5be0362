"""Replica workers of the engine's `continuous` and `windowed` modes. Each process holds one
full model (tp = pp = 1) and runs encode, prefill and decode itself, so no KV ever leaves it.

- continuous (`R<i>`, vLLM / Sarathi): continuous batching. A request waits FIFO until its KV
  (prompt + output, reserved up front) and a batch seat are free. With `chunk_tokens` = T every
  iteration decodes each running request once and fills the rest of the T-token budget with
  prefill chunks (FIFO; a request's payload is encoded inline in the iteration that carries
  its first chunk); without, waiting prompts run as prefill-only iterations (up to the
  `prefill_tokens` budget) while decoding pauses. Tokens are stamped at the end of the
  iteration that made them; a finished prompt joins the decode batch at the next iteration.
- windowed (`I<i>`, EcoServe): alternates prefill windows and decode windows. A request the
  scheduler hands over while the instance decodes opens a window at the next step boundary;
  the window prefills (batches up to `prefill_tokens`, encode inline) whatever it has been
  given, for as long as requests keep coming, and closes when nothing is left: its requests
  get their first token then (TTFT includes the phase switch) and join the decode batch.

Each replica writes its state into a shared `Status` row (phase, decode steps, last step
boundary, statistics) that the frontend's scheduler and the tests read without messages.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from typing import Any

from hastune.policies import IterationScheduler
from runners.engine.messages import (
    EV_DONE,
    EV_FAILED,
    EV_FIRST,
    EV_PREFILLED,
    EV_READY,
    EV_STEP,
    EV_WINDOW,
    STOP,
)
from runners.engine.steplog import FLUSH
from runners.engine.workers import _setup, encoder_tokens, guarded, step_log

MODALITIES = ("image", "video", "audio")
FIELDS = (
    "phase", "win_start", "steps", "boundary", "step_s", "running", "cap", "block",  # read by
    # the scheduler
    "cost_a", "cost_b",                  # profiled prefill seconds: a + b × tokens
    *(f"llm_{m}" for m in MODALITIES),   # LLM tokens of the default payload (−1: none)
    *(f"enc_{m}" for m in MODALITIES),   # its encode seconds
    "iterations", "mixed", "prefill_only", "max_iter_tokens", "max_prefill_tokens",
    "max_decode_gap_s", "max_decode_wait_tokens", "max_iter_s", "decode_steps", "chunked",
    "windows", "window_reqs",
)
COL = {f: i for i, f in enumerate(FIELDS)}
DECODE, PREFILL = 0.0, 2.0


class Status:
    """One row of doubles per replica in shared memory: the replica writes, others read."""

    def __init__(self, ctx: Any, n: int):
        self.arr = ctx.Array("d", n * len(FIELDS), lock=False)

    def get(self, i: int, field: str) -> float:
        return self.arr[i * len(FIELDS) + COL[field]]

    def set(self, i: int, field: str, value: float) -> None:
        self.arr[i * len(FIELDS) + COL[field]] = value

    def row(self, i: int) -> dict[str, float]:
        base = i * len(FIELDS)
        return {f: self.arr[base + k] for k, f in enumerate(FIELDS)}


def kv_capacity(model: Any, opts: dict) -> tuple[int, int]:
    """(KV tokens a replica may reserve, the block size reservations round up to)."""
    cap, bs = int(opts.get("kv_tokens", 1 << 16)), 1
    pool = getattr(model, "pool", None)
    if pool is not None:
        cap, bs = min(cap, int(pool.capacity_tokens)), int(pool.block_size)
    return cap, bs


class _Req:
    """A request inside a replica: its payload, token counts, KV handle and progress."""

    __slots__ = ("job", "payload", "emb", "total", "need", "handle", "done", "left", "made")

    def __init__(self, job: Any, model: Any, block: int):
        self.job = job
        self.payload = self.emb = self.handle = None
        llm = 0
        if job.modality is not None:
            self.payload = model.example_payload(job.modality, job.payload_size, seed=job.rid)
            llm = int(model.token_counts(self.payload)[1])
        self.total = len(job.prompt) + llm                          # prompt positions
        self.need = -(-(self.total + job.max_tokens) // block) * block  # KV reserved
        self.done = 0                                               # positions prefilled
        self.left = job.max_tokens - 1                              # decode steps to go
        self.made = 1                                               # tokens generated


def _drain(inbox: Any, block: bool) -> list:
    out = [inbox.get()] if block else []
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out


def _encode(model: Any, reqs: list[_Req], log: Any) -> float:
    """Encode the payloads of `reqs` in one batch (inline: the replica's own encoder); the
    seconds it took (0 when there was nothing to encode)."""
    mm = [r for r in reqs if r.payload is not None and r.emb is None]
    if not mm:
        return 0.0
    t0 = time.monotonic()
    embs = model.encode([r.payload for r in mm])
    dur = time.monotonic() - t0
    if log.on:
        x = encoder_tokens(model, [r.payload for r in mm], embs)
        log.add("encode", t0, dur, len(mm), sum(x), sq=sum(v * v for v in x))
    for r, e in zip(mm, embs):
        r.emb = e
        r.payload = None
    return dur


def _context(reqs: list[_Req]) -> int:
    return sum(r.handle.length for r in reqs)


class _Replica:
    """What both modes share: the model, the decode batch, reporting."""

    def __init__(self, name: str, index: int, opts: dict, events: Any, status: Status):
        self.model = _setup(opts)
        self.name, self.i, self.events, self.st = name, index, events, status
        self.log = step_log(name, opts, events)
        self.cfg = opts["config"]
        self.cap, self.block = kv_capacity(self.model, opts)
        self.pf_budget = int(opts.get("prefill_tokens", 2048))
        self.max_batch = int(opts.get("max_batch", 64))
        self.running: list[_Req] = []
        self.steps = 0
        self.model_s = self.loop_s = 0.0
        self.iters = 0
        status.set(index, "cap", self.cap)
        status.set(index, "block", self.block)

    def ready(self) -> None:
        self.events.put((EV_READY, -1, self.name, time.monotonic(), None))

    def stat_max(self, field: str, value: float) -> None:
        if value > self.st.get(self.i, field):
            self.st.set(self.i, field, value)

    def bump(self, field: str, by: float = 1.0) -> None:
        self.st.set(self.i, field, self.st.get(self.i, field) + by)

    def first(self, reqs: list[_Req], t: float) -> list[_Req]:
        """Report the first token of `reqs` at t; those with more to make join the batch."""
        for r in reqs:
            self.events.put((EV_FIRST, r.job.rid, self.name, t, self.name))
            if r.left <= 0:
                self.finish(r, t)
            else:
                self.running.append(r)
        return reqs

    def finish(self, r: _Req, t: float) -> None:
        self.model.free(r.handle)
        r.handle = None
        self.events.put((EV_DONE, r.job.rid, self.name, t, r.made))

    def decode(self, reqs: list[_Req], t: float) -> list[_Req]:
        """Book one decode step of `reqs` (already run) ending at t; the finished ones."""
        out = []
        keep = []
        for r in reqs:
            r.left -= 1
            r.made += 1
            if r.left <= 0:
                self.finish(r, t)
                out.append(r)
            else:
                keep.append(r)
        ids = {id(r) for r in out}
        self.running = [r for r in self.running if id(r) not in ids]
        self.steps += 1
        self.st.set(self.i, "decode_steps", self.steps)
        return out

    def tick(self, it0: float, model_s: float) -> None:
        """Account one iteration (model time vs the rest) and sample it like decode workers."""
        self.iters += 1
        self.model_s += model_s
        self.loop_s += time.monotonic() - it0
        self.st.set(self.i, "iterations", self.iters)
        if self.iters % 50 == 0:
            self.events.put((EV_STEP, -1, self.name, time.monotonic(),
                             (self.model_s, max(0.0, self.loop_s - self.model_s), self.iters)))


@guarded
def continuous_main(name: str, index: int, opts: dict, inbox: Any, events: Any,
              status: Status) -> None:
    from runners.model.base import ServingModel

    rp = _Replica(name, index, opts, events, status)
    model = rp.model
    chunk = rp.cfg.get("chunk_tokens")
    if chunk and type(model).prefill_chunk is ServingModel.prefill_chunk:
        chunk = None  # the model cannot continue a prompt: whole prompts (status says so)
    status.set(index, "chunked", 1.0 if chunk else 0.0)
    rp.ready()
    # FIFO admission under seats and KV, and each iteration's prefill chunks (hastune.policies,
    # the simulator's rules): waiting → prefilling → rp.running
    sched = IterationScheduler(rp.max_batch, rp.cap, chunk or None, rp.pf_budget)
    running_kv = 0                   # KV reserved by rp.running
    last_dec: float | None = None    # when the decode batch last made a token
    waited = 0                       # prefill tokens run since then
    while True:
        for msg in _drain(inbox, block=not (sched.waiting or sched.prefilling or rp.running)):
            if msg == STOP:
                return
            if msg == FLUSH:
                rp.log.send(final=True)
                continue
            r = _Req(msg, model, rp.block)
            if not sched.add(r):
                events.put((EV_FAILED, msg.rid, name, time.monotonic(),
                            f"needs {r.need} KV tokens; replica {name} holds {rp.cap}"))
        sched.admit(len(rp.running), running_kv)
        if not sched.prefilling and not rp.running:
            continue
        it0 = t0 = time.monotonic()
        dec = list(rp.running)
        plan, ptok, _ = sched.plan(len(dec)) if sched.prefilling else ([], 0, 0.0)
        ptok = int(ptok)
        ctx = _context(dec) if dec else 0
        enc_s = 0.0
        if chunk:
            fresh = [r for r, c in plan if r.done == c]  # starting their prompt
            enc_s = _encode(model, fresh, rp.log)
            for r in fresh:
                r.handle = model.begin_prefill(r.job.prompt, r.emb)
                r.emb = None
            if dec:
                model.decode_step([r.handle for r in dec])
            for r, c in plan:
                model.prefill_chunk(r.handle, int(c))
        elif plan:  # a prefill-only iteration: decoding pauses
            dec = []
            batch = [r for r, _ in plan]
            enc_s = _encode(model, batch, rp.log)
            outs = model.prefill_batch([(r.job.prompt, r.emb) for r in batch])
            for r, (_tok, h) in zip(batch, outs):
                r.handle, r.emb = h, None
        else:
            model.decode_step([r.handle for r in dec])
        t1 = time.monotonic()
        # the iteration without its encode: decode, mixed (decode + chunks) or prefill
        kind = ("mixed" if dec else "prefill") if ptok else "decode"
        rp.log.add(kind, t0, t1 - t0 - enc_s, len(plan) if kind == "prefill" else len(dec),
                   ptok if ptok else len(dec), ctx, sq=sum(int(c) ** 2 for _, c in plan))
        joined = sched.pop_done()
        if dec:  # how long the batch waited for this step: seconds, and prefill tokens
            for r in rp.decode(dec, t1):
                running_kv -= r.need
            if last_dec is not None:
                rp.stat_max("max_decode_gap_s", t1 - last_dec)
                rp.stat_max("max_decode_wait_tokens", waited + ptok)
            waited = 0
        elif rp.running:  # a prefill-only iteration stalled the decoding requests
            waited += ptok
        for r in rp.first(joined, t1):
            if r.left > 0:
                running_kv += r.need
        if not rp.running:
            last_dec, waited = None, 0
        elif dec or last_dec is None:
            last_dec = t1
        if ptok:
            rp.bump("mixed" if dec else "prefill_only")
            rp.stat_max("max_prefill_tokens", ptok)
        rp.stat_max("max_iter_tokens", len(dec) + ptok)
        rp.stat_max("max_iter_s", t1 - t0)
        status.set(index, "running", len(rp.running))
        rp.tick(it0, t1 - t0)


def _calibrate(model: Any) -> tuple[float, float, dict[str, tuple[int, float]]]:
    """Profiled prefill cost (a + b × tokens seconds, best of 3 at 16 and 128 tokens) and each
    modality's default payload: (LLM tokens, encode seconds). The scheduler's estimates."""

    def best(f: Any) -> float:
        out = []
        for _ in range(3):
            t = time.perf_counter()
            f()
            out.append(time.perf_counter() - t)
        return min(out)

    def prefill(n: int) -> None:
        for _tok, h in model.prefill_batch([([1] * n, None)]):
            model.free(h)

    prefill(16)  # warm up
    t16, t128 = best(lambda: prefill(16)), best(lambda: prefill(128))
    b = max((t128 - t16) / 112, 1e-9)
    a = max(t16 - 16 * b, 0.0)
    enc: dict[str, tuple[int, float]] = {}
    for m in MODALITIES:
        try:
            p = model.example_payload(m)
        except (NotImplementedError, ValueError):
            continue
        model.encode([p])
        e = model.encode([p])[0]
        enc[m] = (int(e.shape[0]), best(lambda p=p: model.encode([p])))
    return a, b, enc


@guarded
def windowed_main(name: str, index: int, opts: dict, inbox: Any, events: Any,
              status: Status) -> None:
    rp = _Replica(name, index, opts, events, status)
    model = rp.model
    a, b, enc = _calibrate(model)
    status.set(index, "cost_a", a)
    status.set(index, "cost_b", b)
    for m in MODALITIES:
        llm, s = enc.get(m, (-1, 0.0))
        status.set(index, f"llm_{m}", llm)
        status.set(index, f"enc_{m}", s)
    status.set(index, "phase", DECODE)
    rp.ready()
    given: deque[_Req] = deque()   # handed over by the scheduler, prefill not run yet
    window: list[_Req] = []        # prefilled in the open window, awaiting the switch
    opened = 0.0
    phase = DECODE
    while True:
        for msg in _drain(inbox, block=not (given or window or rp.running)):
            if msg == STOP:
                return
            if msg == FLUSH:
                rp.log.send(final=True)
                continue
            given.append(_Req(msg, model, rp.block))
        it0 = t0 = time.monotonic()
        if given:  # open the window (we are at a step boundary) or keep it open
            if phase == DECODE:
                phase, opened = PREFILL, t0
                status.set(index, "win_start", opened)
                status.set(index, "phase", PREFILL)
                rp.bump("windows")
            batch = [given.popleft()]
            tok = batch[0].total
            while given and tok + given[0].total <= rp.pf_budget:
                tok += given[0].total
                batch.append(given.popleft())
            enc_s = _encode(model, batch, rp.log)
            outs = model.prefill_batch([(r.job.prompt, r.emb) for r in batch])
            t1 = time.monotonic()
            rp.log.add("prefill", t0, t1 - t0 - enc_s, len(batch), tok,
                       sq=sum(r.total ** 2 for r in batch))
            for r, (_tok, h) in zip(batch, outs):
                r.handle, r.emb, r.done = h, None, r.total
            window += batch
            events.put((EV_PREFILLED, -1, name, t1, ([r.job.rid for r in batch], t1 - t0,
                                                     [r.total for r in batch])))
            rp.stat_max("max_prefill_tokens", tok)
        elif phase == PREFILL:  # nothing left to prefill: the window closes
            t1 = time.monotonic()
            events.put((EV_WINDOW, -1, name, t1, (opened, rp.steps,
                                                  [r.job.rid for r in window])))
            rp.bump("window_reqs", len(window))
            rp.first(window, t1)
            window = []
            phase = DECODE
            status.set(index, "boundary", t1)
            status.set(index, "running", len(rp.running))
            status.set(index, "phase", DECODE)
            continue
        else:
            dec = list(rp.running)
            ctx = _context(dec)
            t0 = time.monotonic()
            model.decode_step([r.handle for r in dec])
            t1 = time.monotonic()
            rp.log.add("decode", t0, t1 - t0, len(dec), len(dec), ctx)
            rp.decode(dec, t1)
            status.set(index, "steps", rp.steps)
            status.set(index, "step_s", t1 - t0)
            status.set(index, "boundary", t1)
            status.set(index, "running", len(rp.running))
        rp.stat_max("max_iter_s", t1 - t0)
        rp.tick(it0, t1 - t0)
