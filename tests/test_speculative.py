"""Multi-token prediction's decode step (hastune.speculative), on generated decode steps,
acceptance rates and engine terms:

- E, the drafts a step keeps, is Σ_i Π_{j ≤ i} a_j: aiconfigurator's `calc_expectation` (0.85
  at one draft and 1.105 at two or three with its default rates); no more drafts than rates.
- A step per token is (L + k) / L × the kernels of k + 1 tokens a sequence (the KV read once)
  plus the engine's CPU time once, over 1 + E tokens: so with every draft accepted and a
  weight-bound step it is (L + k) / (L (k + 1)) of the plain one, with none accepted it is
  slower than the plain one, and no draft is the plain step.
- A profile's every TP, EP and attention-DP variant gets it; prefill is untouched.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import speculative as sp
from hastune.profile import DecodeSpec, load_profile

ROOT = Path(__file__).resolve().parents[1]

rates = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6).map(tuple)
steps = st.builds(DecodeSpec, fixed_s=st.floats(1e-4, 0.1), per_seq_s=st.floats(0.0, 1e-3),
                  per_context_token_s=st.floats(0.0, 1e-7), max_batch=st.integers(1, 4096))


def test_aiconfigurators_default_expectation():
    assert sp.accepted(0) == 0.0
    assert sp.accepted(1) == pytest.approx(0.85)
    assert sp.accepted(2) == sp.accepted(3) == pytest.approx(0.85 + 0.85 * 0.3)
    with pytest.raises(ValueError):
        sp.accepted(len(sp.ACCEPT_RATES) + 1)


@given(r=rates, data=st.data())
def test_expectation_is_the_sum_of_prefix_products(r, data):
    k = data.draw(st.integers(0, len(r)))
    want = sum(math.prod(r[:i + 1]) for i in range(k))
    assert sp.accepted(k, r) == pytest.approx(want)
    assert 0.0 <= sp.accepted(k, r) <= k
    if k:  # one more draft keeps at least as many
        assert sp.accepted(k, r) >= sp.accepted(k - 1, r)


@settings(max_examples=200)
@given(d=steps, k=st.integers(1, 5), layers=st.integers(1, 128), r=rates,
       it=st.floats(0.0, 0.01), ps=st.floats(0.0, 1e-4), n=st.integers(1, 1024),
       ctx=st.floats(0.0, 1e7))
def test_the_step_per_token(d, k, layers, r, it, ps, n, ctx):
    r = (r + (0.5,) * 5)[:max(k, len(r))]
    spec = sp.Speculative(k, layers, r)
    on = d.model_copy(update={"fixed_s": d.fixed_s + it, "per_seq_s": d.per_seq_s + ps})
    got = spec.decode(on, it, ps).step(n, ctx)
    kern = d.fixed_s + d.per_seq_s * (k + 1) * n + d.per_context_token_s * ctx
    want = ((layers + k) / layers * kern + it + ps * n) / (1 + sp.accepted(k, r))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-15)


@given(d=steps, k=st.integers(1, 5), layers=st.integers(1, 128), n=st.integers(1, 512))
def test_every_draft_kept_on_a_weight_bound_step(d, k, layers, n):
    d = d.model_copy(update={"per_seq_s": 0.0, "per_context_token_s": 0.0})
    full = sp.Speculative(k, layers, (1.0,) * 5).decode(d)
    assert full.step(n, 0) == pytest.approx(d.step(n, 0) * (layers + k) / (layers * (k + 1)))
    none = sp.Speculative(k, layers, (0.0,) * 5).decode(d)
    assert none.step(n, 0) > d.step(n, 0)  # drafts none of which is kept only cost time
    assert sp.Speculative(0, layers).decode(d) == d


def test_a_profiles_variants_all_step_per_token():
    prof = load_profile(ROOT / "profiles" / "h100-80gb" / "qwen2-72b.yaml")
    (t, v), = list(prof.variants.items())[:1]
    other = v.model_copy(update={"decode": v.decode.model_copy(update={"fixed_s": 0.02})})
    prof = prof.model_copy(update={"ep_variants": {t: {t: other}}, "dp_variants": {4: other}})
    spec = sp.Speculative(3, 61)
    out = sp.apply(prof, spec)
    assert sp.apply(prof, sp.Speculative(0, 61)) is prof
    pairs = [(prof, out)] + [(prof.variants[t], out.variants[t]) for t in prof.variants]
    pairs += [(prof.ep_variants[t][e], out.ep_variants[t][e]) for t in prof.ep_variants
              for e in prof.ep_variants[t]]
    pairs += [(prof.dp_variants[n], out.dp_variants[n]) for n in prof.dp_variants]
    assert len(pairs) > 1
    for a, b in pairs:
        assert b.prefill == a.prefill
        assert b.decode == spec.decode(a.decode)
        assert b.decode.step(8, 1e4) != a.decode.step(8, 1e4)
