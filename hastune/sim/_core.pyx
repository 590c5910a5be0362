# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=False, nonecheck=False, infer_types=False
"""The compiled core of one encode/prefill/decode run (issue 34): the event loop of
hastune.sim.epd._EPDRun and its workers — encode (micro-batcher, SM share), prefill (local
and remote), decode (reserved or paged KV), the network and the deficit router — in C
structures, one event heap of C records, the per-request numbers in C arrays.

It is the same simulation as the Python one (hastune/sim/epd.py with hastune/sim/decode.py,
decode_paged.py, prefill.py, encode.py, network.py and hastune/policies), which stays as the
reference: every arithmetic operation is the Python one, in the same order, on the same IEEE
doubles (no fast math, no contraction: setup.py builds with -ffp-contract=off), and the events
come out in the same (time, priority, push order). tests/sim/test_core.py runs both on
generated recipes and configurations and requires identical first- and last-token times.

`run(epd_run)` takes an `_EPDRun` built by the Python code (its workers, policies and lists),
runs it, and writes back what its `result` reads. The stop rule's checks (EventLoop.checkpoint)
are the Python ones, called at the same arrival counts. `run_fudg` and `run_nodg` do the same
for open-loop fudg runs (hastune.sim.fudg.FuDGRun) and open-loop nodg runs without batch
waiting, with KV on demand (hastune.sim.nodg.paged.PagedRun) or reserved (hastune.sim.nodg.run.Run,
as with `ahead` off), on the same loop (`Loop`) and decode heap (`Decode`)."""

from libc.math cimport ceil, sqrt, fmod, floor, copysign, INFINITY
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memset

import numpy as np

from hastune.sim.events import SimulationError

cdef extern from *:
    """
    #ifndef HASTUNE_CORE_SHA
    #define HASTUNE_CORE_SHA ""
    #endif
    """
    const char* HASTUNE_CORE_SHA

# sha256 of the _core.pyx this module was compiled from (setup.py; "" if built otherwise)
BUILT_FROM = HASTUNE_CORE_SHA.decode()

# hastune.sim.fudg.LOCAL_SLACK (the same value: tests/sim/test_core.py reads both)
cdef double LOCAL_SLACK = 1.0
FUDG_LOCAL_SLACK = LOCAL_SLACK

cdef enum:
    PRIO_DONE = 0
    PRIO_ARRIVE = 1
    PRIO_TIMER = 2

cdef enum Kind:
    K_ENC_DONE = 1
    K_TIMER = 2
    K_PF_ARRIVE = 3
    K_PF_DONE = 4
    K_D_ARRIVE = 5
    K_D_WAKE = 6


# ---------------------------------------------------------------------------------------
# the event heap: records ordered by (t, prio, seq), as the Python heap's tuples (seq unique)

cdef struct Ev:
    double t
    int prio
    long long seq
    int kind
    int obj
    long long a

cdef inline bint ev_lt(Ev* x, Ev* y) nogil:
    if x.t != y.t:
        return x.t < y.t
    if x.prio != y.prio:
        return x.prio < y.prio
    return x.seq < y.seq


cdef class Heap:
    cdef Ev* v
    cdef Py_ssize_t n, cap
    cdef long long seq

    def __cinit__(self):
        self.cap = 1024
        self.n = 0
        self.seq = 0
        self.v = <Ev*>malloc(self.cap * sizeof(Ev))
        if self.v == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.v)

    cdef int push(self, double t, int prio, int kind, int obj, long long a) except -1:
        cdef Ev* nv
        cdef Py_ssize_t i, p
        cdef Ev e
        if self.n == self.cap:
            nv = <Ev*>realloc(self.v, 2 * self.cap * sizeof(Ev))
            if nv == NULL:
                raise MemoryError()
            self.v = nv
            self.cap *= 2
        e.t = t
        e.prio = prio
        e.seq = self.seq
        self.seq += 1
        e.kind = kind
        e.obj = obj
        e.a = a
        i = self.n
        self.n += 1
        while i > 0:
            p = (i - 1) >> 1
            if ev_lt(&e, &self.v[p]):
                self.v[i] = self.v[p]
                i = p
            else:
                break
        self.v[i] = e
        return 0

    cdef Ev pop(self):
        cdef Ev top = self.v[0]
        cdef Ev last
        cdef Py_ssize_t i, c, n
        self.n -= 1
        n = self.n
        if n > 0:
            last = self.v[n]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= n:
                    break
                if c + 1 < n and ev_lt(&self.v[c + 1], &self.v[c]):
                    c += 1
                if ev_lt(&self.v[c], &last):
                    self.v[i] = self.v[c]
                    i = c
                else:
                    break
            self.v[i] = last
        return top


# ---------------------------------------------------------------------------------------
# the network (hastune.sim.network.Network; Remapped through `ids`)

cdef inline double max3(double a, double b, double c):
    """Python's max(a, b, c): the first of equals."""
    if b > a:
        a = b
    if c > a:
        a = c
    return a


cdef class Net:
    cdef long long per_node
    cdef double intra_bw, intra_lat, inter_bw, inter_lat, bytes_moved, busy_s
    cdef double* gpu_free
    cdef double* nic_free
    cdef double* gpu_in             # duplex (hastune.sim.links.DuplexNetwork): receive ports
    cdef bint duplex
    cdef long long* ids
    cdef Py_ssize_t n_gpu, n_nic, n_ids
    cdef object py

    def __dealloc__(self):
        free(self.gpu_free)
        free(self.nic_free)
        free(self.gpu_in)
        free(self.ids)

    cdef void setup(self, object net) except *:
        cdef Py_ssize_t i
        inner = net
        ids = None
        if not hasattr(net, "gpu_free"):  # Remapped
            inner, ids = net.net, net.ids
        self.py = inner
        self.per_node = inner.per_node
        self.intra_bw, self.intra_lat = inner.intra_bw, inner.intra_lat
        self.inter_bw, self.inter_lat = inner.inter_bw, inner.inter_lat
        self.bytes_moved, self.busy_s = inner.bytes_moved, inner.busy_s
        self.n_gpu = len(inner.gpu_free)
        self.n_nic = len(inner.nic_free)
        self.gpu_free = <double*>malloc(max(self.n_gpu, 1) * sizeof(double))
        self.nic_free = <double*>malloc(max(self.n_nic, 1) * sizeof(double))
        for i in range(self.n_gpu):
            self.gpu_free[i] = inner.gpu_free[i]
        for i in range(self.n_nic):
            self.nic_free[i] = inner.nic_free[i]
        self.duplex = hasattr(inner, "gpu_in")
        if self.duplex:
            self.gpu_in = <double*>malloc(max(self.n_gpu, 1) * sizeof(double))
            for i in range(self.n_gpu):
                self.gpu_in[i] = inner.gpu_in[i]
        if ids is not None:
            self.n_ids = len(ids)
            self.ids = <long long*>malloc(max(self.n_ids, 1) * sizeof(long long))
            for i in range(self.n_ids):
                self.ids[i] = ids[i]

    cdef void write_back(self):
        cdef Py_ssize_t i
        py = self.py
        py.bytes_moved = self.bytes_moved
        py.busy_s = self.busy_s
        for i in range(self.n_gpu):
            py.gpu_free[i] = self.gpu_free[i]
        for i in range(self.n_nic):
            py.nic_free[i] = self.nic_free[i]
        if self.duplex:
            for i in range(self.n_gpu):
                py.gpu_in[i] = self.gpu_in[i]

    cdef double transfer(self, long long src, long long dst, double nbytes, double t) except? -1.0:
        cdef long long sn, dn
        cdef double start, dur
        if self.ids != NULL:
            src = self.ids[src]
            dst = self.ids[dst]
        if src == dst or nbytes <= 0:
            return t
        self.bytes_moved += nbytes
        sn = src // self.per_node
        dn = dst // self.per_node
        if sn == dn:
            if self.duplex:  # DuplexNetwork: max(t, out[src], inn[dst]), both ports busy
                start = max3(t, self.gpu_free[src], self.gpu_in[dst])
            else:
                start = t if t > self.gpu_free[src] else self.gpu_free[src]
            dur = nbytes / self.intra_bw
            self.gpu_free[src] = start + dur
            if self.duplex:
                self.gpu_in[dst] = start + dur
            self.busy_s += dur
            return start + dur + self.intra_lat
        start = max3(t, self.nic_free[sn], self.nic_free[dn])
        dur = nbytes / self.inter_bw
        self.nic_free[sn] = start + dur
        self.nic_free[dn] = start + dur
        self.busy_s += dur
        return start + dur + self.inter_lat


# ---------------------------------------------------------------------------------------
# prefill workers (hastune.sim.prefill.PrefillWorker)

