"""What adding an architecture with a simulator of its own takes: its module, its simulator
package, its search space and one registry line — four files, nothing else in hastune.

The toy `fifo` below (replicas that serve one request at a time: its prompt, then its output
one token per decode step at batch 1) is written to a temporary folder as
  plugin_archs/fifo.py             the architecture module (config + Architecture)
  plugin_sims/fifo/__init__.py     its simulator package (face)
  plugin_sims/fifo/run.py          its simulator (EventLoop + build_result, as every one)
  fifo.yaml                        its search space
and registered with `archs.register` (the line MODULES in hastune/archs/__init__.py would
hold). It is then parsed, enumerated, pruned, simulated against its own closed form, searched
for goodput, tuned, exported, caveated and refused by the engine like the shipped ones."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from hastune.caveats import caveats
from hastune.config import parse_config
from hastune.errors import InputError
from hastune.evaluators import make_evaluator
from hastune.evaluators.sim import Evaluation
from hastune.export import export
from hastune.recipe import load_recipe
from hastune.sim.frontend import frontend_delays, in_flight_at
from hastune.space import load_space
from tests.conftest import EXAMPLES, QUICK
from tests.export.test_flags import target_for
from tests.test_new_architecture import plugged, prunes_and_tunes

ARCH_MODULE = '''
"""`fifo` — replicas that serve one request at a time, first come first served."""

from typing import Literal

from pydantic import Field

from hastune.archs.base import ConfigBase, Parallel
from hastune.archs.replicas import Colocated


class FifoConfig(ConfigBase, Parallel):
    gpu_terms = (("tp", "pp", "replicas"),)
    architecture: Literal["fifo"]
    replicas: int = Field(ge=1, le=1024)


class Fifo(Colocated):
    name = "fifo"
    config = FifoConfig
    summary = "replicas serving one request at a time"
    simulator_class = "plugin_sims.fifo:FifoSimulator"
    simulator_reads_slo = False
    pool_word = "replicas"
    count_field = "replicas"
    not_runnable = "it is a demonstration"


ARCH = Fifo()
'''

SIM_FACE = '''
"""The `fifo` simulator."""

from plugin_sims.fifo.run import FifoSimulator

__all__ = ["FifoSimulator"]
'''

SIM_RUN = '''
"""One replica serves one request at a time: its prompt (the profile's prefill of its
tokens), then one decode step at batch 1 per further output token; a request goes to the
replica free first (the lowest index on a tie)."""

import time
from heapq import heappush

from hastune.sim.common import ARRIVE, EventLoop, build_result, check_gpus, request_lists
from hastune.sim.events import PRIO_DONE
from hastune.sim.instance import InstanceTiming

DONE = 1


class FifoSimulator:
    stop_rule = None

    def __init__(self, profile, cluster, config, warmup=0.1):
        check_gpus(config, cluster)
        self.config, self.warmup = config, warmup
        self.tm = InstanceTiming(profile, config.tp, config.pp, cluster, ep=config.ep)

    def service(self, tokens, out):
        """(time to the first token, time from it to the last) of one request alone."""
        tm = self.tm
        return tm.prefill_latency(tokens, tokens * tokens), (out - 1) * tm.decode.step(1, tokens)

    def run(self, reqs, rate):
        wall0 = time.perf_counter()
        loop = EventLoop(reqs, rate, streams=self.config.replicas)
        pre, _, out, _, t_first, t_last, rejected = request_lists(reqs)
        loop.watch(self.stop_rule, t_first, t_last, out, rejected)
        free = [0.0] * self.config.replicas
        spans = []  # (start, end) of each request's service

        def arrive(r, t):
            k = min(range(len(free)), key=free.__getitem__)
            first, rest = self.service(pre[r], out[r])
            start = max(t, free[k])
            t_first[r], t_last[r] = start + first, start + first + rest
            free[k] = t_last[r]
            spans.append((start, t_last[r]))
            heappush(loop.heap, (t_last[r], PRIO_DONE, next(loop.seq), DONE, r, None))

        for t, _, _, kind, r, _ in loop.events(arrive):
            if kind == ARRIVE:
                arrive(r, t)
            else:
                loop.finished(r, t)
        end = loop.t  # a run the stop rule ended early counts its service up to then
        used = sum(min(b, end) - min(a, end) for a, b in spans)
        util = {"replica": used / (len(free) * loop.span())}
        return build_result(rate, loop, t_first, t_last, out, rejected, self.warmup, util,
                            wall0)
'''

SPACE = {"architecture": "fifo", "budget": "exact",
         "params": {"tp": [1, 2], "pp": [1], "replicas": {"low": 1}}}


@pytest.fixture
def fifo(tmp_path, monkeypatch):
    files = {"plugin_archs/__init__.py": "", "plugin_archs/fifo.py": ARCH_MODULE,
             "plugin_sims/__init__.py": "", "plugin_sims/fifo/__init__.py": SIM_FACE,
             "plugin_sims/fifo/run.py": SIM_RUN, "fifo.yaml": yaml.safe_dump(SPACE)}
    with plugged(tmp_path, monkeypatch, files, "plugin_archs.fifo") as d:  # the registry line
        yield d


def _recipe(tmp_path, requests=300):
    data = yaml.safe_load((EXAMPLES / "audio-ultravox-8xa100.yaml").read_text())
    data.update({"architecture": "fifo", "search_space": "fifo.yaml",
                 "evaluator": {**QUICK, "max_probes": 30}})
    data["cluster"]["gpus"] = 4
    data["workload"]["requests"] = requests
    p = tmp_path / "recipe.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_recipe(p)


def test_a_simulator_of_its_own_is_four_files_and_one_line(fifo):
    rec = _recipe(fifo)
    cfg = parse_config({"architecture": "fifo", "tp": 1, "replicas": 4})
    assert cfg.gpus == 4 and {c.replicas for c in load_space(fifo / "fifo.yaml").configs(4)} \
        == {4, 2}
    ev = Evaluation(rec)
    sim = ev.simulator(cfg)
    assert type(sim).__module__ == "plugin_sims.fifo.run"

    # at a rate so low that no request waits for a replica, each one's TTFT is the engine's
    # front end (the shared EventLoop's, from the recipe's engine terms: its fixed delay, and
    # its wait per request in flight on the rare overlap) and its prefill alone, and its TPOT
    # one batch-1 decode step at its prompt's length: the simulator's closed form
    reqs = ev.requests_at(0.01)
    assert reqs.frontend is not None and reqs.frontend.per_stream_s >= 0
    run = sim.run(reqs, 0.01)
    first = [sim.service(float(p), int(o))[0] for p, o in
             zip(reqs.prefill_tokens, reqs.output_tokens)]
    waits = reqs.frontend.per_stream_s / 4 * in_flight_at(run.arrival, run.finish)
    np.testing.assert_allclose(run.ttft, np.add(first, frontend_delays(reqs)) + waits,
                               rtol=1e-9)
    rest = [sim.service(float(p), int(o))[1] / (int(o) - 1) for p, o in
            zip(reqs.prefill_tokens, reqs.output_tokens) if o > 1]
    np.testing.assert_allclose(run.tpot[reqs.output_tokens > 1], rest, rtol=1e-9)
    # busier: requests queue, so TTFT grows with the rate and the replicas fill up
    busy = sim.run(ev.requests_at(50.0), 50.0)
    assert np.median(busy.ttft) > np.median(run.ttft)
    assert 0.0 < run.utilisation["replica"] < busy.utilisation["replica"] <= 1.0

    g = ev.goodput(cfg)
    assert g.goodput_rps > 0
    two = ev.goodput(parse_config({"architecture": "fifo", "tp": 1, "replicas": 2}))
    assert two.goodput_rps <= g.goodput_rps  # half the replicas never sustain more

    prunes_and_tunes(rec, ev, load_space(fifo / "fifo.yaml"), "fifo", fifo / "out")

    res = export(cfg, target_for(cfg), "sglang", fifo / "sglang")
    assert res.written and [i.role for i in res.plan.instances] == ["replica"] * 4
    assert any("fifo with them has not been checked" in c
               for c in caveats({"engine": "sglang", "on": True}, cfg, 1.0))
    with pytest.raises(InputError, match="does not run fifo"):
        make_evaluator("real", rec).check(cfg)
