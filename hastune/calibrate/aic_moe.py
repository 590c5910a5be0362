"""Which fused-MoE rows of aiconfigurator-core's `moe` table time a MoE layer
(hastune.calibrate.aic): per shape key (hidden, inter, topk, experts, moe_tp, moe_ep), not
one kernel lane for the whole table.

- Of each dtype, the lane (kernel_source) with the most rows in the table that measured the
  key; e.g. vLLM's fp8_block rows are two lanes (FlashInfer CUTLASS, Triton) over different
  shapes, and Mixtral at moe_tp 2 is Triton's only.
- fp8 weights (per-tensor) also take the fp8_block and bf16 rows (MOE_ALSO), the fastest at
  the key (mean log latency over the token counts all of them measured). vLLM's per-tensor
  fp8 rows are one lane, ModelOpt's FlashInfer CUTLASS kernel, 1.9-3.6x slower than bf16 on
  H100 / H200 even at 64 tokens, where an fp8 kernel reads half the weight bytes (Mixtral
  moe_tp 2: 1.23 ms vs 0.65 bf16 vs 0.29 fp8_block); vLLM's own fp8 MoE (Fp8MoEMethod,
  Triton) is measured only as fp8_block, where inter / moe_tp is a multiple of its 128 block
  (not Qwen3-30B-A3B's 192 at moe_tp 4). bf16 rows bound fp8 from above: fp8 experts can run
  as W8A16 (vLLM's Marlin MoE), half the bytes at bf16 compute. TensorRT-LLM's per-tensor fp8
  rows are faster than both and are kept.
"""

from __future__ import annotations

import numpy as np

MOE_ALSO = {"fp8": ("fp8_block", "bfloat16")}   # the package's moe_dtype values


def moe_lanes(shapes: np.ndarray, lat: np.ndarray, lanes: np.ndarray, mask: np.ndarray
              ) -> tuple[np.ndarray, dict[tuple[int, ...], str]]:
    """(rows to keep, key → the kept lane) of the rows in `mask`; `lanes` are the rows'
    kernel_source, with "|<moe_dtype>" appended where several dtypes compete."""
    names, counts = np.unique(lanes[mask], return_counts=True)
    rank = dict(zip(names, counts))
    idx = np.flatnonzero(mask)
    keep, chosen = np.zeros(len(mask), dtype=bool), {}
    if not len(idx):
        return keep, chosen
    keys, group = np.unique(shapes[idx, 1:], axis=0, return_inverse=True)
    group = group.ravel()
    for g, key in enumerate(keys):
        rows = idx[group == g]
        here = lanes[rows]
        best: dict[str, str] = {}
        for lane in sorted(set(here)):
            dt = lane.rpartition("|")[2]
            if dt not in best or rank[lane] > rank[best[dt]]:
                best[dt] = lane
        cands = list(best.values())
        times = [dict(zip(shapes[rows[here == c], 0], lat[rows[here == c]])) for c in cands]
        common = set.intersection(*(set(t) for t in times))
        score = [float(np.mean(np.log([t[x] for x in (common or t)]))) for t in times]
        lane = cands[int(np.argmin(score))]
        keep[rows[here == lane]] = True
        chosen[tuple(int(v) for v in key)] = lane
    return keep, chosen