cdef class Prefill:
    cdef object py
    cdef dict rates
    cdef long long gpu, version, batches, kv_links
    cdef double remaining, rate, share, last_t, outstanding, sm_busy_s, fixed, per_tok, per_sq
    cdef double max_tokens, due, planned, kv_bytes
    cdef bint busy
    # the queue: a ring of (request, tokens)
    cdef long long* q_req
    cdef double* q_tok
    cdef Py_ssize_t q_head, q_len, q_cap
    # the running batch
    cdef long long* b_req
    cdef Py_ssize_t b_len, b_cap

    def __dealloc__(self):
        free(self.q_req)
        free(self.q_tok)
        free(self.b_req)

    cdef void setup(self, object w) except *:
        cdef Py_ssize_t i
        self.py = w
        self.rates = {}
        self.gpu = w.gpu
        self.version = w.version
        self.batches = w.batches
        self.kv_links = w.kv_links
        self.remaining, self.rate, self.share = w.remaining, w.rate, w.share
        self.last_t, self.outstanding, self.sm_busy_s = w.last_t, w.outstanding, w.sm_busy_s
        self.fixed, self.per_tok, self.per_sq = w.fixed, w.per_tok, w.per_sq
        self.max_tokens, self.due, self.planned = w.max_tokens, w.due, w.planned
        self.kv_bytes = w.kv_bytes
        if w.batch is not None or w.queue:
            raise ValueError("the compiled core starts from idle prefill workers")
        self.busy = False
        self.q_cap = 64
        self.q_head = self.q_len = 0
        self.q_req = <long long*>malloc(self.q_cap * sizeof(long long))
        self.q_tok = <double*>malloc(self.q_cap * sizeof(double))
        self.b_cap = 64
        self.b_len = 0
        self.b_req = <long long*>malloc(self.b_cap * sizeof(long long))

    cdef void write_back(self):
        w = self.py
        w.version, w.batches = self.version, self.batches
        w.remaining, w.rate, w.share = self.remaining, self.rate, self.share
        w.last_t, w.outstanding, w.sm_busy_s = self.last_t, self.outstanding, self.sm_busy_s
        w.due, w.planned = self.due, self.planned

    cdef int enqueue(self, long long r, double tok) except -1:
        cdef Py_ssize_t i, k, old
        cdef long long* nr
        cdef double* nt
        if self.q_len == self.q_cap:
            old = self.q_cap
            nr = <long long*>malloc(2 * old * sizeof(long long))
            nt = <double*>malloc(2 * old * sizeof(double))
            if nr == NULL or nt == NULL:
                raise MemoryError()
            for i in range(self.q_len):
                k = (self.q_head + i) % old
                nr[i] = self.q_req[k]
                nt[i] = self.q_tok[k]
            free(self.q_req)
            free(self.q_tok)
            self.q_req, self.q_tok = nr, nt
            self.q_head = 0
            self.q_cap = 2 * old
        k = (self.q_head + self.q_len) % self.q_cap
        self.q_req[k] = r
        self.q_tok[k] = tok
        self.q_len += 1
        return 0

    cdef int add_to_batch(self, long long r) except -1:
        if self.b_len == self.b_cap:
            self.b_cap *= 2
            self.b_req = <long long*>realloc(self.b_req, self.b_cap * sizeof(long long))
            if self.b_req == NULL:
                raise MemoryError()
        self.b_req[self.b_len] = r
        self.b_len += 1
        return 0

    cdef double start(self, double t) except? -2.0:
        """PrefillWorker.start; -1.0 for None (times are never negative)."""
        cdef double total, sq, tok
        cdef long long req
        if self.busy or self.q_len == 0:
            return -1.0
        req = self.q_req[self.q_head]
        tok = self.q_tok[self.q_head]
        self.q_head = (self.q_head + 1) % self.q_cap
        self.q_len -= 1
        self.b_len = 0
        self.add_to_batch(req)
        total = tok
        sq = tok * tok
        while self.q_len and total + self.q_tok[self.q_head] <= self.max_tokens:
            req = self.q_req[self.q_head]
            tok = self.q_tok[self.q_head]
            self.q_head = (self.q_head + 1) % self.q_cap
            self.q_len -= 1
            self.add_to_batch(req)
            total += tok
            sq += tok * tok
        self.busy = True
        self.batches += 1
        self.remaining = self.fixed + self.per_tok * total + self.per_sq * sq
        self.last_t = t
        self.version += 1
        self.due = t + self.remaining / self.rate
        self.planned = self.due
        return self.due

    cdef void finish(self, double t):
        self.sm_busy_s += self.share * (t - self.last_t)
        self.busy = False

    cdef double set_share(self, double t, double share, double new_rate):
        """PrefillWorker.set_share with rate_at(share) given; -1.0 for None."""
        cdef double dt
        if share == self.share:
            return -1.0
        if not self.busy:
            self.share = share
            self.rate = new_rate
            return -1.0
        dt = t - self.last_t
        self.remaining -= dt * self.rate
        if self.remaining < 0.0:
            self.remaining = 0.0
        self.sm_busy_s += self.share * dt
        self.share = share
        self.rate = new_rate
        self.last_t = t
        self.due = t + self.remaining / self.rate
        if self.due >= self.planned:
            return -1.0
        self.version += 1
        self.planned = self.due
        return self.due


# ---------------------------------------------------------------------------------------
# encode workers (hastune.sim.encode.EncodeWorker) with their micro-batchers
# (hastune.policies.batcher: PoissonGapBatcher, TimeoutBatcher)

cdef class Encode:
    cdef object py, bt, queue, batch, shares, items
    cdef long long gpu, batches, timer_ver, local
    cdef int idx
    cdef double fixed, per_item, per_tok, per_sq, share, started, sm_busy_s, timer_at
    cdef bint has_timer
    cdef double idle_share
    # the batcher
    cdef bint poisson
    cdef long long B
    cdef double kappa, mean_gap, alpha, max_gap, last_t, timeout, first_t
    cdef bint has_last

    cdef void setup(self, object ew, long long local_index) except *:
        self.py = ew
        self.gpu = ew.gpu
        self.batches, self.timer_ver = ew.batches, ew.timer_ver
        self.fixed, self.per_item, self.per_tok, self.per_sq = (ew.fixed, ew.per_item,
                                                                 ew.per_tok, ew.per_sq)
        self.share, self.started, self.sm_busy_s = ew.share, ew.started, ew.sm_busy_s
        self.has_timer = ew.timer_at is not None
        self.timer_at = ew.timer_at if self.has_timer else 0.0
        self.queue = ew.queue
        self.batch = ew.batch
        self.shares = {}
        self.local = local_index
        part = ew.partitioner
        self.idle_share = part.idle_prefill_share if part is not None else 1.0
        bt = ew.batcher
        self.bt = bt
        self.items = bt.items
        if hasattr(bt, "kappa"):
            self.poisson = True
            self.B = bt.B
            self.kappa, self.mean_gap, self.alpha, self.max_gap = (bt.kappa, bt.mean_gap,
                                                                   bt.alpha, bt.max_gap)
            self.has_last = bt.last_t is not None
            self.last_t = bt.last_t if self.has_last else 0.0
        else:
            self.poisson = False
            self.B = bt.batch
            self.timeout = bt.timeout
            self.first_t = bt.first_t

    cdef void write_back(self):
        ew = self.py
        ew.batches, ew.timer_ver = self.batches, self.timer_ver
        ew.share, ew.started, ew.sm_busy_s = self.share, self.started, self.sm_busy_s
        ew.timer_at = self.timer_at if self.has_timer else None
        ew.batch = self.batch
        bt = self.bt
        bt.items = self.items
        if self.poisson:
            bt.mean_gap = self.mean_gap
            bt.last_t = self.last_t if self.has_last else None
        else:
            bt.first_t = self.first_t

    # -- the batcher --------------------------------------------------------------------
    cdef object add(self, double t, long long r):
        """batcher.add: the batch (a list) that leaves now, or None."""
        cdef list items
        if self.poisson:
            if self.has_last:
                self.mean_gap += self.alpha * ((t - self.last_t) - self.mean_gap)
                if self.mean_gap <= 1e-12:
                    self.mean_gap = 1e-12
            self.last_t = t
            self.has_last = True
            items = self.items
            items.append(r)
            if len(items) >= self.B:
                self.items = []
                return items
            return None
        items = self.items
        if not items:
            self.first_t = t
        items.append(r)
        if len(items) >= self.B or self.timeout == 0:
            self.items = []
            return items
        return None

    cdef double deadline(self):
        """batcher.deadline; -1.0 for None."""
        cdef double g
        if not self.items:
            return -1.0
        if self.poisson:
            g = self.kappa * self.mean_gap
            return self.last_t + (g if g < self.max_gap else self.max_gap)
        return self.first_t + self.timeout

    cdef object poll(self, double t):
        cdef double d = self.deadline()
        cdef list out
        if d != -1.0 and t >= d:
            out = self.items
            self.items = []
            return out
        return None


# ---------------------------------------------------------------------------------------
# decode workers (hastune.sim.decode.DecodeWorker, hastune.sim.decode_paged._Paged)

cdef struct Run:      # a running sequence: (finish step, request, ctx0 − join, kv)
    long long fin
    long long req
    double s
    double kv

cdef struct Pend:     # a waiting request: (request, ctx0, kv to reserve, output tokens)
    long long req
    double ctx0
    double reserve
    long long out

cdef struct Queue:    # a FIFO of requests linked through an array (NoDGCore.nxt)
    long long head, tail, n

cdef inline bint run_lt(Run* x, Run* y) nogil:
    if x.fin != y.fin:
        return x.fin < y.fin
    return x.req < y.req


