"""Write hastune/data/fidelity_regimes.json: the shipped engine terms' error on measured runs
of models they were not fitted on, by regime (hastune.fidelity.regimes), which a result's
caveats quote. Run after the terms or the simulator change:

    OMP_NUM_THREADS=1 python scripts/fidelity_regimes.py [CSV] [--write]

CSV defaults to hastune/data/calibration/e2e/silicon_train.csv; without --write the table is
printed only.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hastune import regimes as table_of
from hastune.fidelity import regimes
from hastune.jsonio import write_atomic

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "hastune" / "data" / "calibration" / "e2e" / "silicon_train.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv", nargs="?", default=str(TRAIN))
    ap.add_argument("--write", action="store_true", help=f"write {table_of.TABLE}")
    args = ap.parse_args()
    t0 = time.perf_counter()
    table = regimes.from_file(args.csv)
    print(f"{'regime':58} {'rows':>5} {'TTFT |err|':>10} {'bias':>6} {'TPOT |err|':>10} "
          f"{'bias':>6}")
    for k, v in table["regimes"].items():
        print(f"{k:58} {v['rows']:5d} {v['ttft_median_abs_pct']!s:>10} "
              f"{v['ttft_bias_pct']!s:>6} {v['tpot_median_abs_pct']!s:>10} "
              f"{v['tpot_bias_pct']!s:>6}")
    print(f"{len(table['regimes'])} regimes, {time.perf_counter() - t0:.0f} s; left out: "
          f"{', '.join(table['excluded_models'])}")
    if args.write:
        write_atomic(table_of.TABLE, json.dumps(table, indent=1) + "\n")
        print(f"wrote {table_of.TABLE}")


if __name__ == "__main__":
    main()
