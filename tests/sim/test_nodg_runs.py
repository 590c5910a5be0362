"""The nodg simulator's shortcuts change no result: a prompt's consecutive chunk iterations run
as one event, and an arrival at a decoding replica takes the next step boundary at once, with
the timestamps of the event-by-event simulation (`_Run.ahead = False`) — bit for bit, on long
prompts, payloads encoded inline, pipeline stages, closed loop and runs stopped early; only
the event count drops."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.config import parse_config
from hastune.evaluate import Evaluation
from hastune.recipe import load_recipe
from hastune.sim import nodg
from tests.sim.replica_recipes import recipe


def _same(a, b) -> None:
    for f in ("ttft", "tpot", "arrival", "finish"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), f
    assert (a.rejected, a.sim_time_s, a.utilisation) == (b.rejected, b.sim_time_s, b.utilisation)
    assert a.extra == b.extra


def _both(ev: Evaluation, spec: dict, rate: float, n: int, monkeypatch):
    sim = ev.simulator(parse_config(spec))
    reqs = ev.requests_at(rate, n)
    fast = sim.run(reqs, rate)
    monkeypatch.setattr(nodg._Run, "ahead", False)
    slow = sim.run(reqs, rate)
    monkeypatch.setattr(nodg._Run, "ahead", True)
    _same(fast, slow)
    return fast, slow


@pytest.fixture(scope="module")
def long_prompts(root):
    return Evaluation(load_recipe(root / "benchmarks" / "nodg-long-prompts.yaml"))


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
    ev = Evaluation(recipe("longbench", 300))
    for rate in (0.5, 2.0):
        fast, slow = _both(ev, spec, rate, 300, monkeypatch)
        assert fast.events < slow.events


def test_chunk_runs_with_inline_encoding(root, monkeypatch):
    ev = Evaluation(load_recipe(root / "examples" / "video-qwen-8xa100.yaml"), requests=300)
    spec = {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": 512}
    for rate in (5.0, 30.0):
        _both(ev, spec, rate, 300, monkeypatch)


def test_chunk_runs_in_closed_loop(root, monkeypatch):
    ev = Evaluation(load_recipe(root / "examples" / "ecoserve" / "a800-codellama-closed.yaml"),
                    requests=300)
    spec = {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 512}
    _both(ev, spec, 32, 300, monkeypatch)
