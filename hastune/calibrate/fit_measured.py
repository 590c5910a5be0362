"""Fit measured rows (hastune.calibrate.measure) to a profile's linear forms.

Same forms and fitting as the calibrated profiles (hastune.calibrate.fit: non-negative least
squares on relative error, 4 significant figures):

    encode   = fixed + per_item·n + per_token·Σ x + per_token_sq·Σ x²    (x: encoder tokens)
    prefill  = fixed + per_token·Σ L + per_token_sq·Σ L²
    decode   = fixed + per_seq·n + per_context_token·Σ context

A seeded share of each stage's rows is held out of the fit; `fit.error` is the error of the
written coefficients on those rows, `fit.measured.fitted_error` the error on the rows fitted.
Share curves are relative latencies (time at share f / time at share 1), made monotone.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import defaultdict

import numpy as np
import yaml

from hastune.calibrate.fit import LinearFit, error_stat, fit_linear
from hastune.calibrate.measure import ModelInfo, Plan, Row

NAMES = {
    "encode": ("fixed_s", "per_item_s", "per_token_s", "per_token_sq_s"),
    "prefill": ("fixed_s", "per_token_s", "per_token_sq_s"),
    "decode": ("fixed_s", "per_seq_s", "per_context_token_s"),
}
HOLDOUT_FRACTION = 0.25
CPU_ACTIVATION_SHARE = 0.1  # headroom kept free on CPU, where activations are not measured
SHARE_MEANING = {
    "threads": "share f = k of the worker's N threads (torch.set_num_threads(k)); an encoder "
               "and a co-resident prefill split the threads of one CPU worker",
    "green contexts": "share f = SMs of a CUDA green context / SMs of the GPU",
    "none": "not measured (no green contexts): the encode curve is left out "
            "(the partitioner falls back to the EAServe table) and prefill keeps the default",
    "time-shared": "one thread: an encoder and a co-resident prefill time-share the worker's "
                   "one core (the engine pins each worker to its own cores), so both curves "
                   "are 1/share — a core has no idle units for the other to use",
}
# relative latency 1/f at share f: what time-sharing one core gives (piecewise linear between
# these points, as profiles interpolate)
TIME_SHARED_CURVE = [(f, round(1.0 / f, 4)) for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                                      0.9, 1.0)]


def features(stage: str, p: dict) -> list[float]:
    if stage == "encode":
        n, x = p["batch"], p["tokens"]
        return [1.0, n, n * x, n * x * x]
    if stage == "prefill":
        n, L = p["batch"], p["length"]
        return [1.0, n * L, n * L * L]
    n, c = p["batch"], p.get("mean_context", p["context"])
    return [1.0, n, n * c]


def split(rows: list[Row], fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """(fit rows, held-out rows): a seeded `fraction` of the rows, none if fewer than 4."""
    rows = sorted(rows, key=lambda r: r.key)
    k = int(round(fraction * len(rows))) if len(rows) >= 4 else 0
    held = set(np.random.default_rng(seed).permutation(len(rows))[:k].tolist())
    return ([r for i, r in enumerate(rows) if i not in held],
            [r for i, r in enumerate(rows) if i in held])


def fit_stage(stage: str, rows: list[Row], fraction: float, seed: int
              ) -> tuple[LinearFit, dict | None]:
    """The fit on the fit rows, and its error on the held-out rows (None: none held out)."""
    fit_rows, held = split(rows, fraction, seed)
    X = np.array([features(stage, r.params) for r in fit_rows])
    y = np.array([r.seconds for r in fit_rows])
    lf = fit_linear(X, y, NAMES[stage])
    if not held:
        return lf, None
    Xh = np.array([features(stage, r.params) for r in held])
    yh = np.array([r.seconds for r in held])
    return lf, error_stat(Xh, yh, lf.coef)


def _relative(by_share: dict[float, float]) -> list[list[float]] | None:
    """[(share, time/time at 1.0)] rising to 1.0, never below 1, not rising with share."""
    if 1.0 not in by_share or len(by_share) < 2:
        return None
    base = by_share[1.0]
    pts = sorted((s, t / base) for s, t in by_share.items())
    out, floor = [], 1.0
    for s, r in reversed(pts):
        floor = max(floor, r if s < 1.0 else 1.0)
        out.append([round(s, 4), round(floor, 4)])
    return out[::-1]


def share_curves(rows: list[Row]) -> tuple[dict[int, list] | None, list | None]:
    """(encode sm_curve per batch, prefill sm_curve) from the share rows, or None."""
    enc: dict[int, dict[float, float]] = defaultdict(dict)
    pre: dict[tuple, dict[float, float]] = defaultdict(dict)
    for r in rows:
        if r.stage == "encode@share":
            enc[r.params["batch"]][round(r.params["share"], 4)] = r.seconds
        elif r.stage == "prefill@share":
            pre[(r.params["batch"], r.params["length"])][round(r.params["share"], 4)] = r.seconds
    enc_curves = {b: c for b, v in sorted(enc.items()) if (c := _relative(v))}
    pre_curve = None
    if pre:  # geometric mean of the relative latencies over the prefill shapes
        logs: dict[float, list[float]] = defaultdict(list)
        for v in pre.values():
            for s, t in v.items():
                if 1.0 in v:
                    logs[s].append(math.log(t / v[1.0]))
        pre_curve = _relative({s: math.exp(sum(x) / len(x)) for s, x in logs.items()})
    return enc_curves or None, pre_curve


def profile_dict(info: ModelInfo, rows: list[Row], plan: Plan, *, gpu: str, device: str,
                 torch_version: str, command: str, share_kind: str, gpu_bytes: float,
                 activation_bytes: float | None = None,
                 holdout_fraction: float = HOLDOUT_FRACTION, holdout_seed: int = 0,
                 conditions: str = "") -> dict:
    """The profile mapping (what hastune.profile reads) for measured `rows`."""
    by_stage: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_stage[r.stage].append(r)
    errors: dict[str, dict] = {}
    fitted: dict[str, dict] = {}
    coef: dict[str, dict[str, float]] = {}
    for stage in ("encode", "prefill", "decode"):
        if not by_stage[stage]:
            continue
        lf, held = fit_stage(stage, by_stage[stage], holdout_fraction, holdout_seed)
        coef[stage] = lf.as_dict()
        fitted[stage] = lf.stat()
        if held is not None:
            errors[stage] = held
    enc_curves, pre_curve = share_curves(rows)
    if share_kind == "time-shared":
        enc_curves = {1: [list(p) for p in TIME_SHARED_CURVE]}
        pre_curve = [list(p) for p in TIME_SHARED_CURVE]
    encode = coef.get("encode") or dict.fromkeys(NAMES["encode"], 0.0)
    if enc_curves:
        encode = {**encode, "sm_curve": enc_curves}
    prefill = {**coef["prefill"], "max_batch_tokens": plan.prefill_token_cap}
    if pre_curve:
        prefill["sm_curve"] = pre_curve
    if activation_bytes is None:
        activation_bytes = CPU_ACTIVATION_SHARE * gpu_bytes
    decode = {**coef["decode"], "max_batch": max(plan.decode_batches)}
    if decode["fixed_s"] <= 0:  # the schema wants a positive fixed step time
        decode["fixed_s"] = float(f"{min(r.seconds for r in by_stage['decode']) * 0.01:.4g}")
    if prefill["per_token_s"] <= 0:
        prefill["per_token_s"] = 1e-9
    today = _dt.date.today().isoformat()
    counts = {s: len(v) for s, v in sorted(by_stage.items())}
    return {
        "kind": "profile", "name": f"{info.name}@{gpu}", "model": info.name, "gpu": gpu,
        "source": f"MEASURED: {info.name} on {device}, torch {torch_version}, {today}"
                  + (f" ({conditions})." if conditions else "."),
        "method": (
            f"`hastune profile` timed the model's own encode / prefill_batch / decode_step "
            f"on the device: {plan.warmup} untimed warm-up runs, then the median of "
            f"{plan.repeats} timed runs per shape ({sum(counts.values())} shapes). Linear forms "
            "fitted by non-negative least squares on relative error over "
            f"{1 - holdout_fraction:.0%} of each stage's shapes; `fit.error` is their error on "
            "the held-out rest. Decode steps run on synthetic KV of the given context. "
            f"Share curves: {SHARE_MEANING[share_kind]}. Memory: the model's real weight and "
            "KV bytes; gpu_bytes is "
            + ("the device's memory, activation headroom the measured peak above weights and "
               "KV pool." if device.startswith("cuda") else
               f"a stated budget, activation headroom {CPU_ACTIVATION_SHARE:.0%} of it "
               "(not measured on CPU).")),
        "memory": {"gpu_bytes": float(gpu_bytes), "weight_bytes": info.weight_bytes,
                   "encoder_weight_bytes": info.encoder_weight_bytes,
                   "kv_bytes_per_token": info.kv_bytes_per_token,
                   "activation_bytes": float(f"{activation_bytes:.4g}"), "utilisation": 0.9},
        "embedding_bytes_per_token": info.embedding_bytes_per_token,
        "encode": encode, "prefill": prefill, "decode": decode, "tp": 1,
        "fit": {"holdout_fraction": holdout_fraction, "holdout_seed": holdout_seed,
                "error": errors,
                "measured": {"device": device, "torch": torch_version, "command": command,
                             "warmup": plan.warmup, "repeats": plan.repeats, "rows": counts,
                             "share": share_kind, "fitted_error": fitted}},
    }


HEADER = ("# Measured profile: {name}, {device}, torch {torch}.\n"
          "# Regenerate: {command}\n"
          "# Error of the linear forms on held-out measured rows (median / P90 %): {errs}\n"
          "# Measured rows: {rows}\n")


def render(data: dict, rows_file: str) -> str:
    m = data["fit"]["measured"]
    errs = ", ".join(f"{k} {v['median_pct']:.1f}/{v['p90_pct']:.1f}"
                     for k, v in data["fit"]["error"].items()) or "none held out"
    head = HEADER.format(name=data["name"], device=m["device"], torch=m["torch"],
                         command=m["command"], errs=errs, rows=rows_file)
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True,
                                 default_flow_style=None, width=100)
