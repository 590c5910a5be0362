"""GPU check of the encode worker's SM split (runners/engine/partition.py). NOT YET RUN ON A GPU.

One go, on one CUDA GPU (≈ 3–5 min with the defaults):

1. the device: SMs, compute capability, torch, whether green contexts work (and why not);
2. the reference model's encode of a batch of images and a local-prefill batch, each alone on
   the whole device, then the two at once from two threads (as in the encode worker) without a
   split, then at each `--shares` f: alone on f·SMs / the rest, and at once on two green
   contexts (encode on f·SMs, prefill on the rest). Median latencies (ms) per case; a split
   helps the encoder when its concurrent latency stays near its alone-on-f latency;
3. the engine's own `DevicePartition` (SMPartitioner seed table) driving the same two threads:
   what it reports (sm_split, SM counts, prefills on the split vs the whole device);
4. `hastune serve` of an epd config with `--device cuda --json`: completed / failed, TTFT and
   TPOT P50/P90, and the run record's `sm_split` (expect "green contexts").

Run:  OMP_NUM_THREADS=1 python benchmarks/gpu_sm_split.py [--model ref-base] [--shares 0.2,0.4,0.6]
      [--json $OUT/gpu_sm_split.json] [--no-serve]
Exit: 0 all ran; 1 something failed or green contexts are unavailable (said why);
      2 no CUDA device here (nothing run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _ms(xs: list[float]) -> float:
    return 1e3 * statistics.median(xs)


class Bench:
    def __init__(self, torch: Any, model: Any, args: argparse.Namespace):
        self.torch, self.model, self.args = torch, model, args
        self.payloads = [model.example_payload("image", None, seed=i)
                         for i in range(args.encode_batch)]
        vocab = model.config.lm.vocab if hasattr(model, "config") else 512
        self.items = [([(7 * i + 3 * k) % (vocab - 1) + 1 for i in range(args.prefill_len)],
                       None) for k in range(args.prefill_batch)]

    def encode(self) -> None:
        self.model.encode(self.payloads)

    def prefill(self) -> None:
        for _, h in self.model.prefill_batch(self.items):
            self.model.free(h)

    def timed(self, fn: Any, stream: Any, n: int) -> list[float]:
        """n calls of fn on `stream` (None: the current one), each waited for."""
        torch = self.torch
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            if stream is None:
                fn()
                torch.cuda.current_stream().synchronize()
            else:
                with torch.cuda.stream(stream):
                    fn()
                stream.synchronize()
            out.append(time.perf_counter() - t0)
        return out

    def alone(self, fn: Any, stream: Any) -> float:
        self.timed(fn, stream, self.args.warmup)
        return _ms(self.timed(fn, stream, self.args.repeats))

    def together(self, s_enc: Any, s_pre: Any) -> tuple[float, float]:
        """Encode and prefill looping at once in two threads (each on its stream) until both
        have `repeats` timed calls; median latency of each while the other runs."""
        n = self.args.repeats
        res: dict[str, list[float]] = {}
        done = {"encode": False, "prefill": False}
        barrier = threading.Barrier(2)

        def loop(key: str, other: str, fn: Any, stream: Any) -> None:
            xs: list[float] = []
            try:
                barrier.wait()
                self.timed(fn, stream, self.args.warmup)
                while not (len(xs) >= n and done[other]) and len(xs) < 50 * n:
                    xs += self.timed(fn, stream, 1)
                    if len(xs) >= n:
                        done[key] = True
            finally:
                done[key] = True
                res[key] = xs

        th = threading.Thread(target=loop, args=("prefill", "encode", self.prefill, s_pre))
        th.start()
        loop("encode", "prefill", self.encode, s_enc)
        th.join()
        return _ms(res["encode"]), _ms(res["prefill"])


def device_part(torch: Any, args: argparse.Namespace, out: dict) -> Any:
    from runners.device.green import GreenContexts

    props = torch.cuda.get_device_properties(0)
    green, why = GreenContexts.probe(torch, "cuda:0")
    out["device"] = {"name": props.name, "sms": props.multi_processor_count,
                     "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
                     "cuda": torch.version.cuda, "green_contexts": green is not None,
                     "why_not": why}
    print(f"device: {props.name}, {props.multi_processor_count} SMs, sm_{props.major}"
          f"{props.minor}, torch {torch.__version__} (CUDA {torch.version.cuda}); green "
          f"contexts: {'yes' if green is not None else 'NO — ' + why}", flush=True)
    return green


def shares_part(torch: Any, green: Any, args: argparse.Namespace, out: dict) -> None:
    from runners.device.green import split_sms
    from runners.model import load_model

    t0 = time.perf_counter()
    model = load_model(args.model, device="cuda:0", kv_tokens=args.kv_tokens)
    print(f"model {args.model} loaded in {time.perf_counter() - t0:.1f} s; encode "
          f"{args.encode_batch} images, prefill {args.prefill_batch} × {args.prefill_len} "
          f"tokens; median of {args.repeats} (ms)", flush=True)
    b = Bench(torch, model, args)
    whole = torch.cuda.Stream()
    rows = []
    e1, p1 = b.alone(b.encode, whole), b.alone(b.prefill, whole)
    ec, pc = b.together(torch.cuda.Stream(), torch.cuda.Stream())
    rows.append({"case": "whole device", "encode_sms": None, "prefill_sms": None,
                 "encode_alone_ms": e1, "prefill_alone_ms": p1, "encode_together_ms": ec,
                 "prefill_together_ms": pc})
    if green is not None:
        for f in args.shares:
            n_e, n_p = split_sms(f, green.sms, green.major)
            se, sp = green.stream(n_e), green.stream(n_p)
            rows.append({"case": f"share {f:.2f}", "encode_sms": n_e, "prefill_sms": n_p,
                         "encode_alone_ms": b.alone(b.encode, se),
                         "prefill_alone_ms": b.alone(b.prefill, sp),
                         **dict(zip(("encode_together_ms", "prefill_together_ms"),
                                    b.together(se, sp)))})
    print(f"{'case':<14}{'SMs E/P':>10}{'enc alone':>11}{'pre alone':>11}{'enc both':>10}"
          f"{'pre both':>10}")
    for r in rows:
        sms = "-" if r["encode_sms"] is None else f"{r['encode_sms']}/{r['prefill_sms']}"
        print(f"{r['case']:<14}{sms:>10}{r['encode_alone_ms']:>11.2f}"
              f"{r['prefill_alone_ms']:>11.2f}{r['encode_together_ms']:>10.2f}"
              f"{r['prefill_together_ms']:>10.2f}", flush=True)
    out["shares"] = rows

    # the engine's own component, as encode_main uses it
    from hastune.policies import SMPartitioner
    from runners.engine.partition import DevicePartition

    part = DevicePartition.open(torch, "cuda:0", 1, SMPartitioner(None))
    stop = threading.Event()
    lat: dict[str, list[float]] = {"encode": [], "prefill": []}

    def prefill_loop() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            with part.prefilling():
                b.prefill()
            lat["prefill"].append(time.perf_counter() - t)

    th = threading.Thread(target=prefill_loop)
    th.start()
    for _ in range(args.repeats * 2):
        t = time.perf_counter()
        with part.encoding(args.encode_batch):
            b.encode()
        lat["encode"].append(time.perf_counter() - t)
        time.sleep(0.002)  # gaps, so some prefills start while the encoder idles
    stop.set()
    th.join()
    rep = part.report()
    out["engine_partition"] = {**rep, "encode_ms": _ms(lat["encode"]),
                               "prefill_ms": _ms(lat["prefill"])}
    print(f"engine DevicePartition: {json.dumps(rep)}; encode {_ms(lat['encode']):.2f} ms, "
          f"prefill {_ms(lat['prefill']):.2f} ms (medians)", flush=True)


def serve_part(args: argparse.Namespace, out: dict) -> bool:
    cmd = [sys.executable, "-m", "hastune", "serve", str(ROOT / args.config), "--recipe",
           str(ROOT / args.recipe), "--model", args.serve_model, "--device", "cuda",
           "--rate", str(args.rate), "--requests", str(args.requests), "--json",
           "--oversubscribe"]  # its workers share one GPU (one per worker otherwise)
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.serve_timeout,
                           cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        print(f"serve: timed out after {args.serve_timeout} s")
        out["serve"] = {"error": "timed out"}
        return False
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        print(f"serve: exit {p.returncode} after {wall:.0f} s\n{p.stderr[-3000:]}")
        out["serve"] = {"error": f"exit {p.returncode}", "stderr": p.stderr[-3000:]}
        return False
    res = json.loads(p.stdout[p.stdout.index("{"):])
    keep = ("completed", "failed", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s",
            "attainment", "sm_split", "wall_s")
    out["serve"] = {k: res.get(k) for k in keep}
    print(f"serve ({wall:.0f} s): " + json.dumps(out["serve"], indent=1), flush=True)
    kinds = {v.get("sm_split") for v in (res.get("sm_split") or {}).values()}
    return res.get("failed", 1) == 0 and kinds == {"green contexts"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ref-base", help="model of the share sweep")
    ap.add_argument("--kv-tokens", type=int, default=32768)
    ap.add_argument("--shares", default="0.2,0.4,0.6",
                    help="encoder SM shares to time (comma-separated)")
    ap.add_argument("--encode-batch", type=int, default=4)
    ap.add_argument("--prefill-batch", type=int, default=4)
    ap.add_argument("--prefill-len", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--no-serve", dest="serve", action="store_false")
    ap.add_argument("--config", default="examples/configs/reference-cpu-epd.yaml")
    ap.add_argument("--recipe", default="examples/reference-cpu.yaml")
    ap.add_argument("--serve-model", default="ref-small")
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--serve-timeout", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    args.shares = [float(x) for x in args.shares.split(",") if x.strip()]

    try:
        import torch
    except ImportError:
        print("gpu_sm_split: torch is not installed; nothing run", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"gpu_sm_split: no CUDA device here (torch {torch.__version__}); this check "
              "needs one GPU. Nothing run.", file=sys.stderr)
        return 2

    out: dict[str, Any] = {}
    ok = True

    def attempt(name: str, fn: Any) -> Any:
        """Run one part; a failure is reported and the next part still runs."""
        nonlocal ok
        try:
            return fn()
        except Exception:  # noqa: BLE001
            ok = False
            out[f"{name}_error"] = traceback.format_exc()[-3000:]
            print(f"{name}: FAILED\n{out[f'{name}_error']}", flush=True)
            return None

    green = attempt("device", lambda: device_part(torch, args, out))
    ok = ok and green is not None
    attempt("shares", lambda: shares_part(torch, green, args, out))
    if args.serve:
        ok = bool(attempt("serve", lambda: serve_part(args, out))) and ok
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
        print(f"wrote {args.json}")
    print("gpu_sm_split: " + ("all parts ran" if ok else "something failed or green contexts "
                              "are unavailable (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
