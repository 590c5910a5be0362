"""Prefill, decode-step and encode latency of one model on one device, composed per layer.

The calls of one forward per GPU come from hastune.models.shapes.layer_plan (vLLM's layout at
tensor-parallel degree tp and expert-parallel degree ep). A dense layer runs:
  fused add + RMSNorm → QKV GEMM → RoPE, KV-cache write → attention → O GEMM → all-reduce →
  fused add + RMSNorm → gate/up GEMM → activation → down GEMM → all-reduce
and the forward ends with the final norm, the LM head (on the last token of each sequence),
the logits gather and the sampler. GEMMs and attention come from the measured kernel tables,
all-reduce from the all-reduce table, element-wise kernels from bytes / bandwidth. Sliding-
window layers (Gemma 3) attend to at most `sliding_window` tokens. Gated DeltaNet layers
(Qwen3.5) replace attention by their conv and recurrence, timed from the source's gdn tables
(aiconfigurator-core's linear_attention: causal_conv1d and chunk_gated_delta_rule in a
prefill, their one-token update kernels in a decode step) at the GPU's heads; a model with
them on a source without those tables is refused. Encoders run on one GPU.
Engine CPU overhead is not in the tables and not modelled.

MoE layers (Mixtral, Qwen-MoE, DeepSeek): the router and shared experts are GEMMs; the routed
experts are one fused-MoE call timed from the source's `moe` table at the layer's (hidden,
inter, topk, experts, moe_tp, moe_ep) shape, or, where the table lacks that shape (or the
source has none, like the CSV tables), grouped GEMMs from the GEMM table over the experts a
batch touches (balanced routing: E·(1 − (1 − k/E)^tokens) of E local experts). Expert
parallelism: ep = 1 splits every expert over the TP group (vLLM's default); ep = tp puts whole
experts on each GPU (vLLM's --enable-expert-parallel) and adds a dispatch and a combine all-
to-all per MoE layer of each GPU's 1/ep share of the tokens, as the MoE table counts them
(num_tokens per rank). ep = tp × d (data-parallel attention: d ranks, each its own batch
at TP tp, SGLang's --enable-dp-attention, TensorRT-LLM's enable_attention_dp) times one rank:
its attention and dense layers on its own tokens, its GPUs' experts on the tokens of all d
ranks (the same number each: balanced ranks), the all-to-all of that share.

MLA (DeepSeek-V2/V3): where the source has the engines' MLA-block tables (mla_*_module, vLLM
and TensorRT-LLM) and the model has DeepSeek-V3's MLA shape, the whole block (projections and
attention) is looked up there; else its GEMMs are timed from the GEMM table and attention on
the latent: prefill as multi-head attention on the expanded latent, decode as one latent KV
head of kv_lora_rank + qk_rope_head_dim against every query head. DSA (GLM-5, DeepSeek-V3.2):
each query attends to its index_topk keys — prefill timed as a window of that many keys,
decode over min(context, topk) — and the indexer's index_heads × index_head_dim query scores
every earlier token against its one key (the attention tables, one KV head).

Precision is the device's source's: GEMMs (and the MoE table) in its GEMM dtype, attention with
its KV-cache dtype; weight and KV bytes follow (hastune.models.spec: fp8 covers the linear
projections, embeddings and norms stay bf16).
"""

from __future__ import annotations

import numpy as np

from hastune.calibrate.archs import ModelArch
from hastune.calibrate.device import Device
from hastune.calibrate.kernels import V3_MLA
from hastune.models.shapes import Gemm, LayerPlan, layer_plan

BYTES = 2.0
MAX_BATCH_TOKENS = 8192      # vLLM's prefill token budget per step
MAX_SEQS = 256               # vLLM's max_num_seqs
RUNTIME_BYTES = 1.0 * 2**30  # CUDA context, cuBLAS workspace, CUDA graphs
MIN_KV_TOKENS = 4096         # a TP degree must leave room for one long request's KV
MLA_GEMMS = frozenset({"qkv_a", "q_b", "q", "kv_a", "q_nope_to_latent", "latent_to_v", "kv_b",
                       "o"})
MLA_MODULE = {"prefill": "mla_context_module", "decode": "mla_generation_module"}
UNQUANTIZED = frozenset({"router", "shared_gate"})   # bf16 under fp8 weights (vLLM, spec.py)
PRECISION = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8",   # dtype → bytes of spec.py
             "nvfp4": "nvfp4", "mxfp4": "mxfp4", "int4": "int4"}


