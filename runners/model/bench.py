"""Offline throughput of a model, no engine: `python -m runners.model.bench --model ref-small`.

Serves N requests in waves: encode in micro-batches, prefill in batches, then decode the wave
together (continuous batching without arrivals). Requests: a mix of image / audio / video /
text with fixed prompt and output lengths. Prints requests/s and per-stage time — an upper
bound for an engine on the same cores (no scheduling, no hand-offs).
"""

from __future__ import annotations

import argparse
import time


def run(model_name: str, requests: int, wave: int, prompt: int, output: int, threads: int,
        encode_batch: int, prefill_batch: int, mix: dict[str, float]) -> dict[str, float]:
    import torch

    from runners.model import load_model

    torch.set_num_threads(threads)
    model = load_model(model_name)
    kinds: list[str] = []
    for kind, share in mix.items():
        kinds += [kind] * round(share * requests)
    kinds = (kinds * (requests // max(len(kinds), 1) + 1))[:requests]
    payloads = {k: model.example_payload(k) for k in set(kinds) if k != "text"}
    vocab = model.config.lm.vocab  # type: ignore[attr-defined]
    prompt_ids = [(7 * i + 3) % vocab for i in range(prompt)]
    # warm-up
    model.generate(prompt_ids, model.encode([next(iter(payloads.values()))])[0]
                   if payloads else None, 4)
    t = {"encode": 0.0, "prefill": 0.0, "decode": 0.0}
    t0 = time.perf_counter()
    for start in range(0, requests, wave):
        batch = kinds[start:start + wave]
        embs: list[object] = [None] * len(batch)
        mm = [i for i, k in enumerate(batch) if k != "text"]
        a = time.perf_counter()
        for j in range(0, len(mm), encode_batch):
            idx = mm[j:j + encode_batch]
            for i, e in zip(idx, model.encode([payloads[batch[i]] for i in idx])):
                embs[i] = e
        b = time.perf_counter()
        handles = []
        for j in range(0, len(batch), prefill_batch):
            handles += [h for _, h in model.prefill_batch(
                [(prompt_ids, embs[i]) for i in range(j, min(j + prefill_batch, len(batch)))])]
        c = time.perf_counter()
        for _ in range(output - 1):
            model.decode_step(handles)
        for h in handles:
            model.free(h)
        d = time.perf_counter()
        t["encode"] += b - a
        t["prefill"] += c - b
        t["decode"] += d - c
    wall = time.perf_counter() - t0
    return {"requests": requests, "wall_s": wall, "req_per_s": requests / wall,
            **{f"{k}_s": v for k, v in t.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ref-small")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--wave", type=int, default=32, help="requests decoded together")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--encode-batch", type=int, default=4)
    ap.add_argument("--prefill-batch", type=int, default=8)
    ap.add_argument("--mix", default="image=0.4,audio=0.3,video=0.1,text=0.2")
    a = ap.parse_args()
    mix = {k: float(v) for k, v in (p.split("=") for p in a.mix.split(","))}
    res = run(a.model, a.requests, a.wave, a.prompt, a.output, a.threads, a.encode_batch,
              a.prefill_batch, mix)
    print(f"{a.model}: {res['requests']} requests ({a.mix}; prompt {a.prompt}, output "
          f"{a.output} tokens) on {a.threads} threads in {res['wall_s']:.2f} s = "
          f"{res['req_per_s']:.1f} req/s (encode {res['encode_s']:.2f} s, prefill "
          f"{res['prefill_s']:.2f} s, decode {res['decode_s']:.2f} s)")


if __name__ == "__main__":
    main()
