"""The engine times itself (runners/engine/steplog.py): every worker's steps reach the run
record, and they add up to what the run did."""

from __future__ import annotations

import queue

import pytest

from hastune.archs.epd import EPDConfig
from hastune.archs.nodg import NoDGConfig
from hastune.archs.padg import PaDGConfig
from hastune.recipe import Workload
from hastune.workload import sample_requests
from runners.engine.messages import EV_STEPS
from runners.engine.steplog import CHUNK, COLUMNS, StepLog, columns, rows_of, summary

WORKLOAD = Workload(mix={"image": 0.5, "text": 0.5},
                    modalities={"image": {"scheme": "tokens", "encoder_tokens": 16}},
                    prompt_tokens={"dist": "uniform", "min": 4, "max": 120},
                    output_tokens={"dist": "uniform", "min": 1, "max": 12})


def test_log_sends_in_chunks_and_on_flush():
    q: queue.Queue = queue.Queue()
    log = StepLog("D0", q)
    for i in range(CHUNK + 3):
        log.add("decode", float(i), 0.001, 2, 2, 10 * i)
    kind, _, name, _, (rows, final) = q.get_nowait()
    assert (kind, name, len(rows), final) == (EV_STEPS, "D0", CHUNK, False)
    log.send(final=True)
    rows2, final = q.get_nowait()[4]
    assert len(rows2) == 3 and final and q.empty()
    cols = columns(rows + rows2)
    assert set(cols) == set(COLUMNS) and cols["context"][-1] == 10 * (CHUNK + 2)
    back = rows_of(cols)
    assert len(back) == CHUNK + 3 and back[5]["t"] == 5.0 and back[5]["batch"] == 2
    assert summary({"D0": cols})["decode"]["count"] == CHUNK + 3
    off = StepLog("D0", q, on=False)
    off.add("decode", 0.0, 1.0)
    off.send(final=False)
    assert q.empty()  # nothing recorded, nothing sent


def _run(config, n=24, rate=15.0, **opts):
    from runners.engine import Engine, EngineOptions
    from runners.engine.load import jobs_from

    jobs, offsets = jobs_from(sample_requests(WORKLOAD, n, 3), rate, 512, 3)
    with Engine(config, EngineOptions(model="ref-tiny", drain_timeout_s=60, **opts)) as eng:
        rec = eng.run(jobs, offsets, rate)
        rec2 = eng.run(jobs[:4], offsets[:4], rate)  # a second run holds only its own steps
    assert not rec.failed
    return jobs, rec, rec2


def _kind(steps, kind, col):
    return [v for c in steps.values() for k, v in zip(c["kind"], c[col]) if k == kind]


@pytest.mark.parametrize("config", [
    EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=2, s=0.0),
    NoDGConfig(architecture="nodg", replicas=2, tp=1, pp=1, chunk_tokens=64),
    NoDGConfig(architecture="nodg", replicas=1, tp=1, pp=1, chunk_tokens=None),
    PaDGConfig(architecture="padg", instances=2, tp=1, pp=1),
], ids=["epd", "nodg-chunked", "nodg-whole", "padg"])
def test_steps_account_for_every_token(config):
    """Σ decode batch (decode and mixed steps) = tokens made after the first; every prompt is
    prefilled once; every image encoded once; epd: each KV exported and imported once."""
    pytest.importorskip("torch")
    jobs, rec, rec2 = _run(config, ttft_slo_s=10.0, tpot_slo_s=1.0)
    steps = rec.steps
    assert steps and all(set(c) == set(COLUMNS) for c in steps.values())
    made = sum(j.max_tokens - 1 for j in jobs)
    assert sum(_kind(steps, "decode", "batch")) + sum(_kind(steps, "mixed", "batch")) == made
    images = sum(j.modality == "image" for j in jobs)
    assert sum(_kind(steps, "encode", "batch")) == images
    assert all(d >= 0 for c in steps.values() for d in c["dur"])
    t0 = min(rec.arrival)
    assert all(t >= t0 - 0.1 for c in steps.values() for t in c["t"])
    if config.architecture == "epd":
        assert sum(_kind(steps, "prefill", "batch")) == len(jobs)
        sent = sum(j.max_tokens > 1 for j in jobs)
        assert len(_kind(steps, "kv_export", "tokens")) == sent
        assert len(_kind(steps, "kv_import", "tokens")) == sent
        assert len(_kind(steps, "handoff_kv", "dur")) == sent
        assert sorted(_kind(steps, "kv_export", "tokens")) == \
            sorted(_kind(steps, "kv_import", "tokens"))
        # a decode step's context: the KV its sequences hold, at least one token each
        assert all(c >= b for b, c in zip(_kind(steps, "decode", "batch"),
                                          _kind(steps, "decode", "context")))
    elif config.chunk_tokens if config.architecture == "nodg" else False:
        assert max(_kind(steps, "prefill", "tokens") + _kind(steps, "mixed", "tokens")) <= 64
    made2 = sum(_kind(rec2.steps, "decode", "batch")) + sum(_kind(rec2.steps, "mixed", "batch"))
    assert made2 == sum(j.max_tokens - 1 for j in jobs[:4])


def test_steps_off_records_nothing():
    pytest.importorskip("torch")
    _, rec, _ = _run(EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=2, s=0.0), n=6,
                     record_steps=False)
    assert rec.steps == {}


def test_encoder_tokens_never_encode_twice():
    """The step log counts encoder tokens with the model's own token_counts; the
    ServingModel default would encode the payload again, so then it counts the rows."""
    torch = pytest.importorskip("torch")
    from runners.engine.workers import encoder_tokens
    from runners.model.base import Payload, ServingModel
    from tests.runners.toy_model import ToyModel

    class Counting(ToyModel):
        calls = 0

        def encode(self, payloads):
            self.calls += len(payloads)
            return [torch.zeros(3, 8) for _ in payloads]

        token_counts = ServingModel.token_counts  # the default: encode and count

    ps = [Payload("image", torch.zeros(3, 8, 8)) for _ in range(4)]
    m = Counting()
    embs = m.encode(ps)
    assert encoder_tokens(m, ps, embs) == [3] * 4 and m.calls == 4  # no second encode
    toy = ToyModel()
    assert encoder_tokens(toy, ps, toy.encode(ps)) == [toy.token_counts(p)[0] for p in ps]
