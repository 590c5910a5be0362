"""Discrete-event simulation of `padg` (EcoServe) deployments: partially disaggregated
instances — full replicas that alternate whole prefill windows and decode windows, so no KV
ever leaves an instance.

Requests go to a macro-instance (smooth weighted round robin over their sizes, preferring one
with nobody waiting). Its scheduler offers the oldest waiting request to its instances in
rolling order (hastune.policies.RollingActivation) and gives it to the first that passes the
three admission checks (hastune.policies.Admission: TTFT, saved TPOT, memory); if none
passes, the request waits and is offered again when an instance reports — a window closes, a
request finishes, or every `status_interval_ms`.

An instance that takes a request while decoding finishes its current decode step, then opens a
prefill window: it prefills every request it has been given, in batches of up to
`max_batch_tokens` that pipeline through its `pp` stages, for as long as requests keep coming.
When the last batch ends the window closes: the window's requests get their first token then
(TTFT includes the wait for this phase switch, as in the paper) and join the decode batch,
which resumes in closed form (hastune.sim.instance.ReplicaDecode). Decoding requests make no
progress during a window; check (2) bounds the stall by their saved TPOT.

Mitosis (`mitosis: true`, for time-varying rates) lives in hastune.sim.padg_scaling.
"""

from __future__ import annotations

import math
import time
from heapq import heappush

from hastune.cluster import Cluster
from hastune.config import PaDGConfig
from hastune.policies import Admission, SlackTracker
from hastune.policies.rolling import pick_macro as pick_macro_wrr
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.sim.common import ARRIVE, EventLoop, StopRule, build_result, check_gpus, request_lists
from hastune.sim.events import PRIO_DONE, PRIO_TIMER
from hastune.sim.instance import InstanceTiming
from hastune.sim.padg_state import DECODE, PREFILL, SWITCHING, Inst, Macro
from hastune.sim.result import RunResult
from hastune.workload import RequestSet

# event kinds after common.ARRIVE (0), a closed-loop client's next request
SWITCH, DEC, PF_DONE, PF_NEXT, RETRY, SCALE, READY = range(1, 8)


