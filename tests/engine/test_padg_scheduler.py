"""padg's macro-instance scheduler (runners/engine/modes.py) on fake instances: no worker
processes, the instances' status rows written by hand. Checks that it admits with the shared
policies as the simulator does: TTFT check and rolling activation, saved-TPOT refusal and the
re-offer when a window closes, dead instances skipped, nobody left → explicit failure."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from types import SimpleNamespace

from hastune.archs.padg import PaDGConfig
from runners.engine.engine import EngineOptions
from runners.engine.messages import EV_DONE, EV_ENCODED, EV_FAILED, EV_PREFILLED, EV_WINDOW, Job
from runners.engine.modes import PaDGMode
from runners.engine.replica import DECODE, PREFILL, Status
from runners.engine.workers import Shared

NAMES = ["I0", "I1"]


def _mode(ttft: float = 0.1, tpot: float = 0.05, est: float = 0.03):
    ctx = mp.get_context("spawn")
    st = Status(ctx, len(NAMES))
    for i in range(len(NAMES)):
        for f, v in {"cap": 4096, "block": 16, "cost_a": est, "cost_b": 0.0, "llm_image": 4,
                     "llm_video": -1, "llm_audio": -1, "phase": DECODE}.items():
            st.set(i, f, v)
    eng = SimpleNamespace(
        config=PaDGConfig(architecture="padg", instances=2, tp=1, pp=1),
        opts=EngineOptions(model="ref-tiny", ttft_slo_s=ttft, tpot_slo_s=tpot),
        shared=Shared(ctx, 0, 0, NAMES), events=queue.Queue(),
        inboxes={n: queue.Queue() for n in NAMES})
    return PaDGMode(eng, NAMES, st), eng, st


def _job(rid: int, out: int = 8) -> Job:
    return Job(rid=rid, prompt=[1] * 10, max_tokens=out, arrival=time.monotonic())


def _drain(q: queue.Queue) -> list:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def test_ttft_check_fills_one_instance_then_rolls_to_the_next():
    mode, eng, _ = _mode(ttft=0.1, est=0.03)
    for r in range(5):
        mode.hold(_job(r))
    # 0.03 + 0.03 + 0.03 ≤ 0.1 on I0; the fourth would make 0.12: I1 takes it and the next
    assert [mode.admitted_on[r] for r in range(5)] == ["I0", "I0", "I0", "I1", "I1"]
    assert mode.refused[1] >= 1
    evs = _drain(eng.events)
    assert [(k, r, x) for k, r, _, _, x in evs] == [
        (EV_ENCODED, r, n) for r, n in enumerate(["I0", "I0", "I0", "I1", "I1"])]
    assert [j.rid for j in _drain(eng.inboxes["I0"])] == [0, 1, 2]
    assert mode.macros[0].rolling.activations == [0, 1]


def test_an_open_window_counts_its_age():
    mode, _, st = _mode(ttft=0.1, est=0.03)
    st.set(0, "phase", PREFILL)
    st.set(0, "win_start", time.monotonic() - 0.08)  # 0.08 + 0.03 > 0.1
    mode.hold(_job(0))
    assert mode.admitted_on[0] == "I1"


def test_low_slack_refuses_until_a_window_closes_and_its_requests_have_slack():
    mode, eng, st = _mode(ttft=1.0, tpot=0.05, est=0.03)
    now = time.monotonic()
    # I0 decodes two requests that got their first token 1 s ago and made 1 token:
    # saved TPOT = 1 × 0.05 − 1 s < 0.03, so check (2) refuses
    mode.hold(_job(10))
    mode.hold(_job(11))
    assert set(mode.admitted_on.values()) == {"I0"}  # one empty window takes both
    mode.on_event(EV_PREFILLED, -1, "I0", now - 1.0, ([10, 11], 0.01, [10, 10]))
    mode.on_event(EV_WINDOW, -1, "I0", now - 1.0, (now - 1.1, 0, [10, 11]))
    st.set(0, "boundary", now)
    st.set(0, "step_s", 0.01)
    st.set(1, "phase", PREFILL)                    # I1: a window open for 0.99 s
    st.set(1, "win_start", now - 0.99)
    mode.hold(_job(0))
    assert 0 not in mode.admitted_on and mode.refused[2] >= 1 and mode.refused[1] >= 1
    # I0's requests finish: nobody decodes there, its slack is unbounded → re-offered, taken
    mode.on_event(EV_DONE, 10, "I0", now, 8)
    assert 0 not in mode.admitted_on  # one request still decodes with no slack
    mode.on_event(EV_DONE, 11, "I0", now, 8)
    assert mode.admitted_on[0] == "I0" and not mode.macros[0].queue
    assert EV_FAILED not in [e[0] for e in _drain(eng.events)]


def test_dead_instances_are_skipped_and_with_none_left_requests_fail():
    mode, eng, _ = _mode(ttft=0.1, est=0.03)
    eng.shared.alive[0] = 0
    mode.hold(_job(0))
    assert mode.admitted_on[0] == "I1"
    for r in (1, 2, 3):  # I1 fills (TTFT check); the next waits for it
        mode.hold(_job(r))
    assert 3 not in mode.admitted_on and list(mode.macros[0].queue)[0].rid == 3
    eng.shared.alive[1] = 0
    mode.on_event(EV_DONE, 0, "I1", time.monotonic(), 8)  # re-offer: nobody is alive
    mode.hold(_job(4))
    failed = [(r, why) for k, r, _, _, why in _drain(eng.events) if k == EV_FAILED]
    assert [r for r, _ in failed] == [3, 4]
    assert all("no live instance" in why for _, why in failed)
