"""What a result's figures do not model, said beside them: a goodput or a run that lies where
the simulator is known to be less sure than its scorecard (docs/fidelity.md), each caveat one
sentence that names the number, the reason and where to read more. `evaluate`, `simulate` and
the tune summary carry them as `caveats` and print them."""

from __future__ import annotations

from typing import Any

from hastune import archs

# The request rate per API server that TensorRT-LLM's measured runs never passed: its H100
# runs at 128 clients on TP 4 and 8 complete 35-36 requests/s whatever the prompt (1024 or
# 2048 tokens) for outputs of 128 and 256 tokens, where its token ceiling (STREAM_TOKEN_S)
# allows up to twice that (benchmarks/server_ceilings.py). What sets it is not known, and the
# simulator does not model it.
REQUEST_CEILING_RPS = {"trtllm": 35.0}
# The kernels alone against each engine's measured runs: median signed error of the mean TTFT
# over hastune/data/calibration/e2e/silicon_llama31.csv, the scorecard's "TTFT kernels" column
# (docs/fidelity.md; `hastune fidelity ... --json`, aggregate.engine.<e>.kernels.ttft.bias_pct).
KERNELS_TTFT_BIAS_PCT = {"vllm": -15.8, "sglang": -59.9, "trtllm": -22.4}
LABEL = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# architectures whose instances serve prompts and decodes both (the measured `agg` runs);
# the rest hand requests between pools (the `disagg` runs)
AGGREGATED = ("nodg", "padg")


def closed_loop(extra: dict) -> list[str]:
    """The caveat of a closed-loop run (its RunResult.extra) stopped unsettled at the most
    rounds hastune.sim.warmup.steady_run may run."""
    if "settled" not in extra or extra["settled"]:
        return []
    return [f"the closed loop did not settle in {extra['rounds']:g} rounds per client (the "
            f"most it may run, from the {extra['rounds_asked']:g} asked for): its mean TTFT "
            "may still drift in a longer run (docs/fidelity.md, how long a closed loop runs)"]


def caveats(terms: dict, config: Any, rate_rps: float, in_flight: float | None = None,
            moe: bool | None = None) -> list[str]:
    """The caveats of a result of `config` at `rate_rps` (a goodput, or the rate of one run)
    under the engine terms `terms` (hastune.engine_terms.record) on a kernel-table profile,
    with `in_flight` requests in the system there (None: not known), for a MoE model or a
    dense one (`moe`; None: not known)."""
    out = []
    engine, on = terms["engine"], bool(terms["on"])
    label = LABEL.get(engine, engine)
    arch = archs.of(config)
    bias = KERNELS_TTFT_BIAS_PCT.get(engine)
    if not on and bias is not None:
        out.append(f"engine terms off: with the kernels alone the simulated mean TTFT of "
                   f"{label}'s measured runs was {abs(bias):.0f}% "
                   f"{'low' if bias < 0 else 'high'} (median; docs/fidelity.md, the "
                   f"scorecard), so this TTFT is likely {'optimistic' if bias < 0 else 'high'}"
                   f", and the goodput with it where TTFT binds; `engine: {{name: {engine}, "
                   "terms: true}` adds the terms fitted on those runs")
    if on and terms.get("fitted_for") == "pooled":
        out.append(f"{label}'s engine terms were fitted on its runs on another GPU "
                   f"({terms.get('fitted_on', '')}), not on {terms.get('gpu')}: unchecked here")
    n = arch.streams(config)  # the instances that stream tokens, one API server each
    if on:
        out += measured_error(engine, str(terms.get("gpu", "")), moe,
                              "agg" if arch.name in AGGREGATED else "disagg",
                              None if in_flight is None else in_flight / n)
    cap = REQUEST_CEILING_RPS.get(engine)
    if cap is not None and rate_rps > cap * n:
        out.append(
            f"{rate_rps:.1f} req/s is {rate_rps / n:.1f} req/s per instance that streams "
            f"tokens ({n}), past the ~{cap:g} req/s per API server that {label}'s "
            f"measured runs did not pass (benchmarks/server_ceilings.py); that ceiling is not "
            f"simulated, so the real figure may be as low as {cap * n:.1f} req/s "
            "(docs/fidelity.md, what is not modelled)")
    out += _streams_past_the_fit(terms, n, in_flight, label)
    if on and not arch.terms_checked:
        checked = ", ".join(a.name for a in archs.ARCHITECTURES.values() if a.terms_checked)
        out.append(f"the engine terms were fitted and checked on measured runs of one "
                   f"aggregated instance ({checked}); {arch.name} with them has not been "
                   "checked against a measurement (docs/fidelity.md)")
    if (on and (terms.get("scheduler") or {}).get("wait_iters")
            and "batch_wait" not in arch.terms_simulated):
        out.append(f"TensorRT-LLM's batch waiting (engine.batch_wait_iters) is simulated in "
                   f"{_simulating('batch_wait')} only; this {arch.name} run goes without it, "
                   "and its prompts may wait longer for their first token than simulated "
                   "(docs/fidelity.md)")
    if engine == "sglang" and on and "token_frontend" not in arch.terms_simulated:
        out.append(f"SGLang's tokenizer-manager costs per output token are simulated in "
                   f"{_simulating('token_frontend')} only; this {arch.name} run goes without "
                   "them, and with many clients SGLang's TTFT there can be higher than "
                   "simulated (docs/fidelity.md)")
    return out


