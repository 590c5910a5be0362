"""Ceilings outside the GPU in measured closed-loop runs (issue 13): where a run's throughput
stops growing with the GPUs, something else — the engine's API server, its CPU loop, the
benchmark client — sets it.

    python benchmarks/server_ceilings.py [CSV] [--engine trtllm] [--gpu h100-80gb]
                                         [--clients 128]

Pure arithmetic on a silicon-format CSV (default hastune/data/calibration/e2e/
silicon_llama31.csv), no simulation. For every aggregated run of the engine at the given
concurrency it prints the measured requests/s (clients over a request's lifetime, TTFT +
(osl − 1) × TPOT) and output tokens/s per TP, and marks the shapes whose throughput moves by
less than 10% from TP 4 to TP 8 (on a ceiling). Over those it prints the time per request
and per output token, and two readings of it: one serial process (a + b × osl per request,
least squares) and two (max(a, b × osl): `a` the median over outputs ≤ 256 tokens, `b` over
the longer ones), with each reading's residuals. TensorRT-LLM's `STREAM_TOKEN_S` (110 µs) is
the second reading's `b` on its H100 runs; docs/fidelity.md gives what modelling the
ceilings did to the scorecard.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from silicon import CSV  # benchmarks/silicon.py (this folder is on the path)


def main() -> int:
    from hastune.fidelity.rows import read_cases

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", type=Path, default=CSV)
    ap.add_argument("--engine", default="trtllm")
    ap.add_argument("--gpu", default="h100-80gb")
    ap.add_argument("--clients", type=int, default=128)
    a = ap.parse_args()
    rows = [c for c in read_cases(a.csv)
            if c.engine == a.engine and c.gpu == a.gpu and c.clients == a.clients]
    if not rows:
        print(f"no {a.engine} runs on {a.gpu} at {a.clients} clients in {a.csv}",
              file=sys.stderr)
        return 2
    by = defaultdict(dict)
    for c in rows:
        life = (c.ttft_ms + (c.osl - 1) * c.tpot_ms) / 1e3
        by[(c.isl, c.osl)][c.tp] = (c.clients / life, c)
    tps = sorted({c.tp for c in rows})
    print(f"{a.engine} on {a.gpu}, {a.clients} clients: requests/s (output tokens/s), "
          "TTFT / TPOT ms, by TP")
    print("isl x osl   " + "".join(f"{'TP ' + str(t):>30}" for t in tps) + "  ceiling")
    flat = []
    for (isl, osl), m in sorted(by.items()):
        cells = []
        for t in tps:
            if t in m:
                r, c = m[t]
                cells.append(f"{r:6.1f} ({r * osl:5.0f}) {c.ttft_ms:5.0f}/{c.tpot_ms:5.1f}")
            else:
                cells.append("")
        on = 4 in m and 8 in m and abs(m[8][0] / m[4][0] - 1) < 0.10
        if on:
            flat += [(osl, 1e3 / m[t][0]) for t in (4, 8)]
        print(f"{isl:>5} x {osl:<5}" + "".join(f"{s:>30}" for s in cells)
              + ("  yes" if on else ""))
    if not flat:
        print("no shape on a ceiling (throughput moves by 10% or more from TP 4 to 8)")
        return 0
    osl = np.array([f[0] for f in flat], dtype=float)
    ms = np.array([f[1] for f in flat])
    print(f"\non a ceiling: {len(flat)} runs (TP 4 and 8); ms per request by output length:")
    for o in sorted(set(osl)):
        print(f"  {int(o):5d} tokens: " + ", ".join(f"{v:.1f}" for v in ms[osl == o]))
    A = np.stack([np.ones_like(osl), osl], axis=1)
    (ca, cb), *_ = np.linalg.lstsq(A, ms, rcond=None)
    one = ca + cb * osl
    short = ms[osl <= 256]
    ma = float(np.median(short)) if short.size else 0.0
    mb = float(np.median(ms[osl > 256] / osl[osl > 256])) if (osl > 256).any() else 0.0
    two = np.maximum(ma, mb * osl)
    for name, pred, what in (
            ("one process, a + b x osl", one, f"a {ca:.1f} ms, b {cb * 1e3:.0f} us"),
            ("two, max(a, b x osl)", two, f"a {ma:.1f} ms, b {mb * 1e3:.0f} us")):
        err = pred / ms - 1
        print(f"{name:>26}: {what}; |residual| median {100 * np.median(np.abs(err)):.1f}%, "
              f"max {100 * np.max(np.abs(err)):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
