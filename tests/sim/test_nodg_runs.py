"""The nodg simulator's shortcuts change no result: a prompt's consecutive chunk iterations run
as one event (the last one taken back when a request joins before it starts), the open loop
has its own event loop, and an arrival at a decoding replica takes the next step boundary at
once, with
the timestamps of the event-by-event simulation (`Run.ahead = False`) — bit for bit, on long
prompts, payloads encoded inline, pipeline stages, closed loop and runs stopped early; only
the event count drops. The shortcuts are the reserved-KV run's (`Run`; TensorRT-LLM's, and
any engine's with its terms off): paged KV on demand (`PagedRun`, vLLM's and SGLang's terms)
steps event by event, so these recipes run with `engine: {terms: false}`."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from hastune.model_ref import Engine
from hastune.recipe import load_recipe
from hastune.sim.nodg.run import Run as NoDGRun
from tests.sim.replica_recipes import recipe


def _same(a, b) -> None:
    for f in ("ttft", "tpot", "arrival", "finish"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), f
    assert (a.rejected, a.sim_time_s, a.utilisation) == (b.rejected, b.sim_time_s, b.utilisation)
    assert a.extra == b.extra


def _kernels(rec):
    """The recipe with its engine terms off: the reserved-KV run whose shortcuts are tested."""
    return rec.model_copy(update={"engine": Engine(name=rec.engine.name, terms=False)})


def _both(ev: Evaluation, spec: dict, rate: float, n: int, monkeypatch):
    sim = ev.simulator(parse_config(spec))
    sim.core = "python"  # the shortcuts are the Python path's (the compiled core runs open
    # loop event by event: tests/sim/test_core.py)
    reqs = ev.requests_at(rate, n)
    fast = sim.run(reqs, rate)
    monkeypatch.setattr(NoDGRun, "ahead", False)
    slow = sim.run(reqs, rate)
    monkeypatch.setattr(NoDGRun, "ahead", True)
    _same(fast, slow)
    return fast, slow


@pytest.fixture(scope="module")
def long_prompts(root):
    return Evaluation(_kernels(load_recipe(root / "benchmarks" / "nodg-long-prompts.yaml")))


@pytest.mark.parametrize("rate", [0.5, 0.65, 3.0])  # 3 req/s fails: the run stops early
def test_chunk_runs_keep_every_timestamp_on_long_prompts(long_prompts, rate, monkeypatch):
    spec = {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 512}
    fast, slow = _both(long_prompts, spec, rate, 1500, monkeypatch)
    stopped = "stopped_early_s" in fast.extra
    assert stopped == (rate > 1)
    assert fast.events < (1.0 if stopped else 0.6) * slow.events


@pytest.mark.parametrize("spec", [
    {"architecture": "nodg", "tp": 1, "pp": 2, "replicas": 4, "chunk_tokens": 256},
    {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": 1024},
])
def test_chunk_runs_with_pipeline_stages_and_other_budgets(spec, monkeypatch):
    ev = Evaluation(_kernels(recipe("longbench", 300)))
    for rate in (0.5, 2.0):
        fast, slow = _both(ev, spec, rate, 300, monkeypatch)
        assert fast.events < slow.events


def test_chunk_runs_with_inline_encoding(root, monkeypatch):
    ev = Evaluation(_kernels(load_recipe(root / "examples" / "video-qwen-8xa100.yaml")),
                    requests=300)
    spec = {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": 512}
    for rate in (5.0, 30.0):
        _both(ev, spec, rate, 300, monkeypatch)


def test_chunk_runs_in_closed_loop(root, monkeypatch):
    ev = Evaluation(_kernels(load_recipe(root / "examples" / "ecoserve" /
                                    "a800-codellama-closed.yaml")),
                    requests=300)
    spec = {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 512}
    _both(ev, spec, 32, 300, monkeypatch)


def _counted(monkeypatch, name: str) -> list:
    calls: list = []
    orig = getattr(NoDGRun, name)

    def counted(self, *args):
        calls.append(args)
        return orig(self, *args)

    monkeypatch.setattr(NoDGRun, name, counted)
    return calls


@pytest.mark.parametrize("rate", [0.5, 0.65])
def test_taken_back_last_iterations_keep_every_timestamp(long_prompts, rate, monkeypatch):
    """A prompt's last chunk iteration, planned with the ones before it, is taken back when a
    request joins its replica's queue before it starts: both happen on long prompts, and the
    run matches one event per iteration."""
    solo, retract = _counted(monkeypatch, "solo"), _counted(monkeypatch, "retract")
    spec = {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 512}
    _both(long_prompts, spec, rate, 1500, monkeypatch)
    assert len(solo) > 1000 and len(retract) > 20


def test_taken_back_last_iterations_in_closed_loop(long_prompts, monkeypatch):
    """Closed loop: the next arrival is not known ahead, so every multi-chunk prompt's last
    iteration is planned and taken back when the next client's request joins before it."""
    rec = long_prompts.recipe
    arrival = type(rec.workload.arrival)(process="closed", think_s=0.5)
    rec = rec.model_copy(update={"workload": rec.workload.model_copy(update={"arrival": arrival})})
    ev = Evaluation(rec, requests=400)
    retract = _counted(monkeypatch, "retract")
    spec = {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 512}
    for clients in (4, 16):
        _both(ev, spec, clients, 400, monkeypatch)
    assert retract
