"""Engine overhead: scheduling and hand-off time per decode step (draining the inbox,
admission, importing handed-off KV, bookkeeping, reporting finished requests) as a share of the
model's own decode-step time, measured inside the decode workers under a load run; and the
cost of the engine timing itself (runners/engine/steplog.py): paired runs of the same load on
two engines, one recording every worker's steps and one not, in alternating order.

Run: OMP_NUM_THREADS=1 python benchmarks/engine_overhead.py [--model ref-small] [--rate 10]
     [--pairs 5] [--backend local|ray] [--ray-address ADDR]
Targets for the small default model on CPU: overhead ≤ 10% of the model's step time; step
recording: median ratio of decode-loop seconds per step (recording / not) ≤ 1.02.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from hastune.archs.epd import EPDConfig
from hastune.recipe import Workload
from hastune.workload import sample_requests
from runners.engine import Engine, EngineOptions
from runners.engine.load import jobs_from, to_result


def counters(rec) -> np.ndarray:
    """(model s, overhead s, steps) of the decode worker, cumulative since it started."""
    o = rec.overhead
    return np.array([o["decode_model_s"], o["decode_overhead_s"], o["decode_steps"]])


def per_step(d: np.ndarray) -> tuple[float, float]:
    """(decode-loop seconds, model seconds) per decode step of one run's counter deltas."""
    return (d[0] + d[1]) / max(d[2], 1.0), d[0] / max(d[2], 1.0)


def record_cost(batch: int = 16, n: int = 200_000) -> float:
    """Seconds one decode step spends recording itself (the context sum and the append), on
    a StepLog sending to a local queue: the same work the decode worker does per step."""
    import queue
    import timeit

    from runners.engine.steplog import StepLog

    class Handle:
        def __init__(self, length: int):
            self.length = length

    log, hs = StepLog("D0", queue.Queue()), [Handle(100 + i) for i in range(batch)]
    return timeit.timeit(lambda: log.add("decode", 1.0, 0.005, batch, batch,
                                         sum(h.length for h in hs)), number=n) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="ref-small")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--output-tokens", type=float, default=48.0)
    ap.add_argument("--pairs", type=int, default=5, help="paired runs, steps recorded or not")
    ap.add_argument("--backend", default="local", help="local processes or ray actors")
    ap.add_argument("--ray-address", default=None)
    args = ap.parse_args()
    w = Workload(mix={"image": 0.5, "text": 0.5},
                 modalities={"image": {"scheme": "tokens", "encoder_tokens": 64}},
                 prompt_tokens={"mean": 64, "cv": 0.5, "min": 4, "max": 256},
                 output_tokens={"mean": args.output_tokens, "cv": 0.5, "min": 2, "max": 256})
    reqs = sample_requests(w, args.requests, seed=0)
    cfg = EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=2, s=0.0)
    from hastune.evaluators.engine import _vocab

    def opts(record: bool) -> EngineOptions:
        return EngineOptions(model=args.model, backend=args.backend,
                             ray_address=args.ray_address, record_steps=record)

    with Engine(cfg, opts(True), rate_hint=args.rate) as on, \
            Engine(cfg, opts(False), rate_hint=args.rate) as off:
        engines = {True: on, False: off}
        recs: dict[bool, list] = {True: [], False: []}
        last = {}
        for record in (True, False):  # one unpaired run each: neither is cold in a pair
            jobs, offsets = jobs_from(reqs, args.rate, _vocab(args.model), 0)
            last[record] = counters(engines[record].run(jobs, offsets, args.rate))
        deltas: dict[bool, list] = {True: [], False: []}
        for k in range(max(args.pairs, 1)):
            for record in ((True, False) if k % 2 == 0 else (False, True)):
                jobs, offsets = jobs_from(reqs, args.rate, _vocab(args.model), 0)
                rec = engines[record].run(jobs, offsets, args.rate)
                recs[record].append(rec)
                now = counters(rec)
                deltas[record].append(now - last[record])
                last[record] = now
            (a, am), (b, bm) = per_step(deltas[True][-1]), per_step(deltas[False][-1])
            rows = sum(len(c["kind"]) for c in recs[True][-1].steps.values())
            print(f"pair {k + 1}: decode loop per step {a * 1e3:.3f} ms recording "
                  f"({rows} steps recorded) vs {b * 1e3:.3f} ms not: ratio {a / b:.3f} "
                  f"(model step alone {am * 1e3:.3f} / {bm * 1e3:.3f} ms)", flush=True)
    rec = recs[True][0]
    res = to_result(rec, 0.1)
    o = rec.overhead
    print(f"model {args.model}, epd 1-0-1, {args.backend} backend, {args.requests} requests "
          f"at {args.rate} req/s: "
          f"{res.completed} completed, {len(rec.failed)} failed, {rec.wall_s:.1f} s")
    print(f"decode model time {o['decode_model_s']:.2f} s, engine overhead "
          f"{o['decode_overhead_s']:.2f} s: {100 * o['decode_overhead_share']:.1f}% of the "
          "model's step time")
    ms = {k: (np.nanpercentile(v, 50) * 1e3, np.nanpercentile(v, 90) * 1e3)
          for k, v in (("TTFT", res.ttft), ("TPOT", res.tpot))}
    print("; ".join(f"{k} P50 {a:.1f} ms, P90 {b:.1f} ms" for k, (a, b) in ms.items()))
    ratios = [per_step(a)[0] / per_step(b)[0] for a, b in zip(deltas[True], deltas[False])]
    tpot = [np.nanmedian(to_result(a, 0.1).tpot) / np.nanmedian(to_result(b, 0.1).tpot)
            for a, b in zip(recs[True], recs[False])]
    print(f"step recording: median ratio over {len(ratios)} pairs, decode loop per step "
          f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"TPOT P50 {statistics.median(tpot):.3f}")
    cost = record_cost()
    step = statistics.median(per_step(d)[0] for d in deltas[False])
    print(f"recording one step (batch 16: context sum + append) costs {cost * 1e6:.2f} µs, "
          f"{100 * cost / step:.3f}% of the median decode-loop step ({step * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
