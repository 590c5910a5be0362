"""Do this machine's cores slow each other down? The reference model's decode step (ref-small,
one thread, pinned to the first core) timed alone and while another process keeps a second
core busy with matrix products — what a second engine worker does. Prints the median step of
each and the profile's prediction (benchmarks/.cache/ref-small-1thread.yaml when present).

Run: OMP_NUM_THREADS=1 python benchmarks/core_interference.py   (Linux; needs 2 cores)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _burn(core: int, stop) -> None:
    import torch

    torch.set_num_threads(1)
    os.sched_setaffinity(0, {core})
    a = torch.randn(256, 256)
    while not stop.is_set():
        a = torch.tanh(a @ a / 256)


def _median_ms(model, handles, n: int = 150) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        model.decode_step(handles)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main() -> None:
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        print("needs Linux and at least 2 cores", file=sys.stderr)
        sys.exit(2)
    import torch

    from hastune.profile import load_profile
    from runners.model import load_model

    cores = sorted(os.sched_getaffinity(0))
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {cores[0]})
    model = load_model("ref-small", "cpu")
    prof_path = ROOT / "benchmarks" / ".cache" / "ref-small-1thread.yaml"
    dec = load_profile(prof_path).decode if prof_path.exists() else None
    ctx = mp.get_context("spawn")
    for b, c in ((1, 64), (4, 80), (8, 96)):
        handles = [model.synthetic_handle(c) for _ in range(b)]
        alone = _median_ms(model, handles)
        stop = ctx.Event()
        p = ctx.Process(target=_burn, args=(cores[1], stop))
        p.start()
        time.sleep(2)
        busy = _median_ms(model, handles)
        stop.set()
        p.join()
        pred = f", profile {dec.step(b, b * c) * 1e3:.2f} ms" if dec else ""
        print(f"batch {b}, context {c}: alone {alone:.2f} ms, other core busy {busy:.2f} ms "
              f"({busy / alone - 1:+.0%}){pred}")
        for h in handles:
            model.free(h)


if __name__ == "__main__":
    main()
