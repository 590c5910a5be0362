"""Regenerate the calibrated profiles in profiles/ from the measured kernel tables.

    python scripts/make_profiles.py [--calibration DIR] [--out DIR] [--gpu G ...] [--model M ...]
    python scripts/make_profiles.py --derivation-check   # how far spec-ratio scaling holds

The kernel tables live in ../shared/calibration next to the repository (override with
--calibration or $HASTUNE_CALIBRATION). The YAML files are committed, so users of the shipped
profiles need no calibration data. See docs/profiles.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# pairs of measured systems standing in for a derived GPU and its source: same silicon with
# other memory (like A800 / RTX 6000 Ada vs their sources), and across architectures
DERIVATION_PAIRS = (("h100_sxm", "h200_sxm"), ("h200_sxm", "h100_sxm"),
                    ("h100_sxm", "l40s"), ("a100_sxm", "h100_sxm"))


def main(argv: list[str] | None = None) -> int:
    from hastune.calibrate.archs import MODELS
    from hastune.calibrate.build import profile_dict, render
    from hastune.calibrate.gpus import GPUS
    from hastune.calibrate.tables import default_calibration_dir, require_calibration
    from hastune.errors import InputError
    from hastune.profile import load_profile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", type=Path, default=None,
                    help=f"folder holding kernels/<system>/ (default {default_calibration_dir()})")
    ap.add_argument("--out", type=Path, default=REPO / "profiles", help="profiles folder")
    ap.add_argument("--gpu", action="append", choices=sorted(GPUS), help="only these GPUs")
    ap.add_argument("--model", action="append", choices=sorted(MODELS), help="only these models")
    ap.add_argument("--derivation-check", action="store_true",
                    help="print how well one measured system predicts another by spec ratios")
    args = ap.parse_args(argv)
    try:
        root = require_calibration(args.calibration)
    except InputError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    if args.derivation_check:
        from hastune.calibrate.check import derivation_error, proxy_error
        from hastune.calibrate.device import ATTENTION_PROXY_SYSTEM

        for src, dst in DERIVATION_PAIRS:
            errs = derivation_error(root, src, dst)
            cells = ", ".join(f"{k} {v.median_pct:.1f}/{v.p90_pct:.1f}%" for k, v in errs.items())
            print(f"{src} -> {dst} (median/P90 |error|): {cells}")
        for dst in ("l40s", "h200_sxm"):
            e = proxy_error(root, dst, ATTENTION_PROXY_SYSTEM)
            print(f"encoder attention of {dst} by proxy from {ATTENTION_PROXY_SYSTEM} (as A100 "
                  f"gets it): {e.median_pct:.1f}/{e.p90_pct:.1f}%")
        return 0
    t0 = time.perf_counter()
    for gpu in args.gpu or list(GPUS):
        for model in args.model or list(MODELS):
            data = profile_dict(model, gpu, root)
            path = args.out / gpu / f"{model}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(data), encoding="utf-8")
            prof = load_profile(path)  # what the simulator reads must validate
            errs = data["fit"]["error"]
            print(f"wrote {gpu}/{model}.yaml  tp {prof.tp_degrees}"
                  f"  prefill fit {errs['prefill']['median_pct']:.1f}%"
                  f"  decode fit {errs['decode']['median_pct']:.1f}%"
                  + (f"  encode fit {errs['encode']['median_pct']:.1f}%" if "encode" in errs
                     else ""))
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
