"""What a profile builder times, per GPU of one replica: the GEMMs of every layer (n, k for
m rows, m-independent), the attention calls, the MoE calls and the collectives, at a
tensor-parallel degree `tp` and expert-parallel degree `ep`, laid out as vLLM does.

    plan = layer_plan(arch.llm, tp=2)              # experts TP-split like the rest
    plan = layer_plan(arch.llm, tp=2, ep=8)        # experts whole, spread over 8 GPUs
    for g in plan.gemms: t += g.layers * g.count * gemm(g.m(tokens, seqs), g.n, g.k)

Dense layer: qkv (n = (heads/tp + 2·kv/tp)·head_dim, k = hidden), o, gate_up, down, as
hastune.calibrate.latency composes them. MLA (DeepSeek): the fused q_a + kv_a projection is
replicated, q_b / kv_b / o are TP-split; decode absorbs kv_b into per-head BMMs (q_nope →
latent, latent → v) and attends over the latent, prefill expands the latent; DSA adds the
indexer's projections (replicated: query from the q latent, key and per-head weights from the
hidden state). Gated DeltaNet layers (Qwen3.5) have in_proj (q, k, v and the gate z), the b /
a projection and out_proj, TP-split by heads, and no attention call (hastune.calibrate.latency
times their conv and recurrence). MoE layer: a
replicated router, `count` local experts each seeing m = tokens·top_k/experts rows (balanced
routing), shared experts TP-split. With ep > 0 the experts are not TP-split (moe_tp = 1). At
ep = tp every GPU of the group holds every token: each runs its own experts on all of them and
the layer's TP all-reduce sums their outputs (no all-to-all, as in the engines without
attention-DP). ep > tp means data-parallel attention across ep/tp groups: each rank's tokens go
to the experts' GPUs and back by all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass

from hastune.models.spec import LLMArch


@dataclass(frozen=True)
class Gemm:
    name: str
    n: int
    k: int
    layers: int                     # layers it runs in
    m_per: float = 1.0              # rows per token (per sequence when rows == "sequences")
    count: int = 1                  # instances per layer on one GPU (local experts, heads)
    rows: str = "tokens"            # "tokens" of the batch, or "sequences" (the LM head)
    kind: str = "dense"             # dense | expert (grouped GEMM) | bmm (MLA absorbed)

    def m(self, tokens, seqs=None):
        return self.m_per * (tokens if self.rows == "tokens" or seqs is None else seqs)


@dataclass(frozen=True)
class Attention:
    layers: int
    heads: int                      # query heads per GPU
    kv_heads: int                   # KV heads per GPU (1 latent for MLA)
    head_dim: int                   # MLA: the latent's kv_lora_rank + qk_rope_head_dim
    window: int | None = None       # sliding-window layers: keys seen at most
    mla: bool = False
    v_head_dim: int = 0             # MLA decode: kv_lora_rank (values from the latent)


@dataclass(frozen=True)
class MoECall:
    """One MoE layer as aiconfigurator-core's MoE table keys it."""

    layers: int
    hidden: int
    inter: int                      # moe_intermediate_size (whole, before any split)
    topk: int
    experts: int
    moe_tp: int
    moe_ep: int


@dataclass(frozen=True)
class Collective:
    kind: str                       # all_reduce | all_to_all
    gpus: int
    layers: int
    calls: int                      # per layer
    bytes_per_token: float          # at 2 bytes per activation element


@dataclass(frozen=True)
class LayerPlan:
    tp: int
    ep: int
    phase: str
    gemms: tuple[Gemm, ...]
    attention: tuple[Attention, ...]
    moe: MoECall | None
    collectives: tuple[Collective, ...]


