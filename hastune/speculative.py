"""Speculative decoding by multi-token prediction (MTP: DeepSeek-V3's `num_nextn_predict_layers`
module, TensorRT-LLM's `speculative_config: {decoding_type: MTP}`), amortised over the tokens
a decode step yields.

With k draft tokens a step, each running sequence drafts k tokens through the MTP module (one
layer each) and the model verifies its last token and the k drafts together: k + 1 tokens a
sequence through every GEMM, its KV read once (the attention kernel takes the k + 1 queries of a
sequence in one pass). Draft i is kept if it and every draft before it are accepted (rate a_i
each), so a step yields 1 + E tokens, E = Σ_i Π_{j ≤ i} a_j. aiconfigurator models it the same
way — `calc_expectation`, and each generation op scaled by (L + k) / L / (1 + E), L the
model's layers (sdk/models/helpers.py `mtp_scale_factor`) — with acceptance rates
(0.85, 0.3, 0, 0, 0) by default (`nextn_accept_rates`: E = 0.85 at k = 1, 1.105 at k ≥ 2);
`ACCEPT_RATES` are those. Where aiconfigurator times the step at (k + 1) × the sequences and
their KV, here the KV is read once a step.

`apply` gives a profile whose decode step is the time per token so amortised (a simulator
stepping one token a sequence per step then runs osl − 1 such steps: the mean TPOT of a run,
what a benchmark's TPOT measures; the lumpier inter-token gaps are not modelled). The
engine's per-iteration and per-sequence CPU time (hastune.engine_terms) come once a step, so
they are amortised without the kernels' factors. Prefill is as it is (aiconfigurator leaves
the context phase's scale at 1)."""

from __future__ import annotations

from dataclasses import dataclass

from hastune.profile import DecodeSpec, Profile, TPVariant

# aiconfigurator's default acceptance rates of draft 1, 2, … (`nextn_accept_rates`, "at most
# mtp5")
ACCEPT_RATES: tuple[float, ...] = (0.85, 0.3, 0.0, 0.0, 0.0)


def accepted(nextn: int, rates: tuple[float, ...] = ACCEPT_RATES) -> float:
    """E: the draft tokens a step keeps on average, Σ_{i ≤ nextn} Π_{j ≤ i} rates[j]."""
    if not 0 <= nextn <= len(rates):
        raise ValueError(f"{nextn} draft tokens: 0 to {len(rates)} (the acceptance rates "
                         "given)")
    out, p = 0.0, 1.0
    for a in rates[:nextn]:
        p *= a
        out += p
    return out


@dataclass(frozen=True)
class Speculative:
    """MTP with `nextn` draft tokens a step on a model of `layers` layers."""

    nextn: int
    layers: int
    rates: tuple[float, ...] = ACCEPT_RATES

    def __post_init__(self) -> None:
        accepted(self.nextn, self.rates)  # checks nextn against the rates
        if self.layers < 1:
            raise ValueError(f"layers must be ≥ 1, not {self.layers}")

    @property
    def tokens(self) -> float:
        """Tokens a step yields: 1 + E."""
        return 1.0 + accepted(self.nextn, self.rates)

    @property
    def layer_scale(self) -> float:
        """The step's kernels over the model's alone: (L + k) / L (one MTP layer a draft)."""
        return (self.layers + self.nextn) / self.layers

    def decode(self, d: DecodeSpec, iteration_s: float = 0.0, per_seq_s: float = 0.0
               ) -> DecodeSpec:
        """The per-token decode step of `d` (engine terms on: their `iteration_s` and
        `per_seq_s` are in its fixed and per-sequence parts; 0 for the kernels alone)."""
        if self.nextn == 0:
            return d
        a, g, m = self.layer_scale, 1.0 / self.tokens, self.nextn + 1
        kern_fixed = max(d.fixed_s - iteration_s, 0.0)
        kern_seq = max(d.per_seq_s - per_seq_s, 0.0)
        return d.model_copy(update={
            "fixed_s": g * (a * kern_fixed + iteration_s),
            "per_seq_s": g * (a * m * kern_seq + per_seq_s),
            "per_context_token_s": g * a * d.per_context_token_s})


def apply(profile: Profile, spec: Speculative, iteration_s: float = 0.0,
          per_seq_s: float = 0.0) -> Profile:
    """`profile` with every TP (EP, attention-DP) variant's decode step per token under
    `spec` (`Speculative.decode`); `iteration_s` / `per_seq_s`: the engine terms it carries."""
    if spec.nextn == 0:
        return profile

    def one(v: TPVariant | Profile):
        return v.model_copy(update={"decode": spec.decode(v.decode, iteration_s, per_seq_s)})

    return one(profile).model_copy(update={
        "variants": {d: one(v) for d, v in profile.variants.items()},
        "ep_variants": {d: {e: one(v) for e, v in m.items()}
                        for d, m in profile.ep_variants.items()},
        "dp_variants": {n: one(v) for n, v in profile.dp_variants.items()}})