cdef class Decode:
    cdef object py, prefill_s
    cdef bint paged
    cdef double a, b, c, S, t0, pending_tokens, reserved, busy_since, busy_s, cap, inflight
    cdef double peak_kv
    cdef long long max_batch, n, step, version, gpu, steps_run, wake_step, seq_join, preempted
    cdef bint has_wake
    cdef Run* run
    cdef Py_ssize_t run_n, run_cap
    cdef Pend* pend
    cdef Py_ssize_t p_head, p_len, p_cap
    cdef long long* order       # paged: admission order per request
    cdef char* redo             # paged: preempted, to recompute when they rejoin

    def __dealloc__(self):
        free(self.run)
        free(self.pend)
        free(self.order)
        free(self.redo)

    cdef void setup(self, object d, Py_ssize_t n_req) except *:
        self.py = d
        self.paged = hasattr(d, "redo")
        self.a, self.b, self.c = d.a, d.b, d.c
        self.S, self.t0, self.pending_tokens = d.S, d.t0, d.pending_tokens
        self.reserved = 0.0 if self.paged else d.reserved
        self.busy_since, self.busy_s, self.cap = d.busy_since, d.busy_s, d.cap
        self.inflight = getattr(d, "inflight", 0.0)  # EPD's workers (fudg's run keeps a list)
        self.max_batch, self.n, self.step, self.version = d.max_batch, d.n, d.step, d.version
        self.gpu, self.steps_run = d.gpu, d.steps_run
        self.has_wake = d.wake_step is not None
        self.wake_step = d.wake_step if self.has_wake else 0
        if d.running or d.pending or self.n:
            raise ValueError("the compiled core starts from idle decode workers")
        self.run_cap = 64
        self.run_n = 0
        self.run = <Run*>malloc(self.run_cap * sizeof(Run))
        self.p_cap = 64
        self.p_head = self.p_len = 0
        self.pend = <Pend*>malloc(self.p_cap * sizeof(Pend))
        if self.paged:
            self.prefill_s = d.prefill_s
            self.seq_join, self.preempted, self.peak_kv = d.seq_join, d.preempted, d.peak_kv
            self.order = <long long*>malloc(max(n_req, 1) * sizeof(long long))
            self.redo = <char*>malloc(max(n_req, 1))
            memset(self.redo, 0, max(n_req, 1))

    cdef void write_back(self):
        d = self.py
        d.S, d.t0, d.pending_tokens = self.S, self.t0, self.pending_tokens
        if not self.paged:
            d.reserved = self.reserved
        d.busy_since, d.busy_s = self.busy_since, self.busy_s
        if hasattr(d, "inflight"):
            d.inflight = self.inflight
        d.n, d.step, d.version, d.steps_run = self.n, self.step, self.version, self.steps_run
        d.wake_step = self.wake_step if self.has_wake else None
        if self.paged:
            d.seq_join, d.preempted, d.peak_kv = self.seq_join, self.preempted, self.peak_kv

    # -- containers ---------------------------------------------------------------------
    cdef int run_push(self, long long fin, long long req, double s, double kv) except -1:
        cdef Run e
        cdef Py_ssize_t i, p
        if self.run_n == self.run_cap:
            self.run_cap *= 2
            self.run = <Run*>realloc(self.run, self.run_cap * sizeof(Run))
            if self.run == NULL:
                raise MemoryError()
        e.fin, e.req, e.s, e.kv = fin, req, s, kv
        i = self.run_n
        self.run_n += 1
        while i > 0:
            p = (i - 1) >> 1
            if run_lt(&e, &self.run[p]):
                self.run[i] = self.run[p]
                i = p
            else:
                break
        self.run[i] = e
        return 0

    cdef void sift_down(self, Py_ssize_t i):
        cdef Py_ssize_t c, n = self.run_n
        cdef Run x = self.run[i]
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and run_lt(&self.run[c + 1], &self.run[c]):
                c += 1
            if run_lt(&self.run[c], &x):
                self.run[i] = self.run[c]
                i = c
            else:
                break
        self.run[i] = x

    cdef Run run_pop(self):
        cdef Run top = self.run[0]
        self.run_n -= 1
        if self.run_n > 0:
            self.run[0] = self.run[self.run_n]
            self.sift_down(0)
        return top

    cdef int p_grow(self) except -1:
        cdef Py_ssize_t i, old = self.p_cap
        cdef Pend* nv = <Pend*>malloc(2 * old * sizeof(Pend))
        if nv == NULL:
            raise MemoryError()
        for i in range(self.p_len):
            nv[i] = self.pend[(self.p_head + i) % old]
        free(self.pend)
        self.pend = nv
        self.p_head = 0
        self.p_cap = 2 * old
        return 0

    cdef int p_append(self, long long req, double ctx0, double reserve, long long out) except -1:
        cdef Py_ssize_t k
        if self.p_len == self.p_cap:
            self.p_grow()
        k = (self.p_head + self.p_len) % self.p_cap
        self.pend[k].req = req
        self.pend[k].ctx0 = ctx0
        self.pend[k].reserve = reserve
        self.pend[k].out = out
        self.p_len += 1
        return 0

    cdef int p_appendleft(self, long long req, double ctx0, double reserve,
                          long long out) except -1:
        if self.p_len == self.p_cap:
            self.p_grow()
        self.p_head = (self.p_head - 1 + self.p_cap) % self.p_cap
        self.pend[self.p_head].req = req
        self.pend[self.p_head].ctx0 = ctx0
        self.pend[self.p_head].reserve = reserve
        self.pend[self.p_head].out = out
        self.p_len += 1
        return 0

    cdef inline void p_popleft(self):
        self.p_head = (self.p_head + 1) % self.p_cap
        self.p_len -= 1

    # -- DecodeWorker -------------------------------------------------------------------
    cdef double reserved_now(self):
        """`reserved` as routing reads it (paged: the KV held now)."""
        if self.paged:
            return self.S + self.n * self.step
        return self.reserved

    cdef double time_of(self, long long m):
        cdef long long n = self.n
        cdef double alpha = self.a + self.b * n + self.c * (self.S + n * self.step)
        return self.t0 + m * alpha + self.c * n * m * (m - 1) * 0.5

    cdef double add(self, long long req, double ctx0, long long out_tokens, double t) except? -2.0:
        """DecodeWorker.add (paged: _Paged.add): the wake time to plan, -1.0 for None."""
        cdef double reserve, alpha, dt, beta, q, c
        cdef long long n, step, m, target
        if self.paged and self.n and t <= self.t0:
            self.p_append(req, ctx0, ctx0 + out_tokens, out_tokens)
            self.pending_tokens += ctx0 + out_tokens
            target = self.step + 1
            if self.has_wake and self.wake_step <= target:
                return -1.0
            self.wake_step = target
            self.has_wake = True
            self.version += 1
            return self.time_of(1)
        reserve = ctx0 + out_tokens
        self.p_append(req, ctx0, reserve, out_tokens)
        self.pending_tokens += reserve
        n = self.n
        if n == 0:
            if self.has_wake and self.t0 >= t:
                return -1.0
            self.t0 = t
            self.wake_step = self.step
            self.has_wake = True
            self.version += 1
            return t
        c = self.c
        step = self.step
        alpha = self.a + self.b * n + c * (self.S + n * step)
        dt = t - self.t0
        beta = c * n * 0.5
        if beta <= 0.0:
            m = <long long>ceil(dt / alpha - 1e-9)
        else:
            q = alpha - beta
            m = <long long>ceil((-q + sqrt(q * q + 4.0 * beta * dt)) / (2.0 * beta) - 1e-9)
        if m < 1:
            m = 1
        target = step + m
        if self.has_wake and self.wake_step <= target:
            return -1.0
        self.wake_step = target
        self.has_wake = True
        self.version += 1
        return self.t0 + m * alpha + c * n * m * (m - 1) * 0.5

    cdef double wake(self, double t, double* t_last, list rejected) except? -2.0:
        """DecodeWorker.wake (paged: _Paged.wake): the next wake time, -1.0 for None."""
        cdef long long step = self.wake_step
        cdef long long n, nxt, m
        cdef double S, reserved, cap, alpha
        cdef bint was_busy
        cdef Run e
        cdef Pend* p
        if self.paged:
            return self.wake_paged(t, t_last, rejected)
        self.steps_run += step - self.step
        self.step = step
        self.t0 = t
        self.has_wake = False
        n, S, reserved = self.n, self.S, self.reserved
        was_busy = n > 0
        while self.run_n and self.run[0].fin <= step:
            e = self.run_pop()
            t_last[e.req] = t
            n -= 1
            S -= e.s
            reserved -= e.kv
        cap = self.cap
        while self.p_len:
            p = &self.pend[self.p_head]
            if p.reserve > cap:
                self.p_popleft()
                self.pending_tokens -= p.reserve
                rejected.append(p.req)
                t_last[p.req] = INFINITY
                continue
            if n >= self.max_batch or reserved + p.reserve > cap:
                break
            self.p_popleft()
            self.pending_tokens -= p.reserve
            if p.out <= 1:
                t_last[p.req] = t
                continue
            reserved += p.reserve
            self.run_push(step + p.out - 1, p.req, p.ctx0 - step, p.reserve)
            n += 1
            S += p.ctx0 - step
        self.n, self.S, self.reserved = n, S, reserved
        if n == 0:
            if was_busy:
                self.busy_s += t - self.busy_since
            return -1.0
        if not was_busy:
            self.busy_since = t
        nxt = self.run[0].fin
        self.wake_step = nxt
        self.has_wake = True
        self.version += 1
        m = nxt - step
        alpha = self.a + self.b * n + self.c * (S + n * step)
        return t + m * alpha + self.c * n * m * (m - 1) * 0.5

    cdef double wake_paged(self, double t, double* t_last, list rejected) except? -2.0:
        cdef long long step = self.wake_step
        cdef long long n, nxt, m, room
        cdef double S, cap, kv, c
        cdef bint was_busy
        cdef Run e
        self.steps_run += step - self.step
        self.step = step
        self.t0 = t
        self.has_wake = False
        n, S = self.n, self.S
        was_busy = n > 0
        if self.run_n and self.run[0].fin <= step:
            while self.run_n and self.run[0].fin <= step:
                e = self.run_pop()
                t_last[e.req] = t
                n -= 1
                S -= e.s
            self.n, self.S = n, S
        cap = self.cap
        if n and S + n * (step + 1) > cap:
            self.make_room()
            n, S = self.n, self.S
        elif self.p_len:
            self.admit(t, t_last, rejected)
            n, S = self.n, self.S
        if n == 0:
            if was_busy:
                self.busy_s += t - self.busy_since
            return -1.0
        if not was_busy:
            self.busy_since = t
        room = <long long>py_floordiv(cap - S - n * (step + 1), <double>n)
        nxt = self.run[0].fin
        if step + 1 + room < nxt:
            nxt = step + 1 + room
        kv = S + n * nxt
        if kv > self.peak_kv:
            self.peak_kv = kv
        self.wake_step = nxt
        self.has_wake = True
        self.version += 1
        m = nxt - step
        c = self.c
        return (self.t0 + m * (self.a + self.b * n + c * (S + n * step))
                + c * n * m * (m - 1) * 0.5)

    cdef int make_room(self) except -1:
        """_Paged.make_room: preempt the newest running while the next step would not fit."""
        cdef long long q, out_left
        cdef Run e
        cdef double ctx
        while self.n and self.S + self.n * (self.step + 1) > self.cap:
            e = self.pop_newest(self.order)
            q = e.req
            ctx = e.s + self.step
            out_left = e.fin - self.step
            self.redo[q] = 1
            self.p_appendleft(q, ctx + 1.0, ctx + out_left, out_left)
            self.pending_tokens += ctx + out_left
            self.preempted += 1
        return 0

    cdef Run pop_newest(self, long long* order):
        """decode_paged.pop_newest: take the running entry whose request was admitted last
        (`order`: admission order per request) out of the batch."""
        cdef Py_ssize_t i, best_i = 0
        cdef long long best = order[self.run[0].req]
        cdef Run e
        for i in range(1, self.run_n):
            if order[self.run[i].req] > best:
                best = order[self.run[i].req]
                best_i = i
        e = self.run[best_i]
        self.run[best_i] = self.run[self.run_n - 1]
        self.run_n -= 1
        self.heapify()
        self.n -= 1
        self.S -= e.s
        return e

    cdef void heapify(self):
        cdef Py_ssize_t i
        i = self.run_n // 2 - 1
        while i >= 0:
            self.sift_down(i)
            i -= 1

    cdef int admit(self, double t, double* t_last, list rejected) except -1:
        """_Paged.admit: FIFO admission; rejoiners recompute first, in one prefill."""
        cdef double cap = self.cap, tok = 0.0, sq = 0.0, x, s_i
        cdef long long step = self.step
        cdef Pend* p
        cdef Pend e
        cdef list late = []
        while self.p_len:
            p = &self.pend[self.p_head]
            if p.reserve > cap:
                e = p[0]
                self.p_popleft()
                self.pending_tokens -= e.reserve
                rejected.append(e.req)
                t_last[e.req] = INFINITY
                continue
            if self.n >= self.max_batch or self.S + self.n * (step + 1) + p.ctx0 + 1.0 > cap:
                break
            e = p[0]
            self.p_popleft()
            self.pending_tokens -= e.reserve
            if self.redo[e.req]:
                self.redo[e.req] = 0
                x = e.ctx0 - 1.0
                tok += x
                sq += x * x
                if e.out <= 1:
                    late.append(e.req)
                    continue
            elif e.out <= 1:
                t_last[e.req] = t
                continue
            s_i = e.ctx0 - step
            self.run_push(step + e.out - 1, e.req, s_i, 0.0)
            self.n += 1
            self.S += s_i
            self.seq_join += 1
            self.order[e.req] = self.seq_join
        if tok:
            self.t0 = t + self.prefill_s(tok, sq)
            for req in late:
                t_last[req] = self.t0
        return 0


ctypedef long long i64

ctypedef fused cnum:
    double
    i64


cdef cnum* c_copy(object x, Py_ssize_t n, cnum* out) except NULL:
    """A C copy of n numbers into `out` (malloc'd for max(n, 1) of them, or NULL: raises): a
    list of them (the Python path's), or an array (float64 or int64 values: what .tolist()
    would have made them)."""
    cdef const cnum[::1] v
    cdef Py_ssize_t i
    if out == NULL:
        raise MemoryError()
    if isinstance(x, list):
        for i in range(n):
            out[i] = x[i]
        return out
    v = np.ascontiguousarray(x, dtype=np.float64 if cnum is double else np.int64)
    for i in range(n):
        out[i] = v[i]
    return out


cdef double* doubles(object x, Py_ssize_t n) except NULL:
    """c_copy of n doubles."""
    return c_copy(x, n, <double*>malloc(max(n, 1) * sizeof(double)))


cdef long long* longs(object x, Py_ssize_t n) except NULL:
    """c_copy of n 64-bit integers."""
    return c_copy(x, n, <i64*>malloc(max(n, 1) * sizeof(i64)))


cdef double EMPTY[1]


cdef double* f64_ptr(object x, Py_ssize_t n, str what) except NULL:
    """Where the values of x, a C-contiguous float64 array of n, lie (x is kept alive by the
    caller): the compiled core writes a run's times into the run's own arrays."""
    cdef double[::1] v
    if not isinstance(x, np.ndarray) or x.dtype != np.float64 or len(x) != n:
        raise TypeError(f"the compiled core needs {what} as a float64 array of {n}")
    if n == 0:
        return &EMPTY[0]
    v = x
    return &v[0]


