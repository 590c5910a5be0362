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

One run's state and event handlers live in hastune.sim.padg.run, the instances' and
macro-instances' state in hastune.sim.padg.state; mitosis (`mitosis: true`, for time-varying
rates) in hastune.sim.padg.scaling.
"""

from __future__ import annotations

import time

from hastune.archs.padg import PaDGConfig
from hastune.cluster import Cluster
from hastune.policies import Verdict
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.runs import RunResult
from hastune.sim.common import build_result, check_gpus
from hastune.sim.instance import InstanceTiming
from hastune.sim.padg.run import PaDGRun
from hastune.sim.stoprule import StopRule
from hastune.workload import RequestSet


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
        self.timings = [InstanceTiming(profile, config.tp, config.pp, cluster, first_gpu=i * g,
                                      ep=config.ep) for i in range(total)]
        self.last: dict = {}

    def groups(self, n: int) -> list[list[int]]:
        """Instances 0..n−1 in as few macro-instances of at most N_u as possible, balanced."""
        k = -(-n // self.config.n_upper)
        return [list(range(n))[j::k] for j in range(k)]

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        wall0 = time.perf_counter()
        if self.profile.kv_on_demand:  # paged KV with preemption (hastune.sim.padg.paged)
            from hastune.sim.padg.paged import PagedPaDGRun

            run: PaDGRun = PagedPaDGRun(self, reqs, rate)
        else:
            run = PaDGRun(self, reqs, rate)
        run.events()
        sc = run.scaler
        self.last = {"instances": run.insts, "macros": run.macros, "home": run.home,
                     "decoded_on": run.decoded_on,
                     "timeline": sc.timeline if sc is not None else [],
                     "scaling": sc.events if sc is not None else []}
        util, extra = summary(run)
        return build_result(rate, run.loop, run.t_first, run.t_last, run.out_tok, run.rejected,
                            self.warmup, util, wall0, extra)


def summary(run: PaDGRun) -> tuple[dict[str, float], dict[str, float]]:
    """A finished run's utilisation (share of instance-time in prefill windows, in decode)
    and its extra figures (windows, refusals by check)."""
    insts, refused = run.insts, run.refused
    N = len(insts)
    span = run.loop.span()
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
             "refused_ttft": float(refused[Verdict.TTFT]),
             "refused_slack": float(refused[Verdict.TPOT]),
             "refused_memory": float(refused[Verdict.MEMORY]),
             "network_GB": 0.0}  # no KV ever leaves its instance
    if hasattr(insts[0].dec, "preempted"):  # KV on demand (hastune.sim.padg.paged)
        extra["preemptions"] = float(sum(x.dec.preempted for x in insts))
    return util, extra
