"""Discrete-event simulation of `nodg` (vLLM-like) deployments: full replicas that prefill
and decode on the same GPUs.

A request goes to the replica with the fewest requests in flight (hastune.policies
`LeastInFlight`), waits FIFO until its KV (prompt + output, reserved up front, no preemption)
and a batch slot are free, then prefills (hastune.policies `IterationScheduler`):

- chunked (`chunk_tokens` = T, Sarathi-style): every iteration decodes each running sequence
  once and fills the rest of the T-token budget with prefill chunks (FIFO). The chunk's cost is
  added to the decode step, so a decode step never stalls longer than one chunk's worth;
- unchunked (`chunk_tokens: null`, vLLM's default): waiting prompts run as prefill-only
  iterations (up to the profile's `max_batch_tokens`) and decoding pauses meanwhile.

The first token comes at the end of the iteration that finishes the prompt; the request joins
the decode batch at the next iteration. Multimodal requests are encoded inline, in the
iteration that carries their first chunk. Between iterations that carry prefill work the
decode batch advances in closed form (hastune.sim.instance.ReplicaDecode), so a long output
costs no more than a short one; and what is already known runs as one event: a long prompt's
consecutive chunk iterations up to the next decode finish, with the one that finishes it —
taken back (`retract`) if a request joins the queue before it starts, as that request could
share it — timed with the same float operations as one by one (InstanceTiming.mixed_run),
and the step boundary an arrival at a decoding replica waits for when nothing arrives before
it. Same timestamps, fewer events (tests/sim/test_nodg_runs.py checks against one event
each). The run itself is hastune.sim.nodg.run (state, loop, handlers) and
hastune.sim.nodg.plan (what each next iteration carries).

An open-loop run without TensorRT-LLM's batch waiting takes the compiled core where it was
built (hastune.sim._core.run_nodg; `NoDGSimulator.compiled`): with KV on demand (vLLM's and
SGLang's engine terms: hastune.sim.nodg.paged, event by event) the same run, event for event;
the reserved-KV run above event by event too (`Run.ahead` off), so the same timestamps and
statistics as its shortcuts with more events (tests/sim/test_core.py). Closed-loop runs and
batch waiting stay in Python.
"""

from __future__ import annotations

from hastune.archs.nodg import NoDGConfig
from hastune.cluster import Cluster
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.sim.common import check_gpus
from hastune.sim.compiled import core_name
from hastune.sim.instance import InstanceTiming
from hastune.sim.nodg.run import Run
from hastune.sim.result import RunResult
from hastune.sim.stoprule import StopRule
from hastune.workload import RequestSet


class NoDGSimulator:
    """Simulates one nodg deployment; `run(requests, rate)` is deterministic. Open-loop paged
    runs without batch waiting take the compiled core where it was built (`compiled`)."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed
    core: str | None = None  # "python" or "compiled" for this simulator (None: core_name())

    def __init__(self, profile: Profile, cluster: Cluster, config: NoDGConfig,
                 warmup: float = 0.1, slo: SLO | None = None):
        check_gpus(config, cluster)
        self.profile, self.cluster, self.config, self.warmup = profile, cluster, config, warmup
        g = config.instance_gpus
        self.timings = [InstanceTiming(profile, config.tp, config.pp, cluster, first_gpu=i * g,
                                      ep=config.ep) for i in range(config.replicas)]

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        if self.profile.kv_on_demand:  # paged KV with preemption (hastune.sim.nodg.paged)
            from hastune.sim.nodg.paged import PagedRun

            return PagedRun(self, reqs, rate, lists=not self.compiled(reqs)).go()
        return Run(self, reqs, rate, lists=not self.compiled(reqs)).go()

    def compiled(self, reqs: RequestSet) -> bool:
        """Whether a run of `reqs` takes the compiled core: where it was built (and not
        HASTUNE_SIM_CORE=python or `core`), in open loop (closed-loop clients, the benchmarks',
        stay in Python) and without TensorRT-LLM's batch waiting (not ported). The reserved-KV
        run there is `Run` with `ahead` off, event for event: the timestamps and statistics of
        its Python shortcuts, and more events."""
        waits = self.config.chunk_tokens is not None and self.profile.batch_wait[0] > 0
        return core_name(self.core) == "compiled" and reqs.think_s is None and not waits