cdef double py_floordiv(double vx, double wx):
    """CPython's float floor division (floatobject.c float_floor_div), bit for bit."""
    cdef double mod, div, floordiv
    mod = fmod(vx, wx)
    div = (vx - mod) / wx
    if mod:
        if (wx < 0) != (mod < 0):
            mod += wx
            div -= 1.0
    else:
        mod = copysign(0.0, wx)
    if div:
        floordiv = floor(div)
        if div - floordiv > 0.5:
            floordiv += 1.0
    else:
        floordiv = copysign(0.0, vx / wx)
    return floordiv


# ---------------------------------------------------------------------------------------
# the run

cdef class Loop:
    """EventLoop.events in C for one run's handlers (a subclass's `arrive` and `handle`):
    the pre-computed arrivals merged with the heap, the stop rule's checks (the Python
    EventLoop.checkpoint, at the same arrival counts), then `write_back`; and what every run
    holds (`open_run`): its network, prompt and output tokens, and the times it writes."""
    cdef object py, loop
    cdef Heap heap
    cdef Net net
    cdef Py_ssize_t n
    cdef double* arr                # the pre-computed arrivals, during loop_run
    cdef Py_ssize_t n_open
    cdef double* pre_tok
    cdef long long* out_tok
    cdef object tf_arr, tl_arr      # the run's t_first, t_last (float64 arrays) ...
    cdef double* t_first            # ... written through these
    cdef double* t_last
    cdef list rejected

    def __dealloc__(self):
        free(self.pre_tok)
        free(self.out_tok)

    cdef void open_run(self, object run) except *:
        """Take `run` (a fresh Python run: an empty heap, arrays) as this one's."""
        self.py = run
        self.loop = run.loop
        self.heap = Heap()
        if run.heap:
            raise ValueError("the compiled core starts from an empty heap")
        self.net = Net()
        if getattr(run, "net", None) is not None:  # (nodg's replicas send nothing)
            self.net.setup(run.net)
        n = self.n = len(run.out_tok)
        self.pre_tok = doubles(run.pre_tok, n)
        self.out_tok = longs(run.out_tok, n)
        self.tf_arr, self.tl_arr = run.t_first, run.t_last
        self.t_first = f64_ptr(self.tf_arr, n, "t_first")
        self.t_last = f64_ptr(self.tl_arr, n, "t_last")
        self.rejected = run.rejected

    cdef int arrive(self, long long r, double t) except -1:
        raise NotImplementedError

    cdef int handle(self, Ev* ev) except -1:
        raise NotImplementedError

    cdef void write_back(self, double t, long long popped, Py_ssize_t i) except *:
        raise NotImplementedError

    cdef int loop_run(self) except -1:
        cdef object loop = self.loop
        cdef Py_ssize_t n_open = loop.n_open
        cdef Py_ssize_t i = 0, check
        cdef long long popped = 0
        cdef double t = 0.0, ta
        cdef Heap heap = self.heap
        cdef Ev ev
        cdef double* arr = doubles(loop.arr, n_open)
        self.arr, self.n_open = arr, n_open  # (what a handler may read of the arrivals)
        try:
            check = loop.first_check()
            while True:
                if i >= check:
                    nxt = loop.checkpoint(i, t)
                    if nxt is None:
                        break
                    check = nxt
                if heap.n:
                    if i < n_open:
                        ta = arr[i]
                        if ta < heap.v[0].t or (ta == heap.v[0].t
                                                and heap.v[0].prio >= PRIO_ARRIVE):
                            t = ta
                            self.arrive(i, t)
                            i += 1
                            continue
                    ev = heap.pop()
                    if ev.t < t:
                        raise SimulationError(
                            f"event kind {ev.kind} at t={ev.t!r} is earlier than now={t!r}: "
                            "a simulator scheduled it in the past")
                    popped += 1
                    t = ev.t
                    self.handle(&ev)
                elif i < n_open:
                    t = arr[i]
                    self.arrive(i, t)
                    i += 1
                else:
                    break
        finally:
            free(arr)
            self.arr = NULL
        self.write_back(t, popped, i)
        return 0


cdef class Core(Loop):
    cdef list enc, pf, dec          # Encode, Prefill (local first, then remote), Decode
    cdef Py_ssize_t n_enc, n_local, n_remote, n_dec
    cdef double* enc_tok
    cdef double* llm_tok
    cdef double emb_bytes
    cdef long long rr, rr_text
    cdef bint text_at_encode
    # the deficit router, exact in 64-bit integers (or the Python object's route())
    cdef object router
    cdef bint router_c
    cdef long long r_num, r_den, r_acc, r_remote, r_local

    def __dealloc__(self):
        free(self.enc_tok)
        free(self.llm_tok)

    cdef void setup(self, object run) except *:
        cdef Py_ssize_t i, n
        cdef Encode e
        cdef Prefill p
        cdef Decode d
        self.open_run(run)
        n = self.n
        self.enc_tok = doubles(run.enc_tok, n)
        self.llm_tok = doubles(run.llm_tok, n)
        self.emb_bytes = run.emb_bytes
        self.rr, self.rr_text = run.rr, run.rr_text
        self.text_at_encode = run.text_at_encode
        self.pf = []
        for w in run.local:
            p = Prefill()
            p.setup(w)
            self.pf.append(p)
        for w in run.remote:
            p = Prefill()
            p.setup(w)
            self.pf.append(p)
        self.n_local, self.n_remote = len(run.local), len(run.remote)
        self.enc = []
        for ew in run.enc:
            e = Encode()
            local = -1
            if ew.local is not None:
                local = next(k for k, w in enumerate(run.local) if w is ew.local)
            e.setup(ew, local)
            e.idx = len(self.enc)
            self.enc.append(e)
        self.n_enc = len(self.enc)
        self.dec = []
        for dw in run.dws:
            d = Decode()
            d.setup(dw, n)
            self.dec.append(d)
        self.n_dec = len(self.dec)
        router = run.router
        self.router = router
        self.r_num, self.r_den = router._num, router._den
        self.router_c = router._den < (1 << 61) and router._acc < (1 << 61)
        if self.router_c:
            self.r_acc, self.r_remote, self.r_local = router._acc, router.remote, router.local

    cdef void write_back(self, double t, long long popped, Py_ssize_t i) except *:
        cdef Encode e
        cdef Prefill p
        cdef Decode d
        for e in self.enc:
            e.write_back()
        for p in self.pf:
            p.write_back()
        for d in self.dec:
            d.write_back()
        self.net.write_back()
        run = self.py
        run.rr, run.rr_text = self.rr, self.rr_text
        if self.router_c:
            r = self.router
            r._acc, r.remote, r.local = self.r_acc, self.r_remote, self.r_local
        loop = self.loop
        loop.t = t
        loop.popped = popped
        loop.arrived = i

    cdef bint route(self) except -1:
        if not self.router_c:
            return self.router.route()
        self.r_acc += self.r_num
        if self.r_acc >= self.r_den:
            self.r_acc -= self.r_den
            self.r_remote += 1
            return True
        self.r_local += 1
        return False

    cdef double rate_at(self, Prefill w, double share) except? -1.0:
        """PrefillWorker.rate_at (cached per worker: the shares repeat)."""
        r = w.rates.get(share)
        if r is None:
            r = w.rates[share] = w.py.rate_at(share)
        return r

    # -- arrival and encode ---------------------------------------------------------------
    cdef int arrive(self, long long r, double t) except -1:
        cdef Encode ew
        cdef double d
        if self.enc_tok[r] <= 0:
            if self.text_at_encode:
                ew = <Encode>self.enc[self.rr_text % self.n_enc]
                self.route_one(ew, r, t)
                self.rr_text += 1
            else:
                self.route_one(None, r, t)
            return 0
        ew = <Encode>self.enc[self.rr % self.n_enc]
        self.rr += 1
        batch = ew.add(t, r)
        if batch is not None:
            ew.queue.append(batch)
            if ew.batch is None:
                self.start_encode(ew, t)
            return 0
        d = ew.deadline()
        if not ew.has_timer or (d != -1.0 and d < ew.timer_at):
            self.arm(ew, d)
        return 0

    cdef int arm(self, Encode ew, double d) except -1:
        ew.timer_ver += 1
        ew.timer_at = d
        ew.has_timer = True
        self.heap.push(d, PRIO_TIMER, K_TIMER, ew.idx, ew.timer_ver)
        return 0

    cdef int timer(self, double t, int k, long long ver) except -1:
        cdef Encode ew = <Encode>self.enc[k]
        cdef double d
        if ver != ew.timer_ver:
            return 0
        ew.has_timer = False
        batch = ew.poll(t)
        if batch is not None:
            ew.queue.append(batch)
            if ew.batch is None:
                self.start_encode(ew, t)
        else:
            d = ew.deadline()
            if d != -1.0:
                self.arm(ew, d)
        return 0

    cdef int start_encode(self, Encode ew, double t) except -1:
        cdef double toks = 0.0, sq = 0.0, x, f, slow, done
        cdef long long nb
        cdef Prefill lw
        batch = ew.queue.popleft()
        for r in batch:
            x = self.enc_tok[<long long>r]
            toks += x
            sq += x * x
        nb = len(batch)
        fs = ew.shares.get(nb)
        if fs is None:
            fs = ew.shares[nb] = ew.py.share_for(nb)
        f, slow = fs
        ew.batch = batch
        ew.share = f
        ew.started = t
        ew.batches += 1
        done = t + (ew.fixed + ew.per_item * nb + ew.per_tok * toks + ew.per_sq * sq) * slow
        self.heap.push(done, PRIO_DONE, K_ENC_DONE, ew.idx, 0)
        if ew.local >= 0:
            lw = <Prefill>self.pf[ew.local]
            self.set_local_share(lw, ew.local, t, 1.0 - ew.share)
        return 0

    cdef int enc_done(self, double t, int k) except -1:
        cdef Encode ew = <Encode>self.enc[k]
        cdef Prefill lw
        ew.sm_busy_s += ew.share * (t - ew.started)
        batch = ew.batch
        ew.batch = None
        if ew.queue:
            self.start_encode(ew, t)
        elif ew.local >= 0:
            lw = <Prefill>self.pf[ew.local]
            self.set_local_share(lw, ew.local, t, ew.idle_share)
        for r in batch:
            self.route_one(ew, <long long>r, t)
        return 0

    # -- prefill --------------------------------------------------------------------------
    cdef int set_local_share(self, Prefill w, int k, double t, double share) except -1:
        cdef double ft, new_rate
        if share == w.share:
            return 0
        new_rate = self.rate_at(w, share)
        ft = w.set_share(t, share, new_rate)
        if ft != -1.0:
            self.heap.push(ft, PRIO_DONE, K_PF_DONE, k, w.version)
        return 0

    cdef int route_one(self, Encode ew, long long r, double t) except -1:
        """_EPDRun._route for one request of the batch."""
        cdef double pre = self.pre_tok[r], best, at, ft
        cdef Prefill w, x
        cdef Py_ssize_t j, k
        cdef long long src
        if self.n_remote and self.route():
            k = self.n_local
            w = <Prefill>self.pf[k]
            best = w.outstanding
            for j in range(self.n_local, self.n_local + self.n_remote):
                x = <Prefill>self.pf[j]
                if x.outstanding < best:
                    w, best, k = x, x.outstanding, j
            w.outstanding += pre
            src = ew.gpu if ew is not None else w.gpu
            at = self.net.transfer(src, w.gpu, self.llm_tok[r] * self.emb_bytes, t)
            if at != t:
                self.heap.push(at, PRIO_ARRIVE, K_PF_ARRIVE, k, r)
                return 0
        else:
            if ew is None or ew.local < 0:
                raise RuntimeError("a local prefill without an encode worker that has one")
            k = ew.local
            w = <Prefill>self.pf[k]
            w.outstanding += pre
        w.enqueue(r, pre)
        if not w.busy:
            ft = w.start(t)
            self.heap.push(ft, PRIO_DONE, K_PF_DONE, k, w.version)
        return 0

    cdef int pf_arrive(self, double t, int k, long long r) except -1:
        cdef Prefill w = <Prefill>self.pf[k]
        cdef double ft
        w.enqueue(r, self.pre_tok[r])
        if not w.busy:
            ft = w.start(t)
            self.heap.push(ft, PRIO_DONE, K_PF_DONE, k, w.version)
        return 0

    cdef int pf_done(self, double t, int k, long long ver) except -1:
        cdef Prefill w = <Prefill>self.pf[k]
        cdef Decode d, x
        cdef Py_ssize_t i, j, jd
        cdef long long r, out, links
        cdef double pre, best, v, at, kvb, ft
        cdef double* t_first = self.t_first
        cdef double* t_last = self.t_last
        if ver != w.version:
            return 0
        if t < w.due:
            w.planned = w.due
            self.heap.push(w.due, PRIO_DONE, K_PF_DONE, k, ver)
            return 0
        kvb, links = w.kv_bytes, w.kv_links
        w.finish(t)
        for i in range(w.b_len):
            r = w.b_req[i]
            pre = self.pre_tok[r]
            w.outstanding -= pre
            t_first[r] = t
            out = self.out_tok[r]
            if out <= 1:
                t_last[r] = t
                continue
            d = <Decode>self.dec[0]
            jd = 0
            best = d.reserved_now() + d.pending_tokens + d.inflight
            for j in range(1, self.n_dec):
                x = <Decode>self.dec[j]
                v = x.reserved_now() + x.pending_tokens + x.inflight
                if v < best:
                    d, best, jd = x, v, j
            d.inflight += pre + out
            at = self.net.transfer(w.gpu, d.gpu, pre * kvb, t)
            if links > 1:
                self.net.bytes_moved += (links - 1) * pre * kvb
            self.heap.push(at, PRIO_ARRIVE, K_D_ARRIVE, jd, r)
        ft = w.start(t)
        if ft != -1.0:
            self.heap.push(ft, PRIO_DONE, K_PF_DONE, k, w.version)
        return 0

    # -- decode ---------------------------------------------------------------------------
    cdef int d_arrive(self, double t, int k, long long r) except -1:
        cdef Decode d = <Decode>self.dec[k]
        cdef double pre = self.pre_tok[r], nxt
        cdef long long out = self.out_tok[r]
        d.inflight -= pre + out
        nxt = d.add(r, pre + 1.0, out, t)
        if nxt != -1.0:
            self.heap.push(nxt, PRIO_DONE, K_D_WAKE, k, d.version)
        return 0

    cdef int d_wake(self, double t, int k, long long ver) except -1:
        cdef Decode d = <Decode>self.dec[k]
        cdef double nxt
        if ver == d.version:
            nxt = d.wake(t, self.t_last, self.rejected)
            if nxt != -1.0:
                self.heap.push(nxt, PRIO_DONE, K_D_WAKE, k, d.version)
        return 0

    # -- the loop's events (EventLoop.events with the handlers of _EPDRun) -----------------
    cdef int handle(self, Ev* ev) except -1:
        cdef double t = ev.t
        if ev.kind == K_D_WAKE:
            self.d_wake(t, ev.obj, ev.a)
        elif ev.kind == K_D_ARRIVE:
            self.d_arrive(t, ev.obj, ev.a)
        elif ev.kind == K_PF_DONE:
            self.pf_done(t, ev.obj, ev.a)
        elif ev.kind == K_PF_ARRIVE:
            self.pf_arrive(t, ev.obj, ev.a)
        elif ev.kind == K_ENC_DONE:
            self.enc_done(t, ev.obj)
        else:
            self.timer(t, ev.obj, ev.a)
        return 0


