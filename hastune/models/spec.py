"""The description of a model the latency model is composed from: an LLM (dense or MoE,
grouped-query or multi-head latent attention, full or sliding-window layers), optionally an
encoder (ViT / audio transformer + projector) and the rule that turns a payload (an image of
W×H pixels, s seconds of audio) into encoder and LLM tokens.

Only what decides latency and memory is kept. Every field added since the six shipped models
defaults to what those models were, so they (and the profiles built from them) are unchanged:
a default `LLMArch` counts no biases, no q/k-norm, two norms per layer and no final norm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hastune.errors import InputError

PRECISIONS = ("bf16", "fp8")
# NVFP4: 4-bit values with one fp8 scale per block of 16 (ModelOpt, Blackwell): 4.5 bits each;
# MXFP4: 4-bit values with one 8-bit scale per block of 32 (gpt-oss's experts): 4.25 bits;
# int4: weight-only int4 groups of 32 with a bf16 scale (compressed-tensors, Kimi K2.5's
# experts): 4.5 bits
BYTES_PER = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "mxfp4": 0.53125, "int4": 0.5625}
EXPERTS_ONLY = frozenset({"mxfp4", "int4"})  # the routed experts quantized, the rest bf16


def precision_bytes(precision: str) -> float:
    try:
        return BYTES_PER[precision]
    except KeyError:
        raise ValueError(f"precision {precision!r}: use one of {', '.join(BYTES_PER)}") from None


@dataclass(frozen=True)
class LLMArch:
    """A decoder-only transformer."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int                   # MLA: qk_nope_head_dim + qk_rope_head_dim
    ffn: int                        # the dense layers' intermediate size
    vocab: int
    gated: bool = True              # SwiGLU / GeGLU: gate and up projections
    tied_embeddings: bool = False
    sliding_window: int | None = None
    sliding_layers: int = 0         # layers that attend only to the last `sliding_window`
    # --- since issue 12 (defaults: the shipped models) ---
    qkv_bias: bool = False          # Qwen2: biases on q, k, v
    qk_norm: bool = False           # Qwen3, Gemma 3: RMSNorm on q and k per head
    norms_per_layer: int = 2        # Gemma 2/3: 4 (pre and post norms)
    final_norm: bool = False        # the norm before the LM head (counted for read configs)
    sliding_layer_ids: tuple[int, ...] = ()   # which layers slide (len == sliding_layers)
    # MoE: layers past `dense_layers` route each token to `experts_per_token` of `experts`
    experts: int = 0
    experts_per_token: int = 0
    moe_ffn: int = 0                # one routed expert's intermediate size
    shared_ffn: int = 0             # the shared expert(s)' total intermediate size
    shared_gate: bool = False       # Qwen2-MoE: a sigmoid gate (hidden → 1) on the shared expert
    dense_layers: int = 0           # layers with a dense FFN of width `ffn` (DeepSeek's first k)
    # MLA (DeepSeek-V2/V3): the KV cache holds one latent of kv_lora_rank + qk_rope_head_dim
    q_lora_rank: int = 0            # 0: q projected directly from the hidden state
    kv_lora_rank: int = 0           # 0: not MLA
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0             # DeepSeek's multi-token-prediction layers (not counted)
    # DSA (DeepSeek Sparse Attention: GLM-5, DeepSeek-V3.2): a lightning indexer (index_heads
    # of index_head_dim, one fp8 key per token cached) scores every earlier token, and each
    # query attends to its `index_topk` best (0: dense attention)
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    # Gated DeltaNet (Qwen3.5, Qwen3-Next): the layers in `linear_layer_ids` replace attention
    # by a linear-attention mixer — q and k of linear_k_heads × linear_k_dim, v and the
    # output gate z of linear_v_heads × linear_v_dim, a causal conv of linear_conv taps over q,
    # k, v, a recurrent state of linear_v_heads × linear_k_dim × linear_v_dim per request
    # (state_bytes each: mamba_ssm_dtype) and no KV cache
    linear_layer_ids: tuple[int, ...] = ()
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    linear_conv: int = 0
    state_bytes: int = 4
    output_gate: bool = False       # Qwen3.5: q_proj also yields a sigmoid gate on the output
    checkpoint_precision: str = "bf16"   # the published weights (quantization_config)

    # --- structure -------------------------------------------------------------------------
    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def dsa(self) -> bool:
        return self.index_topk > 0

    def indexer_params(self) -> int:
        """One layer's DSA indexer: its query projection from the q latent, its key projection
        and norm, its per-head weights from the hidden state (0 without DSA)."""
        if not self.dsa:
            return 0
        d, n = self.index_head_dim, self.index_heads
        return self.q_lora_rank * n * d + self.hidden * d + 2 * d + self.hidden * n

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def linear_layers(self) -> int:
        """Gated DeltaNet layers (no attention, no KV cache)."""
        return len(self.linear_layer_ids)

    @property
    def attn_layers(self) -> int:
        """Layers with attention (full or sliding) and a KV cache."""
        return self.layers - self.linear_layers

    def gdn_conv_channels(self) -> int:
        """The channels the causal conv runs over: q, k and v."""
        return 2 * self.linear_k_heads * self.linear_k_dim + self.linear_v_heads \
            * self.linear_v_dim

    def gdn_params(self) -> int:
        """One Gated DeltaNet layer: in_proj (q, k, v, z; b and a per value head), the conv,
        dt_bias and A_log per value head, the gated norm, out_proj (0 without GDN)."""
        if not self.linear_layers:
            return 0
        h, v = self.hidden, self.linear_v_heads * self.linear_v_dim
        return h * (self.gdn_conv_channels() + v + 2 * self.linear_v_heads) + v * h \
            + self.gdn_rest()

    def gdn_rest(self) -> int:
        """What of a GDN layer is not a linear projection: conv, dt_bias, A_log, norm."""
        return (self.gdn_conv_channels() * self.linear_conv + 2 * self.linear_v_heads
                + self.linear_v_dim) if self.linear_layers else 0

    def state_bytes_per_request(self, tp: int = 1) -> float:
        """GDN state one request holds on each GPU of a TP group: the recurrent state
        (state_bytes per element) and the conv's last linear_conv − 1 inputs (bf16)."""
        if not self.linear_layers:
            return 0.0
        ssm = self.linear_v_heads * self.linear_k_dim * self.linear_v_dim * self.state_bytes
        conv = self.gdn_conv_channels() * (self.linear_conv - 1) * 2
        return float(self.linear_layers * (ssm + conv) / tp)

    def mixer_params(self) -> int:
        """Every layer's attention or GDN mixer."""
        return self.attn_layers * self.attn_params() + self.linear_layers * self.gdn_params()

    # --- parameters ------------------------------------------------------------------------
    def attn_params(self) -> int:
        """One layer's attention projections (and q/k norms, MLA's latent norms)."""
        h = self.hidden
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk
                 if self.q_lora_rank else h * self.heads * qk)
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + self.heads * self.v_head_dim * h + self.indexer_params()
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        p = h * qkv + self.heads * self.head_dim * h
        if self.output_gate:
            p += h * self.heads * self.head_dim
        if self.qkv_bias:
            p += qkv
        if self.qk_norm:
            p += 2 * self.head_dim
        return p

    def _mlp(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width

    def expert_params(self) -> int:
        """One MoE layer's routed experts (what expert parallelism splits)."""
        return self.experts * self._mlp(self.moe_ffn) if self.moe else 0

    def moe_layer_rest(self) -> int:
        """One MoE layer's router and shared expert (replicated or TP-split, never EP)."""
        if not self.moe:
            return 0
        return (self.hidden * self.experts + (self._mlp(self.shared_ffn) if self.shared_ffn
                                              else 0) + (self.hidden if self.shared_gate else 0))

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> float:
        norms = self.norms_per_layer * self.hidden
        if not self.moe:
            mlp = self._mlp(self.ffn)
            return self.mixer_params() + self.layers * (mlp + norms) \
                + self.embedding_params() + (self.hidden if self.final_norm else 0)
        dense = self.dense_layers * self._mlp(self.ffn)
        moe = self.moe_layers * (self.expert_params() + self.moe_layer_rest())
        return (self.mixer_params() + self.layers * norms + dense + moe
                + self.embedding_params() + (self.hidden if self.final_norm else 0))

    @property
    def active_params(self) -> float:
        """Parameters one token uses: all but the routed experts it is not sent to
        (embeddings and LM head included, as Mixtral's 12.9B and DeepSeek's 37B count)."""
        if not self.moe:
            return self.params
        idle = self.experts - self.experts_per_token
        return self.params - self.moe_layers * idle * self._mlp(self.moe_ffn)

    @property
    def active_params_read(self) -> float:
        """The weights one token's forward reads: `active_params` less the input embedding
        table, of which a lookup reads one row (DeepSeek counts activated parameters so: V3's
        37B, V2-Lite's 2.4B). With tied embeddings the table is the LM head, read whole."""
        return self.active_params - (0 if self.tied_embeddings else self.vocab * self.hidden)

    def linear_params(self) -> float:
        """Parameters in the layers' linear projections (what fp8 weight quantization
        covers); the rest — embeddings, LM head, norms, routers — stays bf16."""
        norms = self.norms_per_layer * self.hidden
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        router = self.hidden * self.experts + (self.hidden if self.shared_gate else 0)
        mla_norms = (self.q_lora_rank + self.kv_lora_rank + 2 * self.index_head_dim) \
            if self.mla else 0
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        rest = (self.layers * norms + self.attn_layers * (qk_norm + mla_norms + bias)
                + self.linear_layers * self.gdn_rest() + self.moe_layers * router
                + self.embedding_params() + (self.hidden if self.final_norm else 0))
        return self.params - rest

    # --- parallelism and memory (per GPU of a TP group) --------------------------------------
    def kv_heads_per_gpu(self, tp: int) -> int:
        # fewer KV heads than GPUs: vLLM replicates them
        return max(1, math.ceil(self.kv_heads / tp))

    def kv_bytes_per_token(self, tp: int = 1, precision: str = "bf16") -> float:
        """K and V of every attention layer per GPU of a TP group (full KV for sliding layers:
        vLLM's default allocator reserves it; GDN layers hold a state per request instead:
        state_bytes_per_request). MLA: the compressed latent (kv_lora_rank +
        qk_rope_head_dim per layer), which every GPU of the group holds whole; with DSA also
        the indexer's key, fp8 with a 4-byte scale, whatever the KV dtype."""
        b = precision_bytes(precision)
        if self.mla:
            index = self.index_head_dim + 4 if self.dsa else 0
            return float(self.layers * ((self.kv_lora_rank + self.qk_rope_head_dim) * b + index))
        return 2.0 * self.attn_layers * self.kv_heads_per_gpu(tp) * self.head_dim * b

    def weight_bytes(self, tp: int = 1, precision: str = "bf16", ep: int = 0) -> float:
        """Weights per GPU. fp8 covers the linear projections only. `ep`: the expert-
        parallel degree (0: experts TP-split over the group like every other weight; else the
        routed experts spread whole over `ep` GPUs, the rest split over `tp`)."""
        if precision == "bf16" and not (ep and self.moe):
            return 2.0 * self.params / tp
        b = precision_bytes(precision)
        if precision in EXPERTS_ONLY:  # the routed experts at b, every other weight bf16
            routed = self.moe_layers * self.expert_params()
            experts = routed * b
            total = (self.params - routed) * 2.0 + experts
            return total / tp if not ep else (total - experts) / tp + experts / ep
        lin = self.linear_params()
        total = lin * b + (self.params - lin) * 2.0
        if not (ep and self.moe):
            return total / tp
        experts = self.moe_layers * self.expert_params() * b
        return (total - experts) / tp + experts / ep

    def supports_tp(self, tp: int) -> bool:
        ok = self.heads % tp == 0 and (self.kv_heads % tp == 0 or tp % self.kv_heads == 0)
        if self.moe:
            ok = ok and self.moe_ffn % tp == 0
        if self.linear_layers:
            ok = ok and self.linear_k_heads % tp == 0 and self.linear_v_heads % tp == 0
        return ok

    def supports_ep(self, ep: int) -> bool:
        return self.moe and ep >= 1 and self.experts % ep == 0


@dataclass(frozen=True)
class PayloadRule:
    """How one payload becomes encoder tokens and LLM tokens (hastune.models.tokens).

    kind: `anyres` (LLaVA-NeXT: a base tile plus a grid of tiles chosen among `pinpoints`),
    `fixed` (one `image_size` tile per image: LLaVA-1.5, Gemma 3), `dynamic-tiles` (InternVL:
    1..max_tiles tiles of the closest aspect ratio, plus a thumbnail), `qwen-dynamic`
    (Qwen2.5-VL: the image resized to multiples of patch × merge within min/max pixels),
    `audio` (Whisper: 30 s windows of `window_frames` frames, `llm_per_window` LLM tokens each).
    """

    kind: str
    image_size: int = 0             # tile side in pixels
    patch: int = 0
    llm_per_tile: int = 0           # anyres / fixed / dynamic-tiles: LLM tokens per tile
    enc_per_tile: int = 0           # encoder sequence per tile (CLS included)
    pinpoints: tuple[tuple[int, int], ...] = ()   # anyres: (height, width) grids in pixels
    newline: bool = True            # anyres: one newline token per row of the grid
    max_tiles: int = 0              # dynamic-tiles
    min_tiles: int = 1
    thumbnail: bool = False
    merge: int = 1                  # qwen-dynamic: spatial merge (patches per token side)
    temporal_patch: int = 1
    min_pixels: int = 0
    max_pixels: int = 0
    window_frames: int = 0          # audio: encoder frames per 30 s window
    llm_per_second: float = 0.0     # audio: LLM tokens per second of audio


@dataclass(frozen=True)
class EncoderArch:
    """A ViT / audio transformer encoder plus the projector into the LLM.

    `scheme` says how the workload's encoder tokens split into attention sequences (see
    hastune.workload.payload_tokens): `tiles` (fixed-size tiles, attention within a tile),
    `qwen-window` (window attention over `window` patches, full attention per frame group on
    `full_layers`), `whisper` (one sequence per 30 s window of `seq` frames).
    """

    name: str
    scheme: str
    layers: int
    hidden: int
    heads: int
    head_dim: int
    ffn: int
    gated: bool
    seq: int = 0                    # tokens per tile / window (tiles, whisper)
    window: int = 0                 # qwen-window: patches per attention window
    full_layers: int = 0            # qwen-window: layers with full attention
    stem: tuple[tuple[float, int, int], ...] = ()   # (m per encoder token, k, n) GEMMs
    projector: tuple[tuple[float, int, int], ...] = ()
    note: str = ""
    # --- since issue 12 (defaults: the shipped encoders) ---
    bias: bool = False              # linear biases and two LayerNorms per layer counted
    extra_params: int = 0           # position embeddings, class token, final / projector norms
    payload: PayloadRule | None = None

    @property
    def params(self) -> float:
        per_layer = 4 * self.hidden * self.hidden + (3 if self.gated else 2) * self.hidden \
            * self.ffn
        extra = sum(k * n for _, k, n in self.stem + self.projector)
        if self.bias:
            per_layer += 4 * self.hidden + (2 if self.gated else 1) * self.ffn + self.hidden \
                + 4 * self.hidden     # q, k, v, o; up (and gate), down; two norms
            extra += sum(n for _, _, n in self.stem + self.projector)
        return self.layers * per_layer + extra + self.extra_params

    def weight_bytes(self) -> float:
        return 2.0 * self.params


@dataclass(frozen=True)
class ModelArch:
    name: str
    llm: LLMArch
    encoder: EncoderArch | None = None
    note: str = ""
    payloads: tuple[tuple[float, float], ...] = field(default=())
    """Encode fit grid: (encoder tokens, attention groups) per request, e.g. video frames."""
    family: str = ""                # e.g. "llama (dense)", "deepseek_v3 (MoE, MLA)"
    source: str = ""                # the config file it was read from; "" for shipped models

    @property
    def params(self) -> float:
        return self.llm.params + (self.encoder.params if self.encoder else 0.0)

    @property
    def active_params(self) -> float:
        return self.llm.active_params + (self.encoder.params if self.encoder else 0.0)

    @property
    def active_params_read(self) -> float:
        return self.llm.active_params_read + (self.encoder.params if self.encoder else 0.0)


def refuse_experts_only(weights: str, arch: ModelArch, file: str | Path | None = None) -> None:
    """An InputError (precision.weights) where `weights` quantize routed experts alone
    (EXPERTS_ONLY: mxfp4, int4) and `arch` is a dense model, which has none: its weights
    would be timed and sized as bf16 under another name."""
    if weights in EXPERTS_ONLY and not arch.llm.moe:
        raise InputError(file, "precision.weights", f"{weights} weights quantize a MoE "
                         f"model's routed experts (the rest stays bf16), and {arch.name} has "
                         "none", "use bf16 or fp8 weights (nvfp4 on Blackwell) for a dense "
                         "model")
