"""Turning a recipe's request set into engine jobs, and engine timestamps into the same
RunResult the simulator produces (so one goodput search serves both)."""

from __future__ import annotations

import numpy as np

from hastune.runs import RunResult, latencies
from hastune.workload import MODALITY_CODE, RequestSet
from runners.engine.engine import RunRecord
from runners.engine.messages import Job

CODE_MODALITY = {v: k for k, v in MODALITY_CODE.items()}


def jobs_from(reqs: RequestSet, rate: float, vocab: int, seed: int,
              payload_size: dict[str, float] | None = None) -> tuple[list[Job], list[float]]:
    """Jobs (prompt ids drawn from `seed`) and their arrival offsets at `rate`."""
    rng = np.random.default_rng(seed)
    offsets = reqs.arrivals(rate)
    offsets = (offsets - offsets[0]).tolist()
    jobs = []
    for i in range(len(reqs)):
        mod = CODE_MODALITY[int(reqs.modality[i])]
        n = max(1, int(reqs.prompt_tokens[i]))
        jobs.append(Job(rid=i, prompt=rng.integers(1, vocab, n).tolist(),
                        max_tokens=max(1, int(reqs.output_tokens[i])),
                        modality=None if mod == "text" else mod,
                        payload_size=(payload_size or {}).get(mod)))
    return jobs, offsets


def to_result(rec: RunRecord, warmup: float) -> RunResult:
    """The RunResult of an engine run: requests rejected at arrival (admission control) and
    failed ones both count as rejected (TTFT = TPOT = inf); `extra` keeps the two apart
    (`rejected_at_arrival`, `failed`)."""
    lost = set(rec.failed) | set(rec.rejected)
    ttft, tpot = latencies(rec.arrival, rec.first, rec.last, rec.tokens, lost)
    n = len(ttft)
    return RunResult(rate=rec.rate, ttft=ttft, tpot=tpot, warmup=int(warmup * n),
                     rejected=len(lost), wall_s=rec.wall_s,
                     extra={"failed": float(len(rec.failed)),
                            "rejected_at_arrival": float(len(rec.rejected)), **rec.overhead},
                     arrival=np.asarray(rec.arrival, dtype=float),
                     finish=np.asarray(rec.last, dtype=float))