def run(object epd_run):
    """Run `epd_run` (a fresh hastune.sim.epd._EPDRun) to its end in compiled code."""
    cdef Core core = Core()
    core.setup(epd_run)
    core.loop_run()


# ---------------------------------------------------------------------------------------
# fudg runs (hastune.sim.fudg.FuDGRun), open loop: a prefill pool that batches and
# pipelines, the KV over the duplex network shard by shard, the decode pool's workers (the
# Decode above: reserved or paged KV)

cdef enum FKind:
    F_PF_NEXT = 1
    F_PF_DONE = 2
    F_KV_ARRIVE = 3
    F_DEC_WAKE = 4


cdef class FuDGCore(Loop):
    cdef list dec, ptm               # Decode per decode instance; prefill InstanceTimings
    cdef Py_ssize_t P, D
    cdef double* enc_lat
    # prefill instances
    cdef double* p_cap
    cdef double* max_tok
    cdef double* p_out               # prompt tokens outstanding (FuDGRun.p_outstanding)
    cdef double* p_held
    cdef char* p_busy                # first stage busy (FuDGRun.p_stage_busy)
    cdef double* p_busy_s
    cdef long long* p_node
    cdef long long* p_gpu
    # each instance's queue, a list linked through the requests (one queue each, once)
    cdef long long* q_head
    cdef long long* q_tail
    cdef long long* q_next
    cdef long long* src_of
    # batches: each request is in one batch, once; batch b is
    # b_req[b_start[b] : b_start[b] + b_len[b]]
    cdef long long* b_req
    cdef long long* b_start
    cdef long long* b_len
    cdef long long n_batches, b_fill
    # decode instances
    cdef double* d_cap
    cdef long long* d_node
    cdef long long* d_gpu
    cdef double fit_d, fit_p
    cdef long long gp, gd, per_node
    cdef double kv_bytes

    def __dealloc__(self):
        free(self.enc_lat)
        free(self.p_cap)
        free(self.max_tok)
        free(self.p_out)
        free(self.p_held)
        free(self.p_busy)
        free(self.p_busy_s)
        free(self.p_node)
        free(self.p_gpu)
        free(self.q_head)
        free(self.q_tail)
        free(self.q_next)
        free(self.src_of)
        free(self.b_req)
        free(self.b_start)
        free(self.b_len)
        free(self.d_cap)
        free(self.d_node)
        free(self.d_gpu)

    cdef void setup(self, object run) except *:
        cdef Py_ssize_t k, j, n, P, D
        cdef Decode d
        if run.loop.closed:
            raise ValueError("the compiled fudg core runs open loop only")
        self.open_run(run)
        n = self.n
        self.enc_lat = doubles(run.enc_lat, n)
        self.ptm = list(run.ptm)
        P = self.P = run.P
        D = self.D = run.D
        self.p_cap = doubles(run.p_cap, P)
        self.max_tok = doubles(run.max_tok, P)
        self.p_out = doubles(run.p_outstanding, P)
        self.p_held = doubles(run.p_held, P)
        self.p_busy_s = doubles(run.p_busy_s, P)
        self.p_busy = <char*>malloc(max(P, 1))
        self.p_node = longs([t.node for t in run.ptm], P)
        self.p_gpu = longs([t.first_gpu for t in run.ptm], P)
        self.q_head = longs([-1] * P, P)
        self.q_tail = longs([-1] * P, P)
        self.q_next = <long long*>malloc(max(n, 1) * sizeof(long long))
        self.src_of = longs(run.src_of, n)
        self.b_req = <long long*>malloc(max(n, 1) * sizeof(long long))
        self.b_start = <long long*>malloc(max(n, 1) * sizeof(long long))
        self.b_len = <long long*>malloc(max(n, 1) * sizeof(long long))
        if (self.p_busy == NULL or self.q_next == NULL or self.b_req == NULL
                or self.b_start == NULL or self.b_len == NULL):
            raise MemoryError()
        self.n_batches = self.b_fill = 0
        for k in range(P):
            self.p_busy[k] = run.p_stage_busy[k]
            if run.p_queue[k]:
                raise ValueError("the compiled core starts from empty prefill queues")
        self.d_cap = doubles(run.d_cap, D)
        self.d_node = longs(run.d_node, D)
        self.d_gpu = longs([t.first_gpu for t in run.dtm], D)
        self.dec = []
        for j in range(D):
            d = Decode()
            d.setup(run.dws[j], n)
            d.inflight = run.d_inflight[j]
            self.dec.append(d)
        self.fit_d, self.fit_p = run.fits
        self.gp, self.gd, self.per_node = run.gp, run.gd, run.per_node
        self.kv_bytes = run.kv_bytes

    cdef void write_back(self, double t, long long popped, Py_ssize_t i) except *:
        """What FuDGSimulator.run and FuDGRun.utilisation read, and the pools' state (the
        prefill queues of a run stopped early are left as they were: nothing reads them)."""
        cdef Py_ssize_t k, j
        cdef Decode d
        run = self.py
        for j in range(self.D):
            d = <Decode>self.dec[j]
            d.write_back()
            run.d_inflight[j] = d.inflight
        self.net.write_back()
        for k in range(self.P):
            run.p_outstanding[k] = self.p_out[k]
            run.p_held[k] = self.p_held[k]
            run.p_stage_busy[k] = bool(self.p_busy[k])
            run.p_busy_s[k] = self.p_busy_s[k]
        loop = self.loop
        loop.t = t
        loop.popped = popped
        loop.arrived = i

    cdef int handle(self, Ev* ev) except -1:
        cdef double t = ev.t
        cdef Decode d
        cdef double nxt
        if ev.kind == F_DEC_WAKE:
            d = <Decode>self.dec[ev.obj]
            if ev.a == d.version:  # else re-planned since
                nxt = d.wake(t, self.t_last, self.rejected)
                if nxt != -1.0:
                    self.heap.push(nxt, PRIO_DONE, F_DEC_WAKE, ev.obj, d.version)
        elif ev.kind == F_KV_ARRIVE:
            self.kv_arrived(ev.obj, ev.a, t)
        elif ev.kind == F_PF_DONE:
            self.prefilled(ev.obj, ev.a, t)
        else:  # F_PF_NEXT: prefill instance's first stage is free
            self.p_busy[ev.obj] = 0
            self.start(ev.obj, t)
        return 0

    cdef int arrive(self, long long r, double t) except -1:
        """FuDGRun.arrive: to the prefill instance with the fewest prompt tokens outstanding."""
        cdef double pre = self.pre_tok[r], best
        cdef Py_ssize_t j, k
        if pre + self.out_tok[r] > self.fit_d or pre > self.fit_p:
            self.rejected.append(r)
            self.t_first[r] = INFINITY
            self.t_last[r] = INFINITY
            return 0
        k = 0
        best = self.p_out[0]
        for j in range(1, self.P):
            if self.p_out[j] < best:
                best, k = self.p_out[j], j
        if pre > self.p_cap[k]:  # max(range(P), key=p_cap): the first of the largest
            k = 0
            for j in range(1, self.P):
                if self.p_cap[j] > self.p_cap[k]:
                    k = j
        self.src_of[r] = k
        self.p_out[k] += pre
        self.q_next[r] = -1
        if self.q_tail[k] < 0:
            self.q_head[k] = r
        else:
            self.q_next[self.q_tail[k]] = r
        self.q_tail[k] = r
        if not self.p_busy[k]:
            self.start(k, t)
        return 0

    cdef int start(self, Py_ssize_t k, double t) except -1:
        """FuDGRun.start: the next prefill batch on instance k, if its first stage is free
        and the batch's KV fits beside what k still holds."""
        cdef double room, lim, tokens, sq, enc, L, lat, stage
        cdef long long r, b, cnt
        if self.p_busy[k] or self.q_head[k] < 0:
            return 0
        room = self.p_cap[k] - self.p_held[k]
        lim = self.max_tok[k]
        tokens = sq = enc = 0.0
        b = self.n_batches
        cnt = 0
        while self.q_head[k] >= 0:
            r = self.q_head[k]
            L = self.pre_tok[r]
            if cnt and (tokens + L > lim or tokens + L > room):
                break
            if not cnt and L > room:
                return 0  # wait for transfers to free KV
            self.q_head[k] = self.q_next[r]
            if self.q_head[k] < 0:
                self.q_tail[k] = -1
            self.b_req[self.b_fill + cnt] = r
            cnt += 1
            tokens += L
            sq += L * L
            enc += self.enc_lat[r]
        self.b_start[b] = self.b_fill
        self.b_len[b] = cnt
        self.b_fill += cnt
        self.n_batches += 1
        self.p_held[k] += tokens
        tm = self.ptm[k]
        lat = enc + <double>tm.prefill_latency(tokens, sq)
        stage = enc + <double>tm.prefill_stage(tokens, sq)
        self.p_busy_s[k] += stage
        self.p_busy[k] = 1
        self.heap.push(t + lat, PRIO_DONE, F_PF_DONE, k, b)
        self.heap.push(t + stage, PRIO_DONE, F_PF_NEXT, k, 0)
        return 0

    cdef int prefilled(self, Py_ssize_t k, long long b, double t) except -1:
        """FuDGRun.prefilled: single-token requests are done, the others' KV goes to a
        decode instance."""
        cdef long long i, r
        cdef double pre
        for i in range(self.b_start[b], self.b_start[b] + self.b_len[b]):
            r = self.b_req[i]
            pre = self.pre_tok[r]
            self.p_out[k] -= pre
            if self.out_tok[r] <= 1:
                self.p_held[k] -= pre
                self.t_first[r] = t
                self.t_last[r] = t
            else:
                self.send(k, r, t)
        self.start(k, t)
        return 0

    cdef Py_ssize_t pick_decode(self, Py_ssize_t k, double need):
        """FuDGRun.pick_decode: the least loaded decode instance on prefill k's node if it
        has room and holds at most LOCAL_SLACK × this request's tokens more than the least
        loaded anywhere, else the least loaded anywhere."""
        cdef long long node = self.p_node[k]
        cdef double best_local = INFINITY, best_any = INFINITY, x
        cdef Py_ssize_t j, bl = -1, ba = 0
        cdef Decode d
        for j in range(self.D):
            d = <Decode>self.dec[j]
            x = d.reserved_now() + d.pending_tokens + d.inflight
            if x < best_any:
                best_any, ba = x, j
            if self.d_node[j] == node and x < best_local:
                best_local, bl = x, j
        if bl >= 0 and best_local + need <= self.d_cap[bl] \
                and best_local <= best_any + LOCAL_SLACK * need:
            return bl
        return ba

    cdef int send(self, Py_ssize_t k, long long r, double t) except -1:
        """FuDGRun.send: r's KV from prefill instance k to a decode instance, shard by
        shard."""
        cdef double pre = self.pre_tok[r], need, nbytes, shard, at, a
        cdef Py_ssize_t j
        cdef long long src, dst, s
        cdef Decode d
        need = pre + self.out_tok[r]
        j = self.pick_decode(k, need)
        d = <Decode>self.dec[j]
        d.inflight += need
        nbytes = pre * self.kv_bytes
        src, dst = self.p_gpu[k], self.d_gpu[j]
        if src // self.per_node == dst // self.per_node and self.gp > 1:
            shard = nbytes / self.gp
            at = t
            for s in range(self.gp):
                a = self.net.transfer(src + s, dst + s % self.gd, shard, t)
                if a > at:
                    at = a
        else:
            at = self.net.transfer(src, dst, nbytes, t)
        self.heap.push(at, PRIO_ARRIVE, F_KV_ARRIVE, j, r)
        return 0

    cdef int kv_arrived(self, Py_ssize_t j, long long r, double t) except -1:
        """FuDGRun.kv_arrived: r's first token counts now; its prefill instance frees the KV
        and may start a batch that waited for room."""
        cdef double pre = self.pre_tok[r], nxt
        cdef long long k = self.src_of[r]
        cdef Decode d = <Decode>self.dec[j]
        self.p_held[k] -= pre
        d.inflight -= pre + self.out_tok[r]
        self.t_first[r] = t
        nxt = d.add(r, pre + 1.0, self.out_tok[r], t)
        if nxt != -1.0:
            self.heap.push(nxt, PRIO_DONE, F_DEC_WAKE, j, d.version)
        if self.q_head[k] >= 0 and not self.p_busy[k]:
            self.start(k, t)
        return 0