def _attention_gemms(a: LLMArch, tp: int, phase: str) -> list[Gemm]:
    L, h = a.layers, a.heads // tp
    if not a.mla:
        kv, La = a.kv_heads_per_gpu(tp), a.attn_layers
        q = (2 if a.output_gate else 1) * h       # Qwen3.5: the query and its output gate
        out = [Gemm("qkv", (q + 2 * kv) * a.head_dim, a.hidden, La),
               Gemm("o", a.hidden, h * a.head_dim, La)]
        if a.linear_layers:  # Gated DeltaNet: in_proj (q, k, v, z), b and a, out_proj
            Ll, v = a.linear_layers, a.linear_v_heads * a.linear_v_dim // tp
            out += [Gemm("gdn_in", a.gdn_conv_channels() // tp + v, a.hidden, Ll),
                    Gemm("gdn_ba", 2 * a.linear_v_heads // tp, a.hidden, Ll),
                    Gemm("gdn_out", a.hidden, v, Ll)]
        return out
    qk, lat = a.qk_nope_head_dim + a.qk_rope_head_dim, a.kv_lora_rank
    out = []
    if a.q_lora_rank:
        out += [Gemm("qkv_a", a.q_lora_rank + lat + a.qk_rope_head_dim, a.hidden, L),
                Gemm("q_b", h * qk, a.q_lora_rank, L)]
    else:
        out += [Gemm("q", h * qk, a.hidden, L),
                Gemm("kv_a", lat + a.qk_rope_head_dim, a.hidden, L)]
    if phase == "decode":           # absorbed: per-head BMMs against the latent
        out += [Gemm("q_nope_to_latent", lat, a.qk_nope_head_dim, L, count=h, kind="bmm"),
                Gemm("latent_to_v", a.v_head_dim, lat, L, count=h, kind="bmm")]
    else:
        out.append(Gemm("kv_b", h * (a.qk_nope_head_dim + a.v_head_dim), lat, L))
    out.append(Gemm("o", a.hidden, h * a.v_head_dim, L))
    if a.dsa:  # the indexer, replicated on every GPU of the group
        out += [Gemm("index_q", a.index_heads * a.index_head_dim, a.q_lora_rank, L),
                Gemm("index_k", a.index_head_dim, a.hidden, L),
                Gemm("index_weights", a.index_heads, a.hidden, L)]
    return out


def _mlp(name: str, width: int, a: LLMArch, tp: int, layers: int, **kw) -> list[Gemm]:
    w = width // tp
    return [Gemm(f"{name}gate_up" if a.gated else f"{name}up", (2 if a.gated else 1) * w,
                 a.hidden, layers, **kw),
            Gemm(f"{name}down", a.hidden, w, layers, **kw)]


def layer_plan(a: LLMArch, tp: int = 1, ep: int = 0, phase: str = "prefill") -> LayerPlan:
    """The per-GPU calls of one forward (see the module doc). Raises ValueError for degrees
    the model does not split over."""
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase {phase!r}: use prefill or decode")
    if not a.supports_tp(tp):
        raise ValueError(f"{a.heads} heads / {a.kv_heads} KV heads do not split over tp {tp}")
    if ep and not a.supports_ep(ep):
        raise ValueError(f"ep {ep}: {'no experts' if not a.moe else f'{a.experts} experts'} "
                         "do not split over it")
    gemms = _attention_gemms(a, tp, phase)
    moe, coll = None, []
    dense = a.dense_layers if a.moe else a.layers
    if dense:
        gemms += _mlp("", a.ffn, a, tp, dense)
    if a.moe:
        mt, me = (1, ep) if ep else (tp, 1)
        L = a.moe_layers
        gemms.append(Gemm("router", a.experts, a.hidden, L))
        gemms += _mlp("expert_", a.moe_ffn, a, mt, L, m_per=a.experts_per_token / a.experts,
                      count=a.experts // me, kind="expert")
        if a.shared_ffn:
            gemms += _mlp("shared_", a.shared_ffn, a, tp, L)
        if a.shared_gate:
            gemms.append(Gemm("shared_gate", 1, a.hidden, L))
        moe = MoECall(L, a.hidden, a.moe_ffn, a.experts_per_token, a.experts, mt, me)
        if ep > tp:  # attention-DP ranks: each sends its tokens to the experts' GPUs and back
            coll.append(Collective("all_to_all", ep, L, 2,
                                   2.0 * a.hidden * a.experts_per_token))
    gemms.append(Gemm("lm_head", a.vocab // tp, a.hidden, 1, rows="sequences"))
    if tp > 1:
        coll.append(Collective("all_reduce", tp, a.layers, 2, 2.0 * a.hidden))
    return LayerPlan(tp, ep, phase, tuple(gemms), _attention(a, tp, phase), moe, tuple(coll))


def _attention(a: LLMArch, tp: int, phase: str) -> tuple[Attention, ...]:
    h = a.heads // tp
    if a.mla:
        lat = a.kv_lora_rank + a.qk_rope_head_dim
        return (Attention(a.layers, h, 1, lat, mla=True,
                          v_head_dim=a.kv_lora_rank if phase == "decode" else a.v_head_dim),)
    kv = a.kv_heads_per_gpu(tp)
    full = a.attn_layers - a.sliding_layers
    out = [Attention(full, h, kv, a.head_dim)] if full else []
    if a.sliding_layers:
        out.append(Attention(a.sliding_layers, h, kv, a.head_dim, window=a.sliding_window))
    return tuple(out)


def gemm_shapes(a: LLMArch, tp: int = 1, ep: int = 0,
                phase: str = "prefill") -> list[tuple[str, int, int, int, float, int]]:
    """(name, n, k, layers, m per token, count) of every GEMM of one forward per GPU."""
    return [(g.name, g.n, g.k, g.layers, g.m_per, g.count)
            for g in layer_plan(a, tp, ep, phase).gemms]


def weight_params_of_plan(p: LayerPlan) -> float:
    """Weights the plan's GEMMs hold on one GPU (a check that the plan covers the model)."""
    return float(sum(g.n * g.k * g.layers * g.count for g in p.gemms))
