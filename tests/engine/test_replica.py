"""The engine's nodg and padg modes with a real (tiny) model: every request ends completed or
explicitly failed, chunked prefill bounds what a decode step waits for, padg keeps each
request on one instance and alternates its windows, and tp/pp the engine cannot run are
refused with the field and the fix."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from hastune.archs.nodg import NoDGConfig  # noqa: E402
from hastune.archs.padg import PaDGConfig  # noqa: E402
from hastune.errors import InputError  # noqa: E402
from hastune.recipe import Workload  # noqa: E402
from hastune.workload import sample_requests  # noqa: E402
from runners.engine import Engine, EngineOptions  # noqa: E402
from runners.engine.load import jobs_from, to_result  # noqa: E402

MIXED = Workload(mix={"image": 0.4, "audio": 0.2, "text": 0.4},
                 modalities={"image": {"scheme": "tokens", "encoder_tokens": 16},
                             "audio": {"scheme": "tokens", "encoder_tokens": 16}},
                 prompt_tokens={"dist": "uniform", "min": 4, "max": 24},
                 output_tokens={"dist": "uniform", "min": 2, "max": 12})
LONG = Workload(mix={"text": 1.0}, prompt_tokens={"dist": "uniform", "min": 300, "max": 600},
                output_tokens={"dist": "uniform", "min": 16, "max": 32})
OPTS = EngineOptions(model="ref-tiny", drain_timeout_s=60)


def _jobs(workload: Workload, n: int, rate: float, seed: int = 0):
    return jobs_from(sample_requests(workload, n, seed), rate, 512, seed)


def _nodg(chunk: int | None, replicas: int = 1) -> NoDGConfig:
    return NoDGConfig(architecture="nodg", replicas=replicas, chunk_tokens=chunk, tp=1, pp=1)


def _padg(instances: int = 2, **kw: object) -> PaDGConfig:
    return PaDGConfig(architecture="padg", instances=instances, tp=1, pp=1, **kw)


@pytest.fixture(scope="module")
def nodg2():
    """Two chunked replicas, shared by the nodg tests (starting workers is the slow part);
    the kill test runs last."""
    with Engine(_nodg(64, replicas=2), OPTS) as eng:
        yield eng


def _complete(rec, jobs) -> None:
    assert not rec.failed
    assert (rec.tokens == [j.max_tokens for j in jobs]).all()
    assert (rec.first >= rec.arrival).all() and (rec.last >= rec.first).all()
    res = to_result(rec, 0.1)
    assert res.completed == len(jobs) and (res.ttft > 0).all()


def test_nodg_chunked_serves_every_request_and_keeps_the_token_budget(nodg2):
    jobs, offsets = _jobs(MIXED, 40, 40.0)
    rec = nodg2.run(jobs, offsets, 40.0)
    stats = nodg2.mode.stats()
    _complete(rec, jobs)
    # routing by fewest requests in flight: at 40 req/s one replica is sometimes busy
    assert all(s["iterations"] > 0 for s in stats.values()), stats
    for s in stats.values():  # (the budget rule itself: tests/policies/test_iteration.py)
        assert s["chunked"] == 1.0 and s["max_iter_tokens"] > 0
    assert rec.overhead["decode_steps"] > 0


def test_chunked_prefill_bounds_what_a_decode_step_waits_for(nodg2):
    """Long prompts arrive while others decode. Unchunked, a decode step waits behind whole
    prompts (prefill-only iterations); chunked, behind at most one budget of chunk tokens."""
    # a burst (200 req/s): prompts still wait while the first ones decode however fast or
    # loaded the machine is (at 30 req/s a busy CI machine once saw no decode step meet a chunk)
    jobs, offsets = _jobs(LONG, 24, 200.0)
    rec = nodg2.run(jobs, offsets, 200.0)
    _complete(rec, jobs)
    chunked = rec.overhead
    jobs, offsets = _jobs(LONG, 24, 200.0)
    with Engine(_nodg(None), OPTS) as eng:
        rec = eng.run(jobs, offsets, 200.0)
    _complete(rec, jobs)
    whole = rec.overhead
    assert chunked["max_decode_wait_tokens"] <= 64
    assert chunked["mixed"] > 0  # decode steps carried prefill chunks
    assert whole["mixed"] == 0 and whole["prefill_only"] > 0
    assert whole["max_decode_wait_tokens"] >= 300  # a whole prompt ran between two steps
    assert whole["max_prefill_tokens"] >= 300


def test_a_dead_replica_fails_its_requests_and_the_rest_finish(nodg2):
    jobs, offsets = _jobs(MIXED, 60, 30.0, seed=1)

    def kill_later() -> None:
        time.sleep(offsets[20])
        nodg2.kill("R0")

    threading.Thread(target=kill_later, daemon=True).start()
    rec = nodg2.run(jobs, offsets, 30.0)
    done = {j.rid for j, last in zip(jobs, rec.last) if last == last}
    assert done.isdisjoint(rec.failed)
    assert len(done) + len(rec.failed) == len(jobs), "a request was lost"
    assert rec.failed and all("R0" in why for why in rec.failed.values())
    assert "timed out" not in " ".join(rec.failed.values())
    assert len(done) > len(jobs) // 2  # after the death, routing skips R0


@pytest.fixture(scope="module")
def padg2():
    # a tight TTFT SLO closes windows early, so rolling activation moves to the next instance
    # (the SLOs drive the windowed scheduler's checks; the frontend's admission control,
    # tests/engine/test_overload.py, is off so every request reaches an instance)
    opts = EngineOptions(model="ref-tiny", drain_timeout_s=60, ttft_slo_s=0.02,
                         tpot_slo_s=0.05, admit_margin=None)
    with Engine(_padg(2), opts) as eng:
        yield eng


def test_padg_keeps_each_request_on_one_instance_and_alternates_windows(padg2):
    jobs, offsets = _jobs(MIXED, 40, 80.0, seed=2)
    rec = padg2.run(jobs, offsets, 80.0)
    mode = padg2.mode
    _complete(rec, jobs)
    rids = [j.rid for j in jobs]
    # the instance that admitted a request prefilled it and produced its last token: no KV
    # ever moved between instances
    for r in rids:
        assert mode.admitted_on[r] == mode.prefilled_on[r] == mode.done_on[r], r
    # which instances took requests depends on how fast windows close on this machine (CI
    # once saw I0 alone under load); rolling activation itself is checked deterministically in
    # test_padg_scheduler.py
    assert set(mode.admitted_on.values()) <= {"I0", "I1"} and mode.admitted_on
    # every request got its first token when its window closed (TTFT includes the switch)
    closed = {r: (name, c) for name, _, c, _, rs in mode.windows for r in rs}
    assert sorted(closed) == rids
    for k, r in enumerate(rids):
        assert closed[r][0] == mode.done_on[r]
        assert rec.first[k] == closed[r][1]
    # on each instance windows never overlap, and no decode token was made inside a window
    for name in sorted(set(mode.done_on.values())):
        wins = sorted((o, c) for n, o, c, _, _ in mode.windows if n == name)
        assert all(c0 <= o1 for (_, c0), (o1, _) in zip(wins, wins[1:]))
        lasts = [rec.last[k] for k, r in enumerate(rids) if mode.done_on[r] == name
                 and rec.tokens[k] > 1]
        assert lasts and not any(o < t < c for t in lasts for o, c in wins)
    # decode steps ran between windows: the step counter grows from window to window
    # (when I0 opened more than one window: on a loaded machine every request can reach I0
    # while its first window is still open, as a CI run with four other jobs on the machine saw)
    steps = [s for n, _, _, s, _ in sorted(mode.windows, key=lambda w: w[1]) if n == "I0"]
    assert steps == sorted(steps) and (len(steps) == 1 or steps[-1] > 0)
    assert rec.overhead["windows"] == len(mode.windows) >= 2


def test_a_dead_padg_instance_fails_what_it_admitted_and_the_other_serves_the_rest(padg2):
    jobs, offsets = _jobs(MIXED, 60, 60.0, seed=3)
    mode = padg2.mode
    mode.admitted_on.clear()  # this run's records only (request ids repeat across runs)
    mode.done_on.clear()
    killed: list[tuple[str, float]] = []

    def holding() -> set[str]:
        """Instances holding admitted, unfinished requests now."""
        while True:
            try:
                return {n for r, n in list(mode.admitted_on.items()) if r not in mode.done_on}
            except RuntimeError:  # the dict changed size while copied: read again
                continue

    def kill_later() -> None:
        # which instance rolling activation has filled depends on this machine's speed: kill
        # one that holds requests (I1 when it does), so there is something to fail
        time.sleep(offsets[20])
        deadline = time.monotonic() + 5.0
        busy = holding()
        while not busy and time.monotonic() < deadline:
            time.sleep(0.002)
            busy = holding()
        victim = "I1" if "I1" in busy or not busy else "I0"
        padg2.kill(victim)
        killed.append((victim, time.monotonic()))

    threading.Thread(target=kill_later, daemon=True).start()
    rec = padg2.run(jobs, offsets, 60.0)
    victim, at = killed[0]
    other = "I0" if victim == "I1" else "I1"
    done = {j.rid for j, last in zip(jobs, rec.last) if last == last}
    assert done.isdisjoint(rec.failed)
    assert len(done) + len(rec.failed) == len(jobs), "a request was lost"
    others = {rid: why for rid, why in rec.failed.items() if victim not in why}
    assert rec.failed and not others, (victim, others)  # what failed for another reason
    # what waited in the scheduler after the death went to the live instance, never the dead
    late = [j.rid for j, t in zip(jobs, rec.arrival) if t > at + 0.3]
    assert late and all(mode.admitted_on.get(r) == other for r in late)
    assert all(r in done for r in late)


@pytest.mark.parametrize("config, field", [
    (NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1), "tp"),
    (PaDGConfig(architecture="padg", instances=2, tp=1, pp=2), "pp"),
    (PaDGConfig(architecture="padg", instances=2, tp=1, pp=1, mitosis=True,
                max_instances=4), "mitosis"),
])
def test_what_the_engine_cannot_run_is_refused_with_the_field(config, field):
    with pytest.raises(InputError) as err:
        Engine(config, OPTS).start()
    assert err.value.field == field and "Fix:" in str(err.value)


def test_serve_refuses_tp_with_exit_code_2(tmp_path: Path):
    cfg = tmp_path / "nodg.yaml"
    cfg.write_text("architecture: nodg\nreplicas: 2\ntp: 4\npp: 1\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "hastune", "serve", str(cfg)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "tp" in out.stderr and "Fix: set tp: 1" in out.stderr
    assert "Traceback" not in out.stderr