def run_fudg(object fudg_run):
    """Run `fudg_run` (a fresh hastune.sim.fudg.FuDGRun, open loop, arrays) to its end in
    compiled code."""
    cdef FuDGCore core = FuDGCore()
    core.setup(fudg_run)
    core.loop_run()


# ---------------------------------------------------------------------------------------
# nodg runs, open loop without batch waiting: replicas that prefill in chunks beside decoding
# (hastune.policies.IterationScheduler), every iteration and decode stretch an event, inline
# encode; with KV on demand (`paged`: hastune.sim.nodg.paged.PagedRun, whose own way that
# is) preemption and the front end's token delivery (hastune.sim.frontend.Delivery), else KV
# for prompt + output reserved at admission (hastune.sim.nodg.run.Run with `ahead` off: the
# event-by-event run its shortcuts are tested against)

cdef enum NKind:
    N_STEP = 1      # a replica's iteration ends, or its decode stretch reaches its target
    N_START = 2     # a woken replica plans, after the arrivals of its instant (Run.wake)


cdef class NRep:
    """One replica of a nodg run: its timing (InstanceTiming.mixed), its scheduler's state
    (the waiting and prefilling prompts, linked through NoDGCore.nxt), its decode batch
    (a Decode used as ReplicaDecode: the heap, n, S, step, t0, steps_run, and reserved when
    not paged), its pending event (hastune.sim.nodg.run.Replica) and, paged, its front end's
    Delivery."""
    cdef object py
    cdef Decode d
    # InstanceTiming
    cdef double p_fixed, p_tok, p_sq, hop_lat, hop_tok, mixed_fixed, d_fixed, d_seq, d_ctx
    cdef long long pp
    # IterationScheduler
    cdef double kv_cap, reserved, prefill_tokens
    cdef long long seats, chunk
    cdef bint chunked
    cdef Queue w, f                 # IterationScheduler.waiting, prefilling
    # Replica
    cdef bint active, in_iter, decodes, waking
    cdef long long ver, target, iters
    cdef double ev_t, busy_since, busy_s, prefill_s, max_iter
    # PagedDecode, Delivery
    cdef double prompts
    cdef bint deliver
    cdef double cost, per_made, free

    cdef void setup(self, object rp, bint paged) except *:
        cdef Decode d
        tm, dec, sched = rp.tm, rp.dec, rp.sched
        if dec.n or sched.waiting or sched.prefilling or rp.active:
            raise ValueError("the compiled core starts from idle replicas")
        self.py = rp
        self.p_fixed, self.p_tok, self.p_sq = tm.p_fixed, tm.p_tok, tm.p_sq
        self.hop_lat, self.hop_tok, self.pp = tm.hop_lat, tm.hop_tok, tm.pp
        self.mixed_fixed = tm.mixed_fixed
        spec = tm.decode
        self.d_fixed, self.d_seq = spec.fixed_s, spec.per_seq_s
        self.d_ctx = spec.per_context_token_s
        self.kv_cap, self.reserved = sched.kv_cap, sched.reserved
        self.prefill_tokens = sched.prefill_tokens
        self.seats, self.chunk, self.chunked = sched.seats, sched.chunk, sched.chunked
        self.w.head = self.w.tail = self.f.head = self.f.tail = -1
        self.w.n = self.f.n = 0
        self.active, self.in_iter, self.decodes, self.waking = (rp.active, rp.in_iter,
                                                                 rp.decodes, rp.waking)
        self.ver, self.target, self.iters = rp.ver, rp.target, rp.iters
        self.ev_t, self.busy_since, self.busy_s = rp.ev_t, rp.busy_since, rp.busy_s
        self.prefill_s, self.max_iter = rp.prefill_s, rp.max_iter
        d = self.d = Decode()
        d.a, d.b, d.c = dec.a, dec.b, dec.c
        d.n, d.S, d.step, d.t0, d.steps_run = dec.n, dec.S, dec.step, dec.t0, dec.steps_run
        d.paged = paged
        if not paged:
            d.reserved = dec.reserved
        d.run_cap = 64
        d.run_n = 0
        d.run = <Run*>malloc(d.run_cap * sizeof(Run))
        if d.run == NULL:
            raise MemoryError()
        dl = dec.deliver if paged else None  # (ReplicaDecode: no front end here)
        self.prompts = dec.prompts if paged else 0.0
        self.deliver = dl is not None
        if self.deliver:
            self.cost, self.per_made, self.free = dl.cost, dl.per_made, dl.free

    cdef void write_back(self) except *:
        cdef Decode d = self.d
        rp = self.py
        rp.active, rp.in_iter, rp.decodes, rp.waking = (self.active, self.in_iter,
                                                         self.decodes, self.waking)
        rp.ver, rp.target, rp.iters = self.ver, self.target, self.iters
        rp.ev_t, rp.busy_since, rp.busy_s = self.ev_t, self.busy_since, self.busy_s
        rp.prefill_s, rp.max_iter = self.prefill_s, self.max_iter
        rp.sched.reserved = self.reserved
        dec = rp.dec
        dec.n, dec.S, dec.step, dec.t0, dec.steps_run = d.n, d.S, d.step, d.t0, d.steps_run
        if d.paged:
            dec.prompts = self.prompts
        else:
            dec.reserved = d.reserved
        if self.deliver:
            dec.deliver.free = self.free

    cdef double mixed(self, long long n, double ctx, double chunk, double chunk_sq):
        """InstanceTiming.mixed."""
        cdef double pf
        if chunk <= 0:
            return self.d_fixed + self.d_seq * n + self.d_ctx * ctx
        pf = self.p_tok * chunk + self.p_sq * chunk_sq
        if self.pp > 1:
            pf += (self.pp - 1) * (self.hop_lat + chunk * self.hop_tok)
        if n == 0:
            return self.p_fixed + pf
        return self.mixed_fixed + self.d_seq * n + self.d_ctx * ctx + pf

    cdef double boundary(self, double t, long long* sb):
        """ReplicaDecode.boundary: the first step boundary at or after t (its step in sb)."""
        cdef Decode d = self.d
        cdef long long n = d.n, step = d.step, m
        cdef double t0 = d.t0, c, alpha, beta, q
        if n == 0 or t <= t0:
            sb[0] = step
            return t if t > t0 else t0
        c = d.c
        alpha = d.a + d.b * n + c * (d.S + n * step)
        beta = c * n * 0.5
        if beta <= 0.0:
            m = <long long>ceil((t - t0) / alpha - 1e-9)
        else:
            q = alpha - beta
            m = <long long>ceil((-q + sqrt(q * q + 4.0 * beta * (t - t0))) / (2.0 * beta)
                                - 1e-9)
        if m < 1:
            m = 1
        sb[0] = step + m
        return t0 + m * alpha + c * n * m * (m - 1) * 0.5

    cdef double stretch(self, double t0, double t1, long long n, long long m, double made):
        """Delivery.stretch."""
        cdef double c = self.cost * n, g = self.per_made, work, last, x
        work = c * m + g * (m * made + <double>(n * m * (m - 1)) * 0.5)
        last = c + g * (made + <double>(n * (m - 1)))
        x = self.free if self.free > t0 else t0
        x = x + work
        if t1 + last > x:
            x = t1 + last
        self.free = x
        return x

    cdef double one(self, double t):
        """Delivery.one."""
        self.free = (self.free if self.free > t else t) + self.cost
        return self.free


