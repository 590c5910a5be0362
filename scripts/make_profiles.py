"""Regenerate the calibrated profiles in profiles/ from the measured kernel tables.

    python scripts/make_profiles.py [--calibration DIR] [--out DIR] [--gpu G ...] [--model M ...]
    python scripts/make_profiles.py --derivation-check   # how far spec-ratio scaling holds
    python scripts/make_profiles.py --source aic [--engine vllm|sglang|trtllm] [--version V]
        [--precision bf16|fp8|fp8_block] [--kv-cache bf16|fp8] [--out DIR]

The kernel tables live in hastune/data/calibration (shipped with the package) (override with
--calibration or $HASTUNE_CALIBRATION). The YAML files are committed, so users of the shipped
profiles need no calibration data. `--source aic` reads aiconfigurator-core's tables instead
(pip install 'hastune[kernels]') and writes into a temporary folder unless --out names one
(never into profiles/: the shipped profiles come from the calibration folder). --gpu then also
takes the package's systems (b200_sxm, gb200, ...). See docs/profiles.md.
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

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", type=Path, default=None,
                    help=f"folder holding kernels/<system>/ (default {default_calibration_dir()})")
    ap.add_argument("--out", type=Path, default=None, help="profiles folder (default "
                    "profiles/; with --source aic a new temporary folder)")
    ap.add_argument("--gpu", action="append", help=f"only these GPUs ({', '.join(GPUS)}; "
                    "with --source aic also the package's systems)")
    ap.add_argument("--source", choices=("csv", "aic"), default="csv",
                    help="kernel tables: the calibration folder's CSVs, or aiconfigurator-core")
    ap.add_argument("--engine", choices=("vllm", "sglang", "trtllm"), default="vllm",
                    help="--source aic: the engine the kernels were measured with")
    ap.add_argument("--version", default=None, help="--source aic: engine version (default "
                    "the package's current; 'newest')")
    ap.add_argument("--precision", choices=("bf16", "fp8", "fp8_block"), default="bf16",
                    help="--source aic: GEMM / MoE weights")
    ap.add_argument("--kv-cache", choices=("bf16", "fp8"), default="bf16",
                    help="--source aic: KV cache (attention kernels)")
    ap.add_argument("--model", action="append", choices=sorted(MODELS), help="only these models")
    ap.add_argument("--derivation-check", action="store_true",
                    help="print how well one measured system predicts another by spec ratios")
    args = ap.parse_args(argv)
    try:
        if args.source == "aic":
            return _from_aic(args)
        root = require_calibration(args.calibration)
        for gpu in args.gpu or []:
            if gpu not in GPUS:
                raise InputError(None, "--gpu", f"unknown GPU {gpu!r}",
                                 f"use one of {', '.join(GPUS)} (or --source aic)")
    except InputError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    args.out = args.out or REPO / "profiles"
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
    _write_all(args, args.gpu or list(GPUS), lambda model, gpu: profile_dict(model, gpu, root),
               render)
    return 0


def _from_aic(args) -> int:
    import tempfile

    from hastune.calibrate.aic_profiles import aic_source, gpu_spec, gpu_table
    from hastune.calibrate.build import profile_dict, render

    src = aic_source({"weights": args.precision, "kv_cache": args.kv_cache}, args.engine,
                     args.version)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="hastune-aic-profiles-"))
    elif args.out.resolve() == (REPO / "profiles").resolve():
        print("error: --out: the shipped profiles/ come from the calibration folder. Fix: "
              "name another folder (or none: a temporary one)", file=sys.stderr)
        return 2
    gpus = args.gpu or [r["gpu"] for r in gpu_table()]
    specs = {g: gpu_spec(g, src) for g in gpus}
    print(f"kernel tables: {src.database}")
    _write_all(args, gpus, lambda model, gpu: profile_dict(model, specs[gpu], src),
               lambda data: render(data, origin=src.origin), skip=True)
    print(f"profiles in {args.out}")
    return 0


def _write_all(args, gpus, build, render, skip: bool = False) -> None:
    """Build, write and validate each profile; `skip`: report a model that fits at no TP
    degree or a GPU lacking a table (the package's systems vary) and go on."""
    from hastune.calibrate.archs import MODELS
    from hastune.errors import InputError
    from hastune.profile import load_profile

    t0 = time.perf_counter()
    for gpu in gpus:
        for model in args.model or list(MODELS):
            try:
                data = build(model, gpu)
            except (ValueError, InputError) as exc:
                if not skip:
                    raise
                print(f"skipped {gpu}/{model}: {exc}")
                continue
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


if __name__ == "__main__":
    sys.exit(main())
