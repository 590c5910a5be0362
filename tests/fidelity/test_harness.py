"""How a measured run was taken (hastune.fidelity.harness): InferenceX's rows are simulated as
its benchmark ran them — lengths drawn from ⌊0.8 L⌋ … L, 10 × clients requests sent at once
and all counted, the servers' flags (TensorRT-LLM's token budget and batch waiting, vLLM's
sequence cap, an fp8 KV cache) — and the other rows as before."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune.data import SILICON_LLAMA31
from hastune.fidelity.harness import OWN, harness
from hastune.fidelity.rows import Case
from hastune.fidelity.run import client_model, recipe_for
from hastune.workload import sample_requests

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-70B"


def _case(engine: str, isl: int, osl: int, clients: int, tp: int, dated: bool,
          weights: str = "fp8", model: str = "llama_3_1_70b") -> Case:
    rid = (f"2026_04_06_{model}_h200_sxm_{engine}_{weights}_agg_{isl}x{osl}_c{clients}_tp{tp}"
           if dated else f"meta_llama_{engine}_{isl}x{osl}_c{clients}_tp{tp}")
    return Case(rid, engine, "", MODEL, "h200-141gb", weights, isl, osl, clients, tp, 1.0, 1.0,
                2)


cases = st.builds(_case, st.sampled_from(["vllm", "trtllm", "sglang"]),
                  st.sampled_from([1024, 2048, 8192]), st.sampled_from([128, 1024, 8192]),
                  st.sampled_from([4, 8, 16, 64]), st.sampled_from([1, 2, 4, 8]), st.booleans(),
                  st.sampled_from(["fp8", "bf16"]),
                  st.sampled_from(["llama_3_1_70b", "llama_3_1_70b", "gpt_oss_120b"]))


@given(case=cases)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_each_row_gets_its_benchmark(case):
    h = harness(case)
    dated = case.id.startswith("2026_")
    llama = "llama_3_1_70b" in case.id
    ckpt_kv = case.engine == "trtllm" and case.weights == "fp8"
    assert (h.name == OWN.name) == (not dated)
    rec = recipe_for(case, {}, ROOT / "examples")
    w = rec.workload
    # the KV cache: fp8 where InferenceX's Llama-70B servers set it, or TensorRT-LLM's fp8
    # checkpoints' own; else bf16
    scripted = dated and llama and case.engine != "sglang"  # InferenceX's Llama-70B scripts
    assert rec.precision.kv_cache == ("fp8" if scripted or ckpt_kv else "bf16")
    if not dated:
        assert w.prompt_tokens.dist == w.output_tokens.dist == "fixed"
        assert client_model(case, None) == "spread"
        return
    assert client_model(case, None) == "together"
    assert w.requests == 10 * case.clients
    reqs = sample_requests(w, 4000, 7)
    for got, L in ((reqs.prompt_tokens, case.isl), (reqs.output_tokens, case.osl)):
        assert got.min() >= int(0.8 * L) and got.max() <= L
        assert abs(got.mean() - 0.9 * L) < 0.02 * L  # uniform over the range
        assert len(np.unique(got)) > 20
    base = et.scheduler_defaults(case.engine, 141, case.gpu)
    s = h.scheduler(base)
    if not scripted:  # another model's InferenceX run: its client, the engine's own defaults
        assert s == base
    elif case.engine == "trtllm":
        assert s.chunk_tokens == s.prefill_tokens == 16384
        waits = (case.isl, case.osl) == (1024, 1024) and case.tp < 8
        assert (s.wait_iters, s.wait_ratio) == ((20, 0.9) if waits else (0, 0.0))
    else:
        assert s.chunk_tokens == 8192 and s.max_seqs == case.clients and s.wait_iters == 0
    # exact: the caller's own number of rounds (a recipe's closed loop over the same lengths)
    assert recipe_for(case, {}, ROOT / "examples", 40, exact=True).workload.requests == \
        40 * case.clients


def test_the_calibration_files_inferencex_rows_are_the_70b_ones():
    from hastune.fidelity.rows import read_cases

    csv = SILICON_LLAMA31
    assert csv.is_file(), f"{csv}: the calibration file hastune ships is missing"
    got = {(c.engine, c.gpu, harness(c).name) for c in read_cases(csv)}
    assert got == {("vllm", "h100-80gb", "inferencex"), ("vllm", "h200-141gb", "inferencex"),
                   ("trtllm", "h200-141gb", "inferencex"), ("trtllm", "h100-80gb", OWN.name),
                   ("sglang", "h200-141gb", OWN.name)}


def test_batch_waiting_is_what_holds_the_short_runs_first_token():
    """TensorRT-LLM on H200, 1024 × 1024 at 4 clients on TP 1 (measured 562 ms to the first
    token, 176 ms with 8192 output tokens): with the server's batch waiting the simulated TTFT
    is its prompts' time plus ~20 decode steps; without it, a few hundred ms less."""
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.run import simulate

    case = replace(_case("trtllm", 1024, 1024, 4, 1, True),
                   model="meta-llama/Llama-3.1-70B-Instruct")
    rec = recipe_for(case, {}, ROOT / "examples")
    prof = resolve_profile(rec, quiet=True)[0]
    t = et.terms_for("trtllm", "h200-141gb", 141)
    on = simulate(case, prof, t, rec)
    no_wait = replace(case, osl=1025)  # the same run without the flag (1024 × 1024 only)
    off = simulate(no_wait, prof, t, recipe_for(no_wait, {}, ROOT / "examples"))
    assert on.ttft_ms - off.ttft_ms > 10 * on.tpot_ms
    assert on.ttft_ms - off.ttft_ms < 25 * on.tpot_ms