cdef class NoDGCore(Loop):
    """The event-by-event nodg run's handlers (hastune.sim.nodg.run.Run.arrive/start/plan/
    step with `ahead` off; `paged`: PagedRun.step, joins, make_room) over NRep replicas;
    requests are numbered as they arrive."""
    cdef list reps
    cdef bint paged                 # KV on demand (PagedRun), else reserved at admission (Run)
    cdef Py_ssize_t R
    cdef long long* inflight        # LeastInFlight.inflight
    cdef double* need               # each request's Prompt (one at a time): need, total,
    cdef double* total              # done
    cdef double* done
    cdef long long* nxt             # the next in its replica's waiting or prefilling queue
    cdef long long* gen             # PagedRun.gen, joined, order, redo (0: not preempted)
    cdef long long* joined
    cdef long long* order
    cdef long long* redo
    cdef long long* fin_buf         # the requests a decode stretch just finished
    cdef double* enc_s              # inline encode (multimodal runs)
    cdef bint mm
    cdef long long seq_join, preempted, starts

    def __dealloc__(self):
        free(self.inflight)
        free(self.need)
        free(self.total)
        free(self.done)
        free(self.nxt)
        free(self.gen)
        free(self.joined)
        free(self.order)
        free(self.redo)
        free(self.fin_buf)
        free(self.enc_s)

    cdef void setup(self, object run) except *:
        cdef Py_ssize_t n, k
        cdef NRep rp
        if run.loop.closed or run.batch_wait is not None:
            raise ValueError("the compiled nodg core runs open loop without batch waiting")
        self.open_run(run)
        n = self.n
        self.paged = run.paged
        self.reps = []
        for r in run.reps:
            rp = NRep()
            rp.setup(r, self.paged)
            self.reps.append(rp)
        self.R = len(self.reps)
        self.inflight = longs(run.router.inflight, self.R)
        self.need = <double*>malloc(max(n, 1) * sizeof(double))
        self.total = <double*>malloc(max(n, 1) * sizeof(double))
        self.done = <double*>malloc(max(n, 1) * sizeof(double))
        self.nxt = <long long*>malloc(max(n, 1) * sizeof(long long))
        self.fin_buf = <long long*>malloc(max(n, 1) * sizeof(long long))
        if (self.need == NULL or self.total == NULL or self.done == NULL or self.nxt == NULL
                or self.fin_buf == NULL):
            raise MemoryError()
        if self.paged:  # (preemption's state)
            self.gen = longs(run.gen, n)
            self.joined = longs(run.joined, n)
            self.order = longs(run.order, n)
            self.redo = <long long*>malloc(max(n, 1) * sizeof(long long))
            if self.redo == NULL:
                raise MemoryError()
            if run.redo:
                raise ValueError("the compiled core starts from a fresh run")
            memset(self.redo, 0, max(n, 1) * sizeof(long long))
            self.seq_join, self.preempted = run.seq_join, run.preempted
        self.mm = run.mm
        if self.mm:
            self.enc_s = doubles(run.enc_s, n)
        self.starts = run.starts

    cdef void write_back(self, double t, long long popped, Py_ssize_t i) except *:
        """What Run.go and result read: the replicas, the router, the counts."""
        cdef NRep rp
        cdef Py_ssize_t k
        run = self.py
        for rp in self.reps:
            rp.write_back()
        inflight = run.router.inflight
        for k in range(self.R):
            inflight[k] = self.inflight[k]
        run.starts = self.starts
        if self.paged:
            run.seq_join, run.preempted = self.seq_join, self.preempted
        loop = self.loop
        loop.t = t
        loop.popped = popped
        loop.arrived = i

    # -- the queues (IterationScheduler.waiting, prefilling): linked through `nxt` (a request
    # is in one of them at a time) ------------------------------------------------------------
    cdef inline void q_append(self, Queue* qu, long long q):
        self.nxt[q] = -1
        if qu.tail < 0:
            qu.head = q
        else:
            self.nxt[qu.tail] = q
        qu.tail = q
        qu.n += 1

    cdef inline void q_appendleft(self, Queue* qu, long long q):
        self.nxt[q] = qu.head
        qu.head = q
        if qu.tail < 0:
            qu.tail = q
        qu.n += 1

    cdef inline long long q_popleft(self, Queue* qu):
        cdef long long q = qu.head
        qu.head = self.nxt[q]
        if qu.head < 0:
            qu.tail = -1
        qu.n -= 1
        return q

    # -- IterationScheduler ------------------------------------------------------------------
    cdef void admit(self, NRep rp, long long running, double running_kv):
        """IterationScheduler.admit."""
        cdef double reserved = rp.reserved
        cdef long long q
        while rp.w.n:
            q = rp.w.head
            if running + rp.f.n >= rp.seats or running_kv + reserved + self.need[q] > rp.kv_cap:
                break
            self.q_popleft(&rp.w)
            reserved += self.need[q]
            self.q_append(&rp.f, q)
        rp.reserved = reserved

    cdef inline void take(self, long long q, double c, double* sq, double* enc):
        """A chunk of c tokens of prompt q in the iteration planned: its `done` moved on, the
        Σ L² it adds and, where it starts a multimodal prompt, its inline encode."""
        cdef double d0 = self.done[q]
        cdef double d1 = d0 + c
        self.done[q] = d1
        if self.mm and d1 == c:
            enc[0] += self.enc_s[q]
        sq[0] += d1 * d1 - d0 * d0

    cdef double plan_chunks(self, NRep rp, long long running, double* sq_out, double* enc_out):
        """IterationScheduler.plan: the next iteration's prefill tokens (each prompt's `done`
        moved on), with the Σ L² they add in sq_out and, multimodal, the inline encode of the
        prompts they start (Planner.iteration_s's sum, in the same order) in enc_out."""
        cdef double tokens = 0.0, budget, c
        cdef long long q = rp.f.head
        sq_out[0] = 0.0
        enc_out[0] = 0.0
        if rp.chunked:
            budget = <double>(rp.chunk - running)
            while q >= 0:
                if budget <= 0:
                    break
                c = self.total[q] - self.done[q]
                if c >= budget:
                    if c > budget:
                        c = budget
                    self.take(q, c, sq_out, enc_out)
                    return tokens + c
                self.take(q, c, sq_out, enc_out)
                tokens += c
                budget -= c
                q = self.nxt[q]
            return tokens
        budget = rp.prefill_tokens
        while q >= 0:
            if budget <= 0:
                break
            c = self.total[q] - self.done[q]
            if c > budget and q != rp.f.head:
                break  # a whole prompt over the budget runs alone
            self.take(q, c, sq_out, enc_out)
            tokens += c
            budget -= c
            q = self.nxt[q]
        return tokens

    # -- the handlers -------------------------------------------------------------------------
    cdef int arrive(self, long long q, double t) except -1:
        """Run.arrive (event by event: no solo, no boundary taken ahead)."""
        cdef Py_ssize_t k = 0, j
        cdef NRep rp
        cdef Decode d
        cdef double pre = self.pre_tok[q], tb, need = pre
        cdef long long sb
        for j in range(1, self.R):  # LeastInFlight.pick: the first of the fewest
            if self.inflight[j] < self.inflight[k]:
                k = j
        self.inflight[k] += 1
        rp = <NRep>self.reps[k]
        if not self.paged:  # Run.out_kv: the output's KV too (paged: the prompt's only)
            need = pre + self.out_tok[q]
        if need > rp.kv_cap:  # IterationScheduler.queue: never fits
            self.rejected.append(q)
            self.t_first[q] = INFINITY
            self.t_last[q] = INFINITY
            self.inflight[k] -= 1
            return 0
        self.need[q] = need
        self.total[q] = pre
        self.done[q] = 0.0
        self.q_append(&rp.w, q)
        d = rp.d
        if not rp.active:
            rp.active = True
            rp.busy_since = t
            d.t0 = t
            if q + 1 < self.n_open and self.arr[q + 1] == t:  # Run.wake
                rp.waking = True
                self.heap.push(t, PRIO_TIMER, N_START, k, 0)
                return 0
        elif rp.in_iter or rp.waking:
            return 0
        else:  # decoding only: the next step boundary takes it
            tb = rp.boundary(t, &sb)
            if tb >= rp.ev_t:
                return 0
            rp.ver += 1
            rp.ev_t = tb
            rp.target = sb
            self.heap.push(tb, PRIO_DONE, N_STEP, k, rp.ver)
            return 0
        self.plan(k, rp, t)
        return 0

    cdef int plan(self, Py_ssize_t k, NRep rp, double t) except -1:
        """Planner.plan (no solo, no chunk runs, no batch waiting); paged, with
        PagedDecode's reserved and next_finish."""
        cdef Decode d = rp.d
        cdef long long nd = d.n, n, s, room, sf
        cdef double tokens, sq, enc, ctx, dur, t_end, free_kv, tf
        if rp.w.n:
            self.admit(rp, nd, d.S + nd * d.step if self.paged else d.reserved)
        if rp.f.n:
            tokens = self.plan_chunks(rp, nd, &sq, &enc)
            if tokens > 0:
                n = nd if rp.chunked else 0
                ctx = d.S + nd * d.step
                dur = rp.mixed(n, ctx, tokens, sq)
                if self.mm:
                    dur = enc + dur
                rp.prefill_s += dur
                if dur > rp.max_iter:
                    rp.max_iter = dur
                rp.decodes = n > 0
                rp.in_iter = True
                rp.iters += 1
                rp.target = d.step + 1
                t_end = t + dur
                rp.ver += 1
                rp.ev_t = t_end
                self.heap.push(t_end, PRIO_DONE, N_STEP, k, rp.ver)
                return 0
        if nd > 0:  # ReplicaDecode.next_finish (paged: PagedDecode's, within the KV)
            s = sf = d.run[0].fin
            if self.paged:
                free_kv = rp.kv_cap - rp.reserved - (d.S + nd * d.step)
                room = <long long>py_floordiv(free_kv, <double>nd)
                if room < 1:
                    room = 1
                if d.step + room < sf:
                    s = d.step + room
            tf = d.time_of(s - d.step)
            rp.ver += 1
            rp.ev_t = tf
            rp.target = s
            self.heap.push(tf, PRIO_DONE, N_STEP, k, rp.ver)
        else:
            rp.active = False
            rp.ev_t = INFINITY
            rp.busy_s += t - rp.busy_since
        return 0

    cdef long long advance(self, NRep rp, double t, long long step) except -1:
        """ReplicaDecode.advance (PagedDecode's: with delivery): to boundary `step` at t;
        how many finished there."""
        cdef Decode d = rp.d
        cdef long long m = step - d.step, n = d.n, cnt = 0, i
        cdef double t0 = d.t0, made = 0.0, f
        cdef Run e
        cdef double* t_last = self.t_last
        if rp.deliver:
            made = d.S + n * d.step - rp.prompts
        d.steps_run += step - d.step
        d.step = step
        d.t0 = t
        while d.run_n and d.run[0].fin <= step:
            e = d.run_pop()
            t_last[e.req] = t
            d.n -= 1
            d.S -= e.s
            d.reserved -= e.kv  # (paged: 0.0, and never read)
            self.fin_buf[cnt] = e.req
            cnt += 1
        if rp.deliver:
            for i in range(cnt):
                rp.prompts -= self.pre_tok[self.fin_buf[i]]
            if m > 0 and n:
                f = rp.stretch(t0, t, n, m, made)
                for i in range(cnt):
                    t_last[self.fin_buf[i]] = f
        return cnt

    cdef int joins(self, Py_ssize_t k, NRep rp, long long q, double t) except -1:
        """q finished prefilling at t: Run.step's joining prompt, its KV reserve moved to
        the decode batch (ReplicaDecode.join); paged, PagedRun.joins (a prompt, or a
        preempted request's recompute; no reserve)."""
        cdef Decode d = rp.d
        cdef long long g = 0, left
        cdef double tc = t, s_i, kv = 0.0
        if self.paged:
            g = self.redo[q]
            self.redo[q] = 0
            if rp.deliver:
                tc = rp.one(t)
        else:
            kv = self.need[q]
        if not g:
            self.t_first[q] = tc
        left = self.out_tok[q] - g
        if left <= 1:
            self.t_last[q] = tc
            self.inflight[k] -= 1
            return 0
        if self.paged:
            self.gen[q] = g + 1
            self.joined[q] = d.step
            self.seq_join += 1
            self.order[q] = self.seq_join
            rp.prompts += self.pre_tok[q]
        s_i = (self.total[q] + 1.0) - d.step
        d.run_push(d.step + left - 1, q, s_i, kv)
        d.n += 1
        d.S += s_i
        d.reserved += kv
        return 0

    cdef int make_room(self, NRep rp) except -1:
        """PagedRun.make_room: preempt the newest running while the next step would not
        fit."""
        cdef Decode d = rp.d
        cdef long long q, g
        cdef Run e
        while d.n and d.S + d.n * (d.step + 1) + rp.reserved > rp.kv_cap:
            e = d.pop_newest(self.order)
            q = e.req
            rp.prompts -= self.pre_tok[q]
            g = self.gen[q] + (d.step - self.joined[q])
            self.redo[q] = g
            self.need[q] = self.pre_tok[q] + g
            self.total[q] = self.pre_tok[q] + g
            self.done[q] = 0.0
            self.q_appendleft(&rp.w, q)
            self.preempted += 1
        return 0

    cdef int step(self, Py_ssize_t k, NRep rp, double t) except -1:
        """Run.step (paged: PagedRun.step): rp's iteration ended at t (the prompts it
        finished join the decode batch), or its decode stretch reached its target."""
        cdef Decode d = rp.d
        cdef long long nfin = 0, q
        if rp.in_iter:
            rp.in_iter = False
            if rp.decodes:
                nfin = self.advance(rp, t, rp.target)
            else:
                d.t0 = t
            while rp.f.n and self.done[rp.f.head] >= self.total[rp.f.head]:  # pop_done
                q = self.q_popleft(&rp.f)
                rp.reserved -= self.need[q]
                self.joins(k, rp, q, t)
        else:
            nfin = self.advance(rp, t, rp.target)
        self.inflight[k] -= nfin  # Run.left (open loop)
        if self.paged:
            self.make_room(rp)
        self.plan(k, rp, t)
        return 0

    cdef int handle(self, Ev* ev) except -1:
        cdef NRep rp = <NRep>self.reps[ev.obj]
        if ev.kind == N_STEP:
            if ev.a == rp.ver:  # else superseded
                self.step(ev.obj, rp, ev.t)
        else:  # N_START: Run.start (no solo)
            self.starts += 1
            rp.waking = False
            self.plan(ev.obj, rp, ev.t)
        return 0


