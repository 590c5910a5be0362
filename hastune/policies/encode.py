"""The policies of one encode worker of an EPD deployment, built from its parsed config.

The simulator (hastune/sim/) and the engine (runners/engine/workers.py) both build their
encode workers' policies here, so the two apply the same knobs with the config's defaults:

- EAServe's encode worker: the Poisson-gap micro-batcher (B, p, max_gap_ms), the deficit
  router with the config's s, and the SM partitioner (sm_budget) that splits the GPU between
  the encoder and the co-resident local prefill — or, with sm_split, one fixed split (CUDA
  MPS);
- the static baseline's (Dynamo-like): the timeout batcher (batch, timeout_ms), every prefill
  remote (s = 1), no local prefill, so no partitioner.

`policies_for(cfg, …)` picks the builder by the config's type (never by a name string).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hastune.policies.batcher import PoissonGapBatcher, TimeoutBatcher
from hastune.policies.partitioner import Curve, FixedSplit, SMPartitioner
from hastune.policies.router import DeficitRouter

if TYPE_CHECKING:  # at run time only where needed: the config models' modules may import this
    from hastune.archs.epd import EPDConfig
    from hastune.archs.epd_static import EPDStaticConfig

CurveFor = Callable[[int], "Curve | None"]


@dataclass
class EncodePolicies:
    """What one encode worker applies. `partitioner` is None when the encoder has its GPU to
    itself (no co-resident local prefill: every prefill goes to the remote pool)."""

    batcher: PoissonGapBatcher | TimeoutBatcher
    router: DeficitRouter
    partitioner: SMPartitioner | None

    @property
    def local_prefill(self) -> bool:
        """Whether a local prefill worker shares the encode GPU."""
        return self.partitioner is not None


def _rate_hint(encode_rate: float, n_E: int) -> float:
    """The batcher's starting λ: the pool's multimodal arrival rate split over its workers."""
    return max(encode_rate / n_E, 1e-6)


def epd_policies(cfg: EPDConfig, encode_rate: float = 1.0,
                 curve_for: CurveFor | None = None) -> EncodePolicies:
    """EAServe's encode worker. `encode_rate`: multimodal requests per second reaching the
    whole encode pool (the batcher starts from its share and then estimates λ online);
    `curve_for(batch)`: the profile's encoder SM curve (None: the seed's fixed table)."""
    cap = cfg.max_gap_ms / 1e3 if cfg.max_gap_ms is not None else None
    return EncodePolicies(
        PoissonGapBatcher(cfg.B, cfg.p, _rate_hint(encode_rate, cfg.n_E), max_gap=cap),
        DeficitRouter(cfg.s),
        SMPartitioner(curve_for, budget=cfg.sm_budget) if cfg.sm_split is None
        else FixedSplit(cfg.sm_split))


def static_policies(cfg: EPDStaticConfig, encode_rate: float = 1.0,
                    curve_for: CurveFor | None = None) -> EncodePolicies:
    """The static baseline's encode worker: fixed timeout batches, every prefill remote, the
    whole GPU to the encoder (`encode_rate` and `curve_for` are not used)."""
    return EncodePolicies(TimeoutBatcher(cfg.batch, cfg.timeout_ms / 1e3), DeficitRouter(1.0),
                          None)


def policies_for(cfg: EPDConfig | EPDStaticConfig, encode_rate: float = 1.0,
                 curve_for: CurveFor | None = None) -> EncodePolicies:
    """The encode-worker policies of a config of the encode/prefill/decode family."""
    from hastune.archs.epd import EPDConfig
    from hastune.archs.epd_static import EPDStaticConfig

    if isinstance(cfg, EPDStaticConfig):
        return static_policies(cfg, encode_rate, curve_for)
    if isinstance(cfg, EPDConfig):
        return epd_policies(cfg, encode_rate, curve_for)
    raise TypeError(f"not an EPD config: {type(cfg).__name__}")