class PaDGSimulator:
    """Simulates one padg deployment; `run(requests, rate)` is deterministic. After a run,
    `last` holds the instances and macro-instances (tests and the mitosis timeline read it)."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed

    def __init__(self, profile: Profile, cluster: Cluster, config: PaDGConfig,
                 warmup: float = 0.1, slo: SLO | None = None):
        check_gpus(config, cluster)
        if slo is None:
            raise ValueError("padg's admission needs the recipe's SLOs")
        self.profile, self.cluster, self.config, self.slo = profile, cluster, config, slo
        self.warmup = warmup
        total = config.max_instances if config.mitosis and config.max_instances else \
            config.instances
        g = config.instance_gpus
        self.timings = [InstanceTiming(profile, config.tp, config.pp, cluster, first_gpu=i * g)
                        for i in range(total)]
        self.last: dict = {}

    def groups(self, n: int) -> list[list[int]]:
        """Instances 0..n−1 in as few macro-instances of at most N_u as possible, balanced."""
        k = -(-n // self.config.n_upper)
        return [list(range(n))[j::k] for j in range(k)]

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        wall0 = time.perf_counter()
        cfg, slo = self.config, self.slo
        n = len(reqs)
        loop = EventLoop(reqs, rate)
        arr, heap, seq, done = loop.arr, loop.heap, loop.seq, loop.finished
        pre, enc_tok, out_tok, mm, t_first, t_last, rejected = request_lists(reqs)
        loop.watch(self.stop_rule, t_first, t_last, out_tok)
        home = [-1] * n        # the instance that admitted each request ...
        decoded_on = [-1] * n  # ... and the one that produced its last token
        refused = [0, 0, 0, 0]  # admission attempts refused by check 1, 2, 3
        tm0 = self.timings[0]
        enc_lat = [tm0.encode_latency(1, x, x * x) if x > 0 else 0.0 for x in enc_tok]
        est = [e + tm0.prefill_stage(L, L * L) for e, L in zip(enc_lat, pre)]
        need = [L + o for L, o in zip(pre, out_tok)]
        insts = [Inst(i, tm, SlackTracker(slo.tpot_s, cfg.slack, cfg.slack_quantile))
                 for i, tm in enumerate(self.timings)]
        for x in insts:
            x.cap = x.tm.kv_cap_mm if mm else x.tm.kv_cap_text
        cap = insts[0].cap
        macros = [Macro(g) for g in self.groups(cfg.instances)]
        for m in macros:
            for k in m.rolling.members:
                insts[k].macro = m
        for x in insts[cfg.instances:]:
            x.active = False
        adm = Admission(slo.ttft_s)
        status = cfg.status_interval_ms / 1e3
        pp1 = cfg.pp == 1

        def push(t: float, prio: int, kind: int, a: object, b: object = None) -> None:
            heappush(heap, (t, prio, next(seq), kind, a, b))

        def passes(x: Inst, r: int, t: float) -> bool:
            d = x.dec
            if x.phase == PREFILL:
                window = t - x.win_start
                left = x.last_done - t
                pending = x.pending_s + (left if left > 0.0 else 0.0)
                saved = x.slack.saved(d.step, t)
                empty = False
            else:
                pending = x.pending_s
                if d.n > 0:
                    if x.phase == SWITCHING:
                        tb, sb = x.ev_t, x.target
                    else:
                        tb, sb = d.boundary(t)
                    saved = x.slack.saved(sb, tb)
                    window = tb - t
                else:
                    saved, window = math.inf, 0.0
                empty = pending == 0.0
            seats = x.seats - d.n - len(x.win) - len(x.queue)
            why = adm.check(window, pending, est[r], saved, x.cap - d.reserved - x.kv_other,
                            need[r], seats, empty)
            refused[why] += 1
            return why == 0

        def start(x: Inst, t: float) -> None:
            q = x.queue
            if x.stage_busy or not q:
                return
            lim = x.tm.max_batch_tokens
            batch: list[int] = []
            tokens = sq = enc = work = 0.0
            while q:
                r = q[0]
                L = pre[r]
                if batch and tokens + L > lim:
                    break
                q.popleft()
                batch.append(r)
                tokens += L
                sq += L * L
                enc += enc_lat[r]
                work += est[r]
            x.pending_s = x.pending_s - work if q else 0.0
            lat = enc + x.tm.prefill_latency(tokens, sq)
            x.in_flight += 1
            if t + lat > x.last_done:
                x.last_done = t + lat
            x.stage_busy = True
            push(t + lat, PRIO_DONE, PF_DONE, x, batch)
            if not pp1:
                push(t + enc + x.tm.prefill_stage(tokens, sq), PRIO_DONE, PF_NEXT, x)

        def open_window(x: Inst, t: float) -> None:
            x.phase = PREFILL
            x.win_start = t
            x.windows += 1
            start(x, t)

        def plan_decode(x: Inst) -> None:
            nf = x.dec.next_finish()
            if nf is not None:
                x.ver += 1
                x.ev_t, x.target = nf
                push(nf[0], PRIO_DONE, DEC, x, x.ver)

        def admit(x: Inst, r: int, t: float) -> None:
            home[r] = x.id
            x.queue.append(r)
            x.pending_s += est[r]
            x.kv_other += need[r]
            if x.phase == DECODE:
                d = x.dec
                if d.n > 0:
                    tb, sb = d.boundary(t)
                    x.phase = SWITCHING
                    x.ver += 1
                    x.ev_t, x.target = tb, sb
                    push(tb, PRIO_DONE, SWITCH, x, x.ver)
                else:
                    open_window(x, t)
            elif x.phase == PREFILL:
                start(x, t)

        def pump(m: Macro, t: float) -> None:
            """Offer the macro-instance's waiting requests, oldest first."""
            q = m.queue
            while q:
                r = q[0]
                for k in m.rolling.candidates():
                    x = insts[k]
                    if passes(x, r, t):
                        admit(x, r, t)
                        m.rolling.took(k)
                        q.popleft()
                        break
                else:
                    if m.blocked_since is None:
                        m.blocked_since = t
                    # offer it again at the next status report after the first moment a
                    # decoding instance's slack could cover it; windows closing and requests
                    # finishing (the other ways a check can turn) re-offer it themselves
                    when = max(next_chance(m, r, t), t + status)
                    if when < m.timer:
                        m.timer = when
                        m.tver += 1
                        push(when, PRIO_TIMER, RETRY, m, m.tver)
                    return
            m.blocked_since = None

        def next_chance(m: Macro, r: int, t: float) -> float:
            best = math.inf
            need_s = est[r]
            for k in m.rolling.members:
                x = insts[k]
                if x.phase == DECODE and x.slack.n:
                    w = x.dec.first_boundary_where(slo.tpot_s, x.slack.stat_key(), need_s, t)
                    if w < best:
                        best = w
            return best

        def pick_macro() -> Macro:
            if len(macros) == 1:
                return macros[0]
            return pick_macro_wrr(macros, lambda m: len(m.rolling.members))  # type: ignore

        def arrive(r: int, t: float) -> None:
            if need[r] > cap:
                rejected.append(r)
                t_first[r] = t_last[r] = math.inf
                done(r, t)
                return
            m = pick_macro()
            waiting = bool(m.queue)
            m.queue.append(r)
            if not waiting:
                pump(m, t)

        def end_window(x: Inst, t: float) -> None:
            d = x.dec
            d.t0 = t
            steps = d.step
            sl = x.slack
            m = x.macro
            for r in x.win:
                t_first[r] = t
                m.ttft_sum += t - arr[r]
                m.ttft_n += 1
                x.kv_other -= need[r]
                if out_tok[r] <= 1:
                    t_last[r] = t
                    decoded_on[r] = x.id
                    done(r, t)
                else:
                    key = sl.key(t, steps)
                    d.join(r, pre[r] + 1.0, out_tok[r], need[r], key)
                    sl.add(key)
            x.window_reqs += len(x.win)
            x.win.clear()
            x.prefill_s += t - x.win_start
            x.phase = DECODE
            x.pending_s = 0.0
            if d.n > 0:
                x.decode_since = t
                plan_decode(x)
            if m.queue:
                pump(m, t)

        scaler = None
        if cfg.mitosis:
            from hastune.sim.padg_scaling import Scaler

            scaler = Scaler(self, insts, macros, push, pump)
            push(cfg.scale_interval_s, PRIO_TIMER, SCALE, None)

        for t, _, _, kind, x, b in loop.events(arrive):
            if kind == DEC or kind == SWITCH:
                if b != x.ver:
                    continue
                d = x.dec
                if d.n > 0:
                    x.decode_s += t - x.decode_since
                    x.decode_since = t
                for e in d.advance(t, x.target, t_last):
                    x.slack.remove(e[4])
                    decoded_on[e[1]] = x.id
                    done(e[1], t)
                if kind == SWITCH:
                    open_window(x, t)
                    continue
                if d.n == 0:
                    if scaler is not None and x.draining and x.idle:
                        scaler.retire(x, t)
                else:
                    plan_decode(x)
                m = x.macro
                if m.queue:
                    pump(m, t)
            elif kind == PF_DONE:
                x.in_flight -= 1
                x.win.extend(b)
                if pp1:
                    x.stage_busy = False
                    start(x, t)
                if x.in_flight == 0 and not x.queue:
                    end_window(x, t)
                    if scaler is not None and x.draining and x.idle:
                        scaler.retire(x, t)
            elif kind == PF_NEXT:
                x.stage_busy = False
                start(x, t)
            elif kind == RETRY:
                if b == x.tver:
                    x.timer = math.inf
                    pump(x, t)
            elif kind == ARRIVE:
                arrive(x, t)
            elif kind == SCALE:
                if len(heap) > 0 or loop.arrived < loop.n_open:
                    scaler.step(t)  # type: ignore[union-attr]
                    push(t + cfg.scale_interval_s, PRIO_TIMER, SCALE, None)
            elif kind == READY:
                scaler.ready(x, b, t)  # type: ignore[union-attr]

        N = len(insts)
        span = loop.span()
        pf_s = sum(x.prefill_s for x in insts)
        dec_s = sum(x.decode_s for x in insts)
        util = {"prefill": pf_s / (N * span), "decode": dec_s / (N * span)}
        util["gpus"] = util["prefill"] + util["decode"]
        windows = sum(x.windows for x in insts)
        extra = {"windows": float(windows),
                 "mean_window_s": pf_s / windows if windows else 0.0,
                 "mean_window_requests": (sum(x.window_reqs for x in insts) / windows
                                          if windows else 0.0),
                 "decode_steps": float(sum(x.dec.steps_run for x in insts)),
                 "refused_ttft": float(refused[1]), "refused_slack": float(refused[2]),
                 "refused_memory": float(refused[3]),
                 "network_GB": 0.0}  # no KV ever leaves its instance
        self.last = {"instances": insts, "macros": macros, "home": home,
                     "decoded_on": decoded_on,
                     "timeline": scaler.timeline if scaler is not None else [],
                     "scaling": scaler.events if scaler is not None else []}
        return build_result(rate, loop, t_first, t_last, out_tok, rejected, self.warmup, util,
                            wall0, extra)