def run_nodg(object nodg_run):
    """Run `nodg_run` (a fresh hastune.sim.nodg.run.Run or PagedRun: open loop, arrays, no
    batch waiting) to its end in compiled code: Run as with `ahead` off, event for event."""
    cdef NoDGCore core = NoDGCore()
    core.setup(nodg_run)
    core.loop_run()


# ---------------------------------------------------------------------------------------
# the stop rule's watcher (hastune.sim.stoprule.Watcher), for every simulator

cdef class Watcher:
    """hastune.sim.stoprule.Watcher in C: the same flags, counts and answers at every check
    (tests/sim/test_events.py compares them); the undecided requests are an array of
    (request, flags) instead of a dict (the counts do not depend on the order)."""

    cdef public object rule
    cdef public object arr, t_first, t_last, out  # lists, or arrays (the compiled core's)
    cdef bint arrays                # arrays: read through these
    cdef double* a_p
    cdef double* tf_p
    cdef double* tl_p
    cdef long long* out_p
    cdef public long long n, w, every, seen, late, slow, either
    cdef public double allowed
    cdef long long* o_req
    cdef int* o_flags
    cdef Py_ssize_t o_n, o_cap
    cdef double ttft_s, tpot_s, quantile, clear
    cdef bint union

    def __cinit__(self):
        self.o_cap = 256
        self.o_n = 0
        self.o_req = <long long*>malloc(self.o_cap * sizeof(long long))
        self.o_flags = <int*>malloc(self.o_cap * sizeof(int))
        if self.o_req == NULL or self.o_flags == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.o_req)
        free(self.o_flags)
        if self.arrays:
            free(self.out_p)

    def __init__(self, rule, arr, t_first, t_last, out_tok):
        """arr, t_first, t_last, out_tok: the run's lists (the Python simulators'), or its
        arrays (the compiled core's: float64, and output tokens as integers)."""
        cdef Py_ssize_t n = len(arr)
        self.rule, self.arr = rule, arr
        self.t_first, self.t_last, self.out = t_first, t_last, out_tok
        self.arrays = not isinstance(t_first, list)
        if self.arrays:
            if not isinstance(arr, np.ndarray) or arr.dtype != np.float64:
                self.arr = arr = np.asarray(arr, dtype=np.float64)
            self.a_p = f64_ptr(arr, n, "arrivals")
            self.tf_p = f64_ptr(t_first, n, "t_first")
            self.tl_p = f64_ptr(t_last, n, "t_last")
            self.out_p = longs(out_tok, n)  # a copy: output tokens do not change
        self.ttft_s, self.tpot_s = rule.ttft_s, rule.tpot_s
        self.quantile, self.clear, self.union = rule.quantile, rule.clear, rule.union
        self.horizon(len(arr))

    def horizon(self, long long n):
        """Judge the run as one of its first `n` requests (counts start again)."""
        self.n = n
        self.w = int(self.rule.warmup * n)
        self.allowed = (1.0 - self.rule.quantile) * (n - self.w) + 1.0
        self.every = max(256, n // 64)
        self.seen = self.w
        self.o_n = 0
        self.late = self.slow = self.either = 0

    cdef object need(self, long long i):
        if i - self.w <= self.allowed:
            return None
        return max(self.allowed, self.clear * (1.0 - self.quantile) * (i - self.w))

    def failed(self, long long i, double t):
        """Whether the requests arrived so far (i of them; at most the horizon's) already
        fail the run at time t."""
        cdef long long j, late, slow, either, outj
        cdef Py_ssize_t k, kept
        cdef int flags, new
        cdef double a, tf, tl, need_d, pace
        cdef bint waiting, final_slow, ended
        cdef object arr = self.arr, tf_ = self.t_first, tl_ = self.t_last, out_ = self.out
        cdef bint arrays = self.arrays
        if i > self.n:
            i = self.n
        need = self.need(i)
        if need is None:
            return False
        need_d = need
        if self.seen < i:
            if self.o_n + (i - self.seen) > self.o_cap:
                self.o_cap = 2 * (self.o_n + (i - self.seen))
                self.o_req = <long long*>realloc(self.o_req, self.o_cap * sizeof(long long))
                self.o_flags = <int*>realloc(self.o_flags, self.o_cap * sizeof(int))
                if self.o_req == NULL or self.o_flags == NULL:
                    raise MemoryError()
            for j in range(self.seen, i):
                self.o_req[self.o_n] = j
                self.o_flags[self.o_n] = 0
                self.o_n += 1
            self.seen = i
        late, slow, either = self.late, self.slow, self.either
        kept = 0
        for k in range(self.o_n):
            j = self.o_req[k]
            flags = self.o_flags[k]
            if arrays:
                a = self.a_p[j]
                tf = self.tf_p[j]
            else:
                a = (<list>arr)[j]
                tf = (<list>tf_)[j]
            new = flags
            waiting = tf != tf
            if not new & 1 and (t if waiting else tf) - a > self.ttft_s:
                new |= 1
            outj = self.out_p[j] if arrays else (<list>out_)[j]
            final_slow = outj <= 1 or (new & 2) != 0
            if not final_slow and not waiting:
                tl = self.tl_p[j] if arrays else (<list>tl_)[j]
                ended = tl == tl
                pace = outj - 1.0
                if pace < 1.0:
                    pace = 1.0
                if ((tl if ended else t) - tf) / pace > self.tpot_s:
                    new |= 2
                    final_slow = True
                elif ended:
                    final_slow = True
            if new != flags:
                late += (new & 1) > (flags & 1)
                slow += (new & 2) > (flags & 2)
                either += flags == 0
            if final_slow and (not waiting or new & 1):
                continue  # decided: out of the open ones
            self.o_req[kept] = j
            self.o_flags[kept] = new
            kept += 1
        self.o_n = kept
        self.late, self.slow, self.either = late, slow, either
        if self.union:
            return either > need_d
        return late > need_d or slow > need_d

    def failed_reference(self, i, t):
        from hastune.sim.stoprule import Watcher as PyWatcher
        return PyWatcher.failed_reference(self, i, t)
