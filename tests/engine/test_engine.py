"""The engine with a real (tiny) model: every request ends completed or explicitly failed."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

from hastune.archs.epd import EPDConfig  # noqa: E402
from hastune.archs.epd_static import EPDStaticConfig  # noqa: E402
from hastune.recipe import SLO, Workload  # noqa: E402
from hastune.workload import sample_requests  # noqa: E402
from runners.engine import Engine, EngineOptions  # noqa: E402
from runners.engine.load import jobs_from, to_result  # noqa: E402

WORKLOAD = Workload(mix={"image": 0.4, "audio": 0.2, "text": 0.4},
                    modalities={"image": {"scheme": "tokens", "encoder_tokens": 16},
                                "audio": {"scheme": "tokens", "encoder_tokens": 16}},
                    prompt_tokens={"dist": "uniform", "min": 4, "max": 24},
                    output_tokens={"dist": "uniform", "min": 2, "max": 12})
# three to five workers, more than a 2-core machine's cores: the routing between pools is what
# these tests check, not timings (runners/engine/fit.py)
OPTS = EngineOptions(model="ref-tiny", drain_timeout_s=60, oversubscribe=True)


def _check_pinned(eng) -> None:
    """On CPU each worker process is pinned to its own cores (round robin when there are more
    workers than cores): one worker, one device."""
    import os

    if not hasattr(os, "sched_getaffinity"):
        return
    mine = sorted(os.sched_getaffinity(0))
    assert set(eng.pinned) == set(eng.procs)
    for k, name in enumerate(eng.procs):  # in start order
        assert eng.pinned[name] == [mine[k % len(mine)]]
        assert os.sched_getaffinity(eng.procs[name].pid) == set(eng.pinned[name])


def _jobs(n: int, rate: float, seed: int = 0):
    return jobs_from(sample_requests(WORKLOAD, n, seed), rate, 512, seed)


@pytest.mark.parametrize("config", [
    EPDConfig(architecture="epd", n_E=1, n_P=1, n_D=1, B=2, s=0.5),
    EPDStaticConfig(architecture="epd-static", n_E=1, n_P=1, n_D=1, batch=2, timeout_ms=10),
])
def test_load_run_loses_nothing(config):
    jobs, offsets = _jobs(40, 20.0)
    with Engine(config, OPTS) as eng:
        rec = eng.run(jobs, offsets, 20.0)
        _check_pinned(eng)
    assert not rec.failed
    assert (rec.tokens == [j.max_tokens for j in jobs]).all()
    res = to_result(rec, 0.1)
    assert res.completed == 40 and (res.ttft > 0).all()
    assert res.summary(SLO(ttft_s=10, tpot_s=1))["slo_met"]
    assert rec.overhead["decode_model_s"] >= 0
    split = rec.sm_split["E0"]  # on CPU the encoder and its local prefill are two threads
    assert split["sm_split"] == "threads" and split["encodes"] >= 1
    assert split["prefill_threads"] == (0 if config.architecture == "epd-static" else 1)


def test_a_dead_worker_fails_its_requests_and_the_rest_finish():
    config = EPDConfig(architecture="epd", n_E=1, n_P=2, n_D=2, B=1, s=1.0)
    jobs, offsets = _jobs(80, 16.0, seed=1)
    reqs = sample_requests(WORKLOAD, 80, 1)
    one = float((reqs.prefill_tokens + reqs.output_tokens).max())  # the largest reservation
    with Engine(config, OPTS) as eng:
        import threading

        def kill_later() -> None:
            time.sleep(offsets[30])
            deadline = time.monotonic() + 10
            while eng.shared.decode_load[0] <= one and time.monotonic() < deadline:
                time.sleep(0.001)  # kill it holding more KV than one request's: some must fail
            eng.kill("D0")

        threading.Thread(target=kill_later, daemon=True).start()
        rec = eng.run(jobs, offsets, 16.0)
    done = {j.rid for j, last in zip(jobs, rec.last) if last == last}
    assert done.isdisjoint(rec.failed)
    assert len(done) + len(rec.failed) == len(jobs), "a request was lost"
    assert rec.failed and all("D0" in why for why in rec.failed.values())
    assert "timed out" not in " ".join(rec.failed.values())
    # after the death, routing skips D0: most requests still complete
    assert len(done) > len(jobs) // 2
