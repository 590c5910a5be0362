"""Prefill, decode-step and encode latency of one model on one device, composed per layer.

An LLM layer at tensor-parallel degree tp (vLLM's layout) runs, per GPU:
  fused add + RMSNorm → QKV GEMM → RoPE, KV-cache write → attention → O GEMM → all-reduce →
  fused add + RMSNorm → gate/up GEMM → activation → down GEMM → all-reduce
and the forward ends with the final norm, the LM head (on the last token of each sequence),
the logits gather and the sampler. GEMMs and attention come from the measured kernel tables,
all-reduce from the all-reduce table, element-wise kernels from bytes / bandwidth. Sliding-
window layers (Gemma 3) attend to at most `sliding_window` tokens. Encoders run on one GPU.
Engine CPU overhead is not in the tables and not modelled.
"""

from __future__ import annotations

import numpy as np

from hastune.calibrate.archs import ModelArch
from hastune.calibrate.device import Device

BYTES = 2.0
MAX_BATCH_TOKENS = 8192      # vLLM's prefill token budget per step
MAX_SEQS = 256               # vLLM's max_num_seqs
RUNTIME_BYTES = 1.0 * 2**30  # CUDA context, cuBLAS workspace, CUDA graphs
MIN_KV_TOKENS = 4096         # a TP degree must leave room for one long request's KV


class LatencyModel:
    """`prefill(batch, length)`, `decode_step(batch, context)`, `encode(batch, tokens,
    groups)` in seconds, numpy-broadcast; memory figures per GPU of the TP group."""

    def __init__(self, arch: ModelArch, device: Device, tp: int = 1):
        if not arch.llm.supports_tp(tp):
            raise ValueError(f"{arch.name}: {arch.llm.heads} heads / {arch.llm.kv_heads} KV "
                             f"heads do not split over tp = {tp}")
        self.arch, self.dev, self.tp = arch, device, tp

    # --- LLM ------------------------------------------------------------------------------
    def _llm_dense(self, tokens: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Everything but attention: GEMMs, all-reduce, element-wise, LM head, sampler."""
        a, d, tp = self.arch.llm, self.dev, self.tp
        h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
        ffn = a.ffn // tp
        up = (2 if a.gated else 1) * ffn
        t = (d.gemm(tokens, (h + 2 * kv) * a.head_dim, a.hidden)
             + d.gemm(tokens, a.hidden, h * a.head_dim)
             + d.gemm(tokens, up, a.hidden) + d.gemm(tokens, a.hidden, ffn)
             + 2 * d.allreduce(tp, tokens * a.hidden))
        ew_bytes = tokens * BYTES * (2 * 4 * a.hidden                 # 2 fused add+norm
                                     + 2 * (h + kv) * a.head_dim      # RoPE on q, k
                                     + 2 * 2 * kv * a.head_dim        # KV-cache write
                                     + (up + ffn))                    # activation
        t = a.layers * (t + d.elementwise(ew_bytes, kernels=5))
        vocab = a.vocab // tp
        head = (d.elementwise(tokens * BYTES * 2 * a.hidden, kernels=2)   # embed, final norm
                + d.gemm(seqs, vocab, a.hidden)
                + d.allreduce(tp, seqs * vocab)                           # logits gather
                + d.elementwise(seqs * vocab * 4.0 * 3, kernels=3))       # sampler
        return t + head

    def _attn_layers(self) -> tuple[int, int]:
        a = self.arch.llm
        return a.layers - a.sliding_layers, a.sliding_layers

    def prefill(self, batch, length) -> np.ndarray:
        """`batch` sequences of `length` prompt tokens in one forward."""
        b, s = np.broadcast_arrays(np.asarray(batch, float), np.asarray(length, float))
        a, d, tp = self.arch.llm, self.dev, self.tp
        h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
        full, local = self._attn_layers()
        attn = full * d.context_attention(b, s, h, kv, a.head_dim)
        if local:
            w = float(a.sliding_window)  # type: ignore[arg-type]
            # past the window each token sees w keys: (2s/w − 1) × a causal w-token block
            win = d.context_attention(b, np.minimum(s, w), h, kv, a.head_dim)
            attn = attn + local * win * np.where(s > w, 2 * s / w - 1, 1.0)
        return self._llm_dense(b * s, b) + attn

    def decode_step(self, batch, context) -> np.ndarray:
        """One step of `batch` sequences holding `context` tokens of KV each (mean)."""
        n, c = np.broadcast_arrays(np.asarray(batch, float), np.asarray(context, float))
        a, d, tp = self.arch.llm, self.dev, self.tp
        h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
        full, local = self._attn_layers()
        attn = full * d.generation_attention(n, h, kv, a.head_dim, c)
        if local:
            attn = attn + local * d.generation_attention(
                n, h, kv, a.head_dim, np.minimum(c, float(a.sliding_window)))  # type: ignore
        return self._llm_dense(n, n) + attn

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
        return self.arch.llm.weight_bytes(self.tp)

    @property
    def encoder_weight_bytes(self) -> float:
        return self.arch.encoder.weight_bytes() if self.arch.encoder else 0.0

    @property
    def kv_bytes_per_token(self) -> float:
        return self.arch.llm.kv_bytes_per_token(self.tp)

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

    def kv_capacity_tokens(self, utilisation: float = 0.9) -> int:
        free = self.dev.mem_bytes * utilisation - self.weight_bytes - self.activation_bytes
        return max(0, int(free // self.kv_bytes_per_token))

    def fits(self) -> bool:
        return self.kv_capacity_tokens() >= MIN_KV_TOKENS

    def max_batch(self, context: float) -> int:
        """Sequences of `context` tokens whose KV fits, capped at vLLM's max_num_seqs."""
        return int(min(MAX_SEQS, self.kv_capacity_tokens() // max(context, 1.0)))