def windows(s: np.ndarray, w: float) -> np.ndarray:
    """A causal prefill of `s` tokens whose queries each see at most `w` keys (a sliding
    window, DSA's top-k) in causal `w`-token blocks: past the window each token sees w keys,
    (2s/w − 1) blocks; 1 up to it."""
    return np.where(s > w, 2 * s / w - 1, 1.0)


class LatencyModel:
    """`prefill(batch, length)`, `decode_step(batch, context)`, `encode(batch, tokens,
    groups)` in seconds, numpy-broadcast; memory figures per GPU of the TP group. `ep`: 1
    (experts TP-split), tp (whole experts per GPU) or a multiple of tp (attention-DP ranks,
    one of them timed), MoE models only."""

    def __init__(self, arch: ModelArch, device: Device, tp: int = 1, ep: int = 1,
                 pp: int = 1):
        """`pp`: the pipeline stages the model's weights are split over when memory is
        counted (kv_capacity_tokens, fits); latencies are of the whole model at `tp`."""
        a = arch.llm
        if not a.supports_tp(tp):
            raise ValueError(f"{arch.name}: {a.heads} heads / {a.kv_heads} KV "
                             f"heads do not split over tp = {tp}")
        if ep != 1:
            if not a.moe:
                raise ValueError(f"{arch.name} has no experts: ep must be 1")
            if ep % tp or not a.supports_ep(ep) or (ep > tp and pp != 1):
                raise ValueError(f"{arch.name}: ep = {ep} at tp = {tp}: use ep 1 (experts "
                                 "TP-split), ep = tp, or ep = tp × the attention-DP ranks "
                                 "(one stage), dividing the experts")
        if a.linear_layers and not device.has_gdn():
            raise ValueError(f"{arch.name}: its Gated DeltaNet layers need the gdn kernel "
                             f"tables (aiconfigurator-core's linear_attention), which "
                             f"{device.kernels.hw.system}'s source has not")
        self.arch, self.dev, self.tp, self.ep, self.pp = arch, device, tp, ep, pp
        # attention-DP ranks whose experts spread over ep GPUs (ep > tp; this model times
        # one rank: its `tokens`; each GPU's experts take every rank's share of theirs)
        self.dp = ep // tp if ep > tp else 1
        plan_ep = ep if ep > 1 else 0
        self._plans = {ph: layer_plan(a, tp, plan_ep, ph) for ph in ("prefill", "decode")}
        self._moe_key = None
        m = self._plans["decode"].moe
        if m is not None and a.gated:
            key = (m.hidden, m.inter, m.topk, m.experts, m.moe_tp, m.moe_ep)
            self._moe_key = key if device.has_moe(key) else None
        # the MLA-block tables time dense MLA: a DSA model's sparse block is composed instead
        shape = (a.hidden, a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim,
                 a.qk_nope_head_dim, a.v_head_dim)
        self._module = (a.mla and not a.dsa and shape == V3_MLA
                        and all(device.kernels.extra(k) is not None
                                for k in MLA_MODULE.values()))

    # --- precision ------------------------------------------------------------------------
    @property
    def weights(self) -> str:
        """The GEMM / weight dtype of the device's kernel tables (bf16 | fp8 | fp8_block)."""
        return self.dev.kernels.gemm_dtype

    @property
    def kv_cache(self) -> str:
        return self.dev.kernels.kv_dtype

    def composition(self) -> dict[str, str]:
        """How the MoE and MLA parts are timed (for the fit record); empty for dense models."""
        a, out = self.arch.llm, {}
        m = self._plans["decode"].moe
        if m is not None:
            shape = (f"hidden {m.hidden}, inter {m.inter}, topk {m.topk}, experts {m.experts}, "
                     f"moe_tp {m.moe_tp}, moe_ep {m.moe_ep}")
            out["moe"] = (f"fused-MoE table ({shape}{self._moe_rows()})" if self._moe_key else
                          f"grouped GEMMs from the GEMM table (no moe table rows at {shape})")
            if self.ep > self.tp:
                a2a = self.dev.kernels.extra("nccl_alltoall")
                out["all_to_all"] = ("NCCL all-to-all table" if a2a is not None and self.ep
                                     in a2a.gpu_counts else "all-reduce table (no all-to-all "
                                     "table)")
        if a.mla:
            out["mla"] = ("MLA-block tables (mla_context_module, mla_generation_module)"
                          if self._module else "GEMM table + attention on the latent")
        return out

    def _moe_rows(self) -> str:
        """Where fp8 weights' MoE rows are another dtype's, which (hastune.calibrate.aic_moe)."""
        rows = getattr(self.dev.kernels.source, "moe_rows", None)
        lane = rows(self.dev.kernels.hw.system).get(self._moe_key, "") if rows else ""
        source, _, dtype = lane.rpartition("|")
        return f"; {dtype} rows, {source}: faster here" if source and dtype != "fp8" else ""

    # --- LLM ------------------------------------------------------------------------------
    def _gemm(self, g: Gemm, tokens: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        d, m = self.dev, g.m(tokens, seqs)
        if g.kind == "bmm":          # MLA's absorbed per-head BMMs: one batched launch
            return d.gemm(m, g.n * g.count, g.k)
        if g.kind == "expert":       # grouped GEMM over the local experts the batch touches
            a = self.arch.llm
            local = float(g.count)
            touched = local * (1.0 - (1.0 - a.experts_per_token / a.experts) ** tokens)
            rows = tokens * a.experts_per_token * local / a.experts
            touched = np.maximum(touched, 1.0)
            return d.gemm(rows / touched, g.n * touched, g.k)
        t = (d.unquantized_gemm if g.name in UNQUANTIZED else d.gemm)(m, g.n, g.k)
        return t if g.count == 1 else g.count * t

    def _groups(self, plan: LayerPlan, tokens: np.ndarray, seqs: np.ndarray) -> dict:
        """Layer count → [seconds, element-wise elements per token, element-wise kernels]."""
        a, d, tp = self.arch.llm, self.dev, self.tp
        groups: dict[int, list] = {}

        def add(layers: int, t=0.0, ew=0, kernels=0) -> None:
            g = groups.setdefault(layers, [0.0, 0, 0])
            g[0], g[1], g[2] = g[0] + t, g[1] + ew, g[2] + kernels

        kvb = 1 if PRECISION[self.kv_cache] == "fp8" else 2
        # an MoE layer's shared experts and its routed path (router, experts, all-to-all):
        # in a decode step the engines run the two on separate CUDA streams (TensorRT-LLM's
        # maybe_execute_in_parallel, SGLang's dual stream, vLLM's aux stream), so the layer
        # takes the longer of them; in a prefill, one after the other
        shared, routed = 0.0, 0.0
        for g in plan.gemms:
            if g.rows == "sequences" or (g.kind == "expert" and self._moe_key) or (
                    self._module and g.name in MLA_GEMMS):
                continue
            t = self._gemm(g, tokens * self.dp if g.kind == "expert" else tokens, seqs)
            if g.name.startswith("shared_"):
                shared = shared + t
            elif g.kind == "expert" or g.name == "router":
                routed = routed + t
            else:
                add(g.layers, t)
        moe_tokens = tokens * self.dp  # the tokens of the ranks the experts serve
        if self._moe_key:
            m = plan.moe
            routed = routed + d.moe(self._moe_key, moe_tokens)
        for c in plan.collectives:
            if c.kind == "all_reduce":
                add(c.layers, c.calls * d.allreduce(c.gpus, tokens * c.bytes_per_token / BYTES))
            else:   # dispatch / combine of this GPU's share of the tokens
                routed = routed + c.calls * d.alltoall(
                    c.gpus, moe_tokens / c.gpus * c.bytes_per_token / BYTES)
        if plan.moe is not None:
            add(plan.moe.layers, np.maximum(shared, routed) if plan.phase == "decode"
                else shared + routed)
        h, L = a.heads // tp, a.layers
        if a.mla and self._module:  # the block's norms, RoPE and KV write are in its table
            add(L, ew=2 * 4 * a.hidden, kernels=2)         # 2 fused add+norm
        elif a.mla:
            rope, lat = a.qk_rope_head_dim, a.kv_lora_rank + a.qk_rope_head_dim
            add(L, ew=2 * 4 * a.hidden + 2 * (a.q_lora_rank + a.kv_lora_rank)
                + 2 * (h + 1) * rope + kvb * lat // 2, kernels=5)
        else:
            kv = a.kv_heads_per_gpu(tp)
            gate = 3 * h * a.head_dim if a.output_gate else 0   # sigmoid(gate) × output
            add(a.attn_layers, ew=(2 * 4 * a.hidden             # 2 fused add+norm
                                   + 2 * (h + kv) * a.head_dim  # RoPE on q, k
                                   + 2 * kvb * kv * a.head_dim  # KV-cache write
                                   + gate), kernels=4 + (1 if gate else 0))
            if a.linear_layers:  # 2 fused add+norm; the gated norm (its input, z, output)
                add(a.linear_layers, ew=2 * 4 * a.hidden
                    + 3 * a.linear_v_heads * a.linear_v_dim // tp, kernels=3)
        dense = a.dense_layers if a.moe else L
        if dense:
            up, ffn = (2 if a.gated else 1) * (a.ffn // tp), a.ffn // tp
            add(dense, ew=up + ffn, kernels=1)             # activation
        if plan.moe is not None:
            m = plan.moe
            ew, k = a.experts, 1                           # router top-k
            if not self._moe_key:                          # activation, permute / unpermute
                width = a.moe_ffn // m.moe_tp
                ew += a.experts_per_token * ((3 if a.gated else 2) * width + 2 * a.hidden) \
                    * self.dp // m.moe_ep
                k += 3
            if a.shared_ffn:
                ew, k = ew + (3 if a.gated else 2) * (a.shared_ffn // tp), k + 1
            add(m.layers, ew=ew, kernels=k)
        return groups

    def _llm_dense(self, tokens: np.ndarray, seqs: np.ndarray, phase: str = "prefill"
                   ) -> np.ndarray:
        """Everything but attention: GEMMs, MoE, collectives, element-wise, LM head, sampler
        (with an MLA-block table: the whole MLA block but its KV read)."""
        a, d, tp = self.arch.llm, self.dev, self.tp
        t = 0.0
        for layers, (s, ew, kernels) in self._groups(self._plans[phase], tokens, seqs).items():
            t = t + layers * (s + d.elementwise(tokens * BYTES * ew, kernels=kernels))
        vocab = a.vocab // tp
        # the LM head stays bf16 under fp8 weights (vLLM quantizes the linear layers only;
        # spec.py counts its bytes as bf16): the source's bf16 rows, gemm() for a bf16 one
        head = (d.elementwise(tokens * BYTES * 2 * a.hidden, kernels=2)   # embed, final norm
                + d.unquantized_gemm(seqs, vocab, a.hidden)
                + d.allreduce(tp, seqs * vocab)                           # logits gather
                + d.elementwise(seqs * vocab * 4.0 * 3, kernels=3))       # sampler
        return t + head

    def _attn_layers(self) -> tuple[int, int]:
        """(full-attention layers, sliding ones); GDN layers are neither."""
        a = self.arch.llm
        return a.attn_layers - a.sliding_layers, a.sliding_layers

    def _gdn_heads(self) -> tuple[int, int, int, int, int]:
        a, tp = self.arch.llm, self.tp
        return (a.linear_k_heads // tp, a.linear_k_dim, a.linear_v_heads // tp, a.linear_v_dim,
                a.linear_conv)

    def prefill(self, batch, length) -> np.ndarray:
        """`batch` sequences of `length` prompt tokens in one forward."""
        b, s = np.broadcast_arrays(np.asarray(batch, float), np.asarray(length, float))
        a, d, tp = self.arch.llm, self.dev, self.tp
        h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
        if a.mla:
            if self._module:
                attn = a.layers * d.mla_module(MLA_MODULE["prefill"], np.column_stack(
                    [b.ravel(), s.ravel(), np.full(b.size, h)])).reshape(b.shape)
            elif a.dsa:  # each query on its top-k keys, as a window of k; plus the indexer
                k = float(a.index_topk)
                attn = a.layers * (d.context_attention(
                    b, np.minimum(s, k), h, h, a.qk_nope_head_dim + a.qk_rope_head_dim)
                    * windows(s, k)
                    + d.context_attention(b, s, a.index_heads, 1, a.index_head_dim))
            else:      # multi-head attention on the expanded latent
                attn = a.layers * d.context_attention(
                    b, s, h, h, a.qk_nope_head_dim + a.qk_rope_head_dim)
            return self._llm_dense(b * s, b, "prefill") + attn
        full, local = self._attn_layers()
        attn = full * d.context_attention(b, s, h, kv, a.head_dim)
        if a.linear_layers:
            attn = attn + a.linear_layers * d.gdn("context", b, s, self._gdn_heads())
        if local:
            w = float(a.sliding_window)  # type: ignore[arg-type]
            win = d.context_attention(b, np.minimum(s, w), h, kv, a.head_dim)
            attn = attn + local * win * windows(s, w)
        return self._llm_dense(b * s, b) + attn

    def decode_step(self, batch, context) -> np.ndarray:
        """One step of `batch` sequences holding `context` tokens of KV each (mean)."""
        n, c = np.broadcast_arrays(np.asarray(batch, float), np.asarray(context, float))
        a, d, tp = self.arch.llm, self.dev, self.tp
        h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
        if a.mla:
            if self._module:
                attn = a.layers * d.mla_module(MLA_MODULE["decode"], np.column_stack(
                    [n.ravel(), np.full(n.size, h), c.ravel()])).reshape(n.shape)
            else:      # absorbed: every query head against one latent KV head
                attn = a.layers * d.generation_attention(
                    n, h, 1, a.kv_lora_rank + a.qk_rope_head_dim,
                    np.minimum(c, float(a.index_topk)) if a.dsa else c)
                if a.dsa:  # the indexer scores every cached token
                    attn = attn + a.layers * d.generation_attention(
                        n, a.index_heads, 1, a.index_head_dim, c)
            return self._llm_dense(n, n, "decode") + attn
        full, local = self._attn_layers()
        attn = full * d.generation_attention(n, h, kv, a.head_dim, c)
        if a.linear_layers:
            attn = attn + a.linear_layers * d.gdn("generation", n, 1.0, self._gdn_heads())
        if local:
            attn = attn + local * d.generation_attention(
                n, h, kv, a.head_dim, np.minimum(c, float(a.sliding_window)))  # type: ignore
        return self._llm_dense(n, n, "decode") + attn

    # --- encoder --------------------------------------------------------------------------
    def encode(self, batch, tokens, groups) -> np.ndarray:
        """`batch` requests of `tokens` encoder tokens each, in `groups` attention groups
        (qwen-window: frame groups for the full-attention layers)."""
        e, d = self.arch.encoder, self.dev
        if e is None:
            raise ValueError(f"{self.arch.name} has no encoder")
        n, x, g = np.broadcast_arrays(*(np.asarray(v, float) for v in (batch, tokens, groups)))
        total = n * x
        t = sum(d.gemm(mf * total, nn, k) for mf, k, nn in e.stem + e.projector)
        H, f = e.hidden, e.ffn
        up = (2 if e.gated else 1) * f
        layer = (d.gemm(total, 3 * H, H) + d.gemm(total, H, H)
                 + d.gemm(total, up, H) + d.gemm(total, H, f)
                 + d.elementwise(total * BYTES * (2 * 3 * H + up + f), kernels=3))
        t = t + e.layers * layer
        if e.scheme == "qwen-window":
            win = d.encoder_attention(total / e.window, e.window, e.heads, e.head_dim)
            full = d.encoder_attention(n * g, x / g, e.heads, e.head_dim)
            return t + (e.layers - e.full_layers) * win + e.full_layers * full
        seqs = total / e.seq
        return t + e.layers * d.encoder_attention(seqs, e.seq, e.heads, e.head_dim)

    # --- memory (per GPU) -----------------------------------------------------------------
    @property
    def weight_bytes(self) -> float:
        return self.arch.llm.weight_bytes(self.tp, PRECISION[self.weights],
                                          self.ep if self.ep > 1 else 0)

    @property
    def encoder_weight_bytes(self) -> float:
        return self.arch.encoder.weight_bytes() if self.arch.encoder else 0.0

    @property
    def kv_bytes_per_token(self) -> float:
        return self.arch.llm.kv_bytes_per_token(self.tp, PRECISION[self.kv_cache])

    @property
    def state_bytes(self) -> float:
        """Gated DeltaNet state per GPU, reserved for MAX_SEQS requests (SGLang sizes its
        mamba pool by the running requests it allows; 0 without GDN layers)."""
        return MAX_SEQS * self.arch.llm.state_bytes_per_request(self.tp)

    @property
    def activation_bytes(self) -> float:
        """Peak live intermediates of one layer at the prefill token budget, the logits of
        a full decode batch, and the runtime's own allocations."""
        a, tp = self.arch.llm, self.tp
        kv = a.kv_heads_per_gpu(tp)
        per_token = ((3 if a.gated else 2) * a.ffn // tp
                     + (a.heads // tp + 2 * kv) * a.head_dim + 2 * a.hidden)
        return MAX_BATCH_TOKENS * per_token * BYTES + MAX_SEQS * a.vocab / tp * 4.0 \
            + RUNTIME_BYTES

    def kv_capacity_tokens(self, utilisation: float = 0.9, pp: int | None = None) -> int:
        """KV tokens one GPU holds; with `pp` pipeline stages (default: the model's) it holds
        1/pp of the weights and of each token's KV."""
        pp = self.pp if pp is None else pp
        free = (self.dev.mem_bytes * utilisation - self.weight_bytes / pp - self.activation_bytes
                - self.state_bytes / pp)
        return max(0, int(free // (self.kv_bytes_per_token / pp)))

    def fits(self, pp: int | None = None) -> bool:
        return self.kv_capacity_tokens(pp=pp) >= MIN_KV_TOKENS

    def max_batch(self, context: float) -> int:
        """Sequences of `context` tokens whose KV fits, capped at vLLM's max_num_seqs."""
        return int(min(MAX_SEQS, self.kv_capacity_tokens() // max(context, 1.0)))
