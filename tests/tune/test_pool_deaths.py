"""An evaluation process that dies at any moment ends the command, never hangs it: killed
halfway through sending a result (`tune --workers`), or in the middle of `hastune grid
--workers`. Before, every process wrote its results to one queue whose write end the command
held too: a process killed mid-message left half of one in it, and the command blocked for
ever reading the other half (tests/tune/test_concurrency.py's kill test timed out so). Now
each process has a pipe of its own, which ends when it dies. multiprocessing.Pool, which
`grid` used, replaces a dead process and waits for its lost task for ever."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.recipe import load_recipe
from hastune.tune.grid import GridFailed, run_grid
from hastune.tune.pool import Processes, WorkerDied
from tests.tune.test_concurrency import _pool_children

SENT = 1000  # the length a torn message claims


def _torn(recipe, early_stop, tasks, results, evaluator="sim", options=None, *,
          whole: int = 0, cut: int = 10, code: int = 9) -> None:
    """A pool process that answers `whole` tasks, then dies `cut` bytes into the next
    answer's SENT (a header and part of a pickle, as a kill mid-write leaves it)."""
    for _ in range(whole):
        number, _key, _inc = tasks.get()
        results.send((number, RuntimeError(f"answer {number}")))
    tasks.get()
    os.write(results.fileno(), (struct.pack("!i", SENT) + b"\x80" * SENT)[:cut])
    os._exit(code)


def _result_within(pool: Processes, number: int, seconds: float):
    got: dict = {}

    def wait() -> None:
        try:
            got["out"] = pool.result(number)
        except BaseException as exc:  # noqa: BLE001 - what result raised is the outcome
            got["out"] = exc
    t = threading.Thread(target=wait, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "result() hung on a process that died mid-message"
    return got["out"]


@pytest.fixture(scope="module")
def recipe():
    from tests.tune.conftest import ROOT

    return load_recipe(ROOT / "examples" / "audio-ultravox-8xa100.yaml")


@settings(max_examples=6, deadline=None)
@given(cut=st.integers(0, SENT + 3), code=st.sampled_from([9, 1, 137]),
       whole=st.integers(0, 2))
def test_a_process_dying_mid_message_is_named(recipe, cut, code, whole):
    """Whatever part of its answer a process wrote before it died (none, some of the 4-byte
    header, some of the body), result() raises WorkerDied naming it, its pid and its exit
    code; the answers it sent whole before are kept."""
    pool = Processes(1, recipe, True, main=_Main(whole, cut, code))
    try:
        for n in range(whole + 1):
            pool.submit(n, _config(), None)
        for n in range(whole):
            out = _result_within(pool, n, 60)
            assert isinstance(out, RuntimeError) and str(out) == f"answer {n}", out
        out = _result_within(pool, whole, 60)
        assert isinstance(out, WorkerDied), out
        assert out.pid == pool.procs[0].pid and out.exitcode == code, (out, code)
        assert f"(pid {out.pid}) exited with code {code}" in str(out)
    finally:
        pool.close()


def test_grid_fails_when_a_process_is_killed(tmp_path):
    """`hastune grid --workers 2`: killing its evaluation processes ends it with GridFailed
    (exit 1 on the command line), not a wait for ever."""
    import yaml

    from tests.tune.conftest import ROOT

    data = yaml.safe_load((ROOT / "examples" / "audio-ultravox-8xa100.yaml").read_text())
    data["workload"]["requests"] = 300
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(data))
    killed: list[int] = []

    def killer() -> None:
        deadline = time.time() + 120
        while not killed and time.time() < deadline:
            kids = _pool_children(os.getpid())
            if len(kids) == 2:
                time.sleep(3)  # loaded, and evaluating
                for k in _pool_children(os.getpid()):
                    os.kill(k, signal.SIGKILL)
                    killed.append(k)
            time.sleep(0.1)
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    with pytest.raises(GridFailed, match="ended abruptly"):
        run_grid(p, prune_first=False, workers=2)
    assert killed


def _config():
    from hastune.config import parse_config

    return parse_config({"architecture": "epd", "n_E": 1, "n_P": 0, "n_D": 1, "B": 1, "s": 0.0})


class _Main:
    """_torn with its case, picklable for spawn."""

    def __init__(self, whole: int, cut: int, code: int):
        self.whole, self.cut, self.code = whole, cut, code

    def __call__(self, *args) -> None:
        _torn(*args, whole=self.whole, cut=self.cut, code=self.code)
