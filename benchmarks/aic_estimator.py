"""hastune's step latencies against aiconfigurator-core's own estimator, on the same kernel
tables: does the composition (hastune.calibrate.latency over hastune.models.shapes) add the
kernels up as the engines run them?

    python benchmarks/aic_estimator.py [--case NAME ...] [--json]

For each case (a model of aiconfigurator-core's packaged configs, a system, an engine, the
weights' dtype and a layout: attention TP, attention-DP ranks, expert parallelism) it prints
one prompt's prefill at 1k and 8k tokens and a decode step at batch 1 / 4 / 32 / 128 (hastune
at a context of 1,536 tokens, aiconfigurator at its own isl 1,024 + osl 1,024 step) in ms,
and hastune / aiconfigurator. hastune: `LatencyModel(arch, device, tp, ep).prefill(1, L)` and
`.decode_step(b, 1536)`, the device from `aic_source(weights, engine)`; aiconfigurator:
`EngineHandle.compile(model, system, engine, tp_size, attention_dp_size, moe_tp_size,
moe_ep_size, gemm / moe / kv-cache / fmha quant modes).predict_prefill_latency(1, L)` and
`.decode_step_latency(b, 1024, 1024)`. A case aiconfigurator cannot compile prints its
error in place of its figures. No engine term is applied: kernels only. Needs the `kernels`
extra (aiconfigurator-core).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFILLS = (1024, 8192)
BATCHES = (1, 4, 32, 128)
QUANT = {"bf16": "bfloat16", "fp8": "fp8_block", "nvfp4": "nvfp4"}


@dataclass(frozen=True)
class Case:
    name: str
    model: str            # Hugging Face id of an aiconfigurator-core packaged config
    system: str
    engine: str
    weights: str          # bf16 | fp8 | nvfp4
    tp: int               # attention TP of one rank
    ep: int = 1           # 1: experts TP-split; tp: whole per GPU; tp × dp: attention-DP
    version: str | None = None   # aiconfigurator's backend_version, where it needs one


CASES = (
    Case("deepseek-r1 trtllm fp8 b200 tp8 ep8", "deepseek-ai/DeepSeek-R1", "b200_sxm",
         "trtllm", "fp8", 8, 8),
    Case("deepseek-r1 trtllm fp8 b200 tp8", "deepseek-ai/DeepSeek-R1", "b200_sxm", "trtllm",
         "fp8", 8, 1),
    Case("deepseek-r1 trtllm fp8 b200 dp8", "deepseek-ai/DeepSeek-R1", "b200_sxm", "trtllm",
         "fp8", 1, 8),
    Case("deepseek-r1 sglang fp8 b200 tp8 ep8", "deepseek-ai/DeepSeek-R1", "b200_sxm",
         "sglang", "fp8", 8, 8),
    Case("qwen3-30b-a3b vllm bf16 h100 tp2 ep2", "Qwen/Qwen3-30B-A3B", "h100_sxm", "vllm",
         "bf16", 2, 2),
    Case("qwen3.5-397b sglang fp8 b200 tp4", "Qwen/Qwen3.5-397B-A17B", "b200_sxm", "sglang",
         "fp8", 4, 1),
    Case("qwen3.5-397b sglang fp8 b200 tp4 ep4", "Qwen/Qwen3.5-397B-A17B", "b200_sxm",
         "sglang", "fp8", 4, 4),
    Case("qwen3.5-397b sglang fp8 b200 tp8", "Qwen/Qwen3.5-397B-A17B", "b200_sxm", "sglang",
         "fp8", 8, 1),
    Case("glm-5 sglang fp8 b200 tp8", "zai-org/GLM-5", "b200_sxm", "sglang", "fp8", 8, 1),
)


def hastune_ms(c: Case) -> dict:
    import numpy as np

    from hastune.calibrate.aic_profiles import aic_source, gpu_spec
    from hastune.calibrate.device import build_device
    from hastune.calibrate.latency import LatencyModel
    from hastune.fidelity.rows import model_dir
    from hastune.models import load_model

    arch = load_model(model_dir(c.model, {}, REPO / "x.csv"))
    src = aic_source(c.weights, c.engine)
    lm = LatencyModel(arch, build_device(src, gpu_spec(c.system, src)), c.tp, c.ep)
    return {"prefill": [float(np.sum(lm.prefill(1, n))) * 1e3 for n in PREFILLS],
            "decode": [float(np.sum(lm.decode_step(b, 1536))) * 1e3 for b in BATCHES]}


def aic_ms(c: Case) -> dict:
    from aiconfigurator_core.sdk.engine import EngineHandle

    q = QUANT[c.weights]
    dp = c.ep // c.tp if c.ep > c.tp else 1
    extra = {"backend_version": c.version} if c.version else {}
    h = EngineHandle.compile(c.model, c.system, c.engine, tp_size=c.tp, attention_dp_size=dp,
                             moe_tp_size=1 if c.ep > 1 else c.tp, moe_ep_size=c.ep,
                             gemm_quant_mode=q, moe_quant_mode=q, kvcache_quant_mode="fp8",
                             fmha_quant_mode="bfloat16", **extra)
    return {"prefill": [float(h.predict_prefill_latency(1, n)) for n in PREFILLS],
            "decode": [float(h.decode_step_latency(b, 1024, 1024)) for b in BATCHES]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help="a case's name (default: all); repeat")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    cases = [c for c in CASES if not args.case or c.name in args.case]
    if not cases:
        print(f"no such case; cases: {', '.join(c.name for c in CASES)}", file=sys.stderr)
        return 2
    out = {}
    for c in cases:
        ours = hastune_ms(c)
        try:
            theirs = aic_ms(c)
        except Exception as exc:  # noqa: BLE001 - reported in place of the figures
            theirs = {"error": str(exc).splitlines()[0][:160]}
        out[c.name] = {"hastune_ms": ours, "aic_ms": theirs}
        if args.json:
            continue
        print(c.name)
        for part, xs in (("prefill", PREFILLS), ("decode", BATCHES)):
            label = "tokens" if part == "prefill" else "batch"
            for i, x in enumerate(xs):
                h = ours[part][i]
                if "error" in theirs:
                    print(f"  {part} {label} {x:>5}: hastune {h:8.2f} ms  aic: {theirs['error']}")
                    continue
                a = theirs[part][i]
                print(f"  {part} {label} {x:>5}: hastune {h:8.2f} ms  aic {a:8.2f} ms  "
                      f"ratio {h / a:5.2f}")
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
