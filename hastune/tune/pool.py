"""Where a tune's evaluations run: in this process, or in `workers` spawned processes that each
hold the recipe's simulator.

The search (hastune.tune.search) hands configurations over in trial order (`submit`) and takes
each result back in that same order (`result(number)` waits for that one, keeping any that
finish before it), so the study sees the same results in the same order — and the sampler
makes the same proposals — whatever the number of processes; only the wall time changes. In
this process (`Inline`) an evaluation runs when its result is asked for.

A process that dies is named (`WorkerDied`: which, its pid, how it ended); Ctrl-C stops them
all. Each process ignores SIGINT: the command's own process decides what an interrupt does.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from hastune import interrupt
from hastune.config import AnyConfig, parse_config, trial_key
from hastune.errors import InputError
from hastune.goodput import GoodputResult

POLL_S = 0.2  # between looks at the processes while waiting for a result
MAX_WORKERS = 1024


@dataclass
class Outcome:
    """One configuration's evaluation, as the study records it; `result`, the whole search,
    when it may be the best so far (kept for the summary: hastune.tune.api)."""

    goodput_rps: float
    probes: int
    early_stopped: bool
    wall_s: float
    at_goodput: dict | None
    result: GoodputResult | None = None
    pid: int = 0


def evaluate(evaluator: Any, slo: Any, cfg: AnyConfig, incumbent: float | None,
             early_stop: bool, keep: bool = True) -> Outcome:
    """One goodput search, reduced to what the study records (and the search itself when
    `keep`, or when it beats `incumbent`)."""
    t0 = time.perf_counter()
    res = evaluator.goodput(cfg, incumbent=incumbent, early_stop=early_stop)
    at = None
    if res.best_run is not None and res.goodput_rps > 0:  # P90s at goodput (candidates.csv)
        at = {k: v for k, v in res.best_run.summary(slo).items()
              if k in ("ttft_p90_s", "tpot_p90_s", "attainment")}
    better = incumbent is None or res.goodput_rps > incumbent
    return Outcome(res.goodput_rps, len(res.probes), res.early_stopped,
                   time.perf_counter() - t0, at, res if keep or better else None, os.getpid())


class WorkerDied(RuntimeError):
    def __init__(self, index: int, pid: int | None, exitcode: int):
        self.index, self.pid, self.exitcode = index, pid, exitcode
        super().__init__(f"worker {index} (pid {pid}) {death(exitcode)}")


class Inline:
    """Evaluations in this process, each when its result is asked for."""

    def __init__(self, evaluator: Any, slo: Any, early_stop: bool):
        self.evaluator, self.slo, self.early_stop = evaluator, slo, early_stop
        self.jobs: dict[int, tuple[AnyConfig, float | None]] = {}

    def submit(self, number: int, cfg: AnyConfig, incumbent: float | None) -> None:
        self.jobs[number] = (cfg, incumbent)

    def result(self, number: int) -> Outcome:
        cfg, incumbent = self.jobs.pop(number)
        return evaluate(self.evaluator, self.slo, cfg, incumbent, self.early_stop)

    def close(self) -> None:
        self.jobs.clear()


class Processes:
    """`workers` spawned processes, each with its own evaluator of `recipe` (sent to them
    whole: a plan's recipe at another GPU count is not its file's), made from the registry
    (hastune.evaluators: `evaluator` with `options`; the simulator by default); tasks go out
    on one queue, each process's results come back on its own pipe. `main` is the processes'
    loop (`_main`; a test gives one that dies its own way)."""

    def __init__(self, workers: int, recipe: Any, early_stop: bool, evaluator: str = "sim",
                 options: Any = None, main: Callable[..., None] | None = None):
        ctx = mp.get_context("spawn")
        self.tasks = ctx.SimpleQueue()
        self.procs, self.conns = [], []
        for _ in range(workers):  # a pipe of its own per process: one killed mid-message ends
            reader, writer = ctx.Pipe(duplex=False)  # its pipe (EOF), not a read of all
            p = ctx.Process(target=main or _main, args=(recipe, early_stop, self.tasks, writer,
                                                evaluator, options), daemon=True)
            p.start()
            writer.close()  # the process holds the only write end now
            self.procs.append(p)
            self.conns.append(reader)
        self.done: dict[int, Outcome | BaseException] = {}

    def submit(self, number: int, cfg: AnyConfig, incumbent: float | None) -> None:
        self.tasks.put((number, trial_key(cfg), incumbent))

    def result(self, number: int) -> Outcome:
        while number not in self.done:
            interrupt.check()
            for conn in wait(self.conns, timeout=POLL_S):
                try:
                    got, out = conn.recv()
                except (EOFError, OSError):  # its process ended, maybe halfway through a message
                    raise self._died(self.conns.index(conn)) from None
                self.done[got] = out
            if number not in self.done:  # a worker that died idle is named too, not only
                self.check()             # one holding a task (answers that came are kept)
        out = self.done.pop(number)
        if isinstance(out, BaseException):
            raise out
        return out

    def _died(self, i: int) -> WorkerDied:
        """Process `i`'s pipe ended: it has exited, or is exiting (ended, if not); the first
        pool process that has ended, named."""
        proc = self.procs[i]
        proc.join(timeout=10)
        if proc.exitcode is None:
            proc.terminate()
            proc.join()
        dead = self._dead()
        assert dead is not None  # process i at least has ended
        return dead

    def _dead(self) -> WorkerDied | None:
        """The first pool process that has ended, named; None while all run."""
        for i, p in enumerate(self.procs):
            if p.exitcode is not None:
                return WorkerDied(i, p.pid, p.exitcode)
        return None

    def check(self) -> None:
        """Raise WorkerDied for the first pool process that has ended."""
        dead = self._dead()
        if dead is not None:
            raise dead

    def close(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=10)
        for conn in self.conns:
            conn.close()


def _main(recipe: Any, early_stop: bool, tasks: Any, results: Connection, evaluator: str = "sim",
          options: Any = None) -> None:
    """A pool process: evaluate configurations until the command's process goes."""
    import json

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from hastune.evaluators import make_evaluator

    ev = make_evaluator(evaluator, recipe, options)
    while True:
        number, key, incumbent = tasks.get()
        try:
            out: Outcome | BaseException = evaluate(ev, recipe.slo, parse_config(json.loads(key)),
                                                    incumbent, early_stop, keep=False)
        except Exception as exc:  # noqa: BLE001 - raised again in the command's process
            out = exc
        results.send((number, out))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_workers(workers: int | str, evaluator: str = "sim") -> int:
    """--workers as a number of processes: "auto" is the cores this process may run on for
    the simulator (1 for an engine: its trials run one at a time); refused outside
    1..MAX_WORKERS."""
    if workers == "auto":
        return min(cores(), MAX_WORKERS) if evaluator == "sim" else 1
    try:
        n = int(workers) if not isinstance(workers, (bool, float)) else None
    except (TypeError, ValueError):
        n = None
    if n is None or not 1 <= n <= MAX_WORKERS:
        raise InputError(None, "--workers", f"must be auto or a number of processes in "
                         f"1..{MAX_WORKERS} (got {workers})",
                         "give --workers auto (the machine's cores) or a number ≥ 1")
    return n


def death(exitcode: int) -> str:
    """How a worker process ended, in words."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"