def built_tp(kernel_source: dict | None, gpu: str, config: Any) -> list[str]:
    """The caveat of a config whose TP groups rest on an all-reduce no table measured: a
    rack-scale GPU's TP degrees past its measured GPU counts (the profile's
    `kernel_source.tp_built`, hastune.calibrate.aic_fabric.stretch)."""
    built = {int(t) for t in str((kernel_source or {}).get("tp_built") or "").split(",")
             if t.strip()}
    used = sorted({sh.tp for sh in archs.of(config).shapes(config)} & built)
    if not used:
        return []
    return [f"TP {', '.join(map(str, used))} on {gpu}: no table measured its all-reduce on "
            "that many GPUs; it is the most GPUs measured times the bus factor (n - 1) / n, "
            "and GB300's all-reduce measured on 16 GPUs runs 3% to 46% above that: these "
            "latencies may read low (docs/profiles.md)"]


def measured_error(engine: str, gpu: str, moe: bool | None, mode: str,
                   per_stream: float | None) -> list[str]:
    """The error of the engine terms on measured runs of models they were not fitted on, in
    the finest regime of this result that holds enough of them (hastune.regimes:
    engine, GPU class, dense / MoE, aggregated or not, requests in flight per instance)."""
    from hastune.regimes import lookup, words

    got = lookup(engine, gpu, moe, mode, per_stream)
    if got is None:
        return []
    k, s = got
    if s["ttft_median_abs_pct"] is None or s["tpot_median_abs_pct"] is None:
        return []
    return [f"measured error, {words(k, LABEL)}: over {s['rows']} runs of models the engine terms "
            f"were not fitted on, the simulated mean TTFT was off by "
            f"{s['ttft_median_abs_pct']:.0f}% (median |error|, bias "
            f"{s['ttft_bias_pct']:+.0f}%) and TPOT by {s['tpot_median_abs_pct']:.0f}% "
            f"({s['tpot_bias_pct']:+.0f}%); read this result's latencies, and the goodput "
            "they bound, within that (docs/fidelity.md, the scorecard)"]


def _simulating(term: str) -> str:
    """The architectures whose simulator runs engine term `term`."""
    return ", ".join(a.name for a in archs.ARCHITECTURES.values() if term in a.terms_simulated)


def _streams_past_the_fit(terms: dict, n: int, in_flight: float | None, label: str
                          ) -> list[str]:
    """The front end's wait per request in flight (frontend_per_stream_s) taken past the most
    clients of a run the terms were fitted on (clients_max), with `in_flight` requests over
    `n` instances that stream tokens: a linear term extrapolated."""
    wait, most = terms.get("frontend_per_stream_s", 0.0), terms.get("clients_max", 0)
    if not terms["on"] or in_flight is None or wait <= 0 or most <= 0:
        return []
    k = in_flight / n
    if k <= most:
        return []
    return [f"about {k:.0f} requests in flight per instance that streams tokens ({n}), past "
            f"the {most} clients of the most loaded run {label}'s engine terms were fitted "
            f"on: the front end's wait of {wait * 1e3:.2f} ms per request in flight "
            f"({k * wait:.2f} s of TTFT here) is extrapolated that far, unchecked "
            "(docs/fidelity.md, what is not modelled)"]
