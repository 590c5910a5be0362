"""CUDA green contexts: a stream whose kernels run on n of a GPU's SMs.

Shared by `hastune profile` (hastune/calibrate/measure.py: encode / prefill timed at SM shares)
and the engine's encode worker (runners/engine/partition.py: encoder and co-resident local
prefill on disjoint SM groups). torch is passed in, never imported here, so importing this
module stays light.

The driver gives SMs in groups (cuDevSmResourceSplitByCount): at least `min` SMs, in steps of
`step`, by compute capability (CUDA driver API docs): 9.x and later 8 / 8, 8.x 4 / 2, older
2 / 2. Counts are rounded onto that grid here, so the share reported is the share given.
"""

from __future__ import annotations

import threading
from typing import Any


def sm_granularity(major: int) -> tuple[int, int]:
    """(smallest group, step) of an SM split on a GPU of compute capability `major`.x."""
    if major >= 9:
        return 8, 8
    if major == 8:
        return 4, 2
    return 2, 2


def round_sms(n: float, sms: int, major: int, room: int = 0) -> int:
    """n SMs rounded to the nearest count the driver can give, leaving `room` SMs free
    (clamped to [min, sms − room]; at least the smallest group)."""
    lo, step = sm_granularity(major)
    hi = max(lo, sms - room)
    k = max(lo, step * round(n / step))
    while k > hi and k - step >= lo:
        k -= step
    return k


def split_sms(share: float, sms: int, major: int) -> tuple[int, int]:
    """SM counts (encode, rest) for an encode share: the encode count rounded to the driver's
    grid, leaving at least one group for the rest; the rest is what remains, rounded down
    onto the grid. Encode + rest ≤ sms, each ≥ the smallest group (≥ 1)."""
    lo, step = sm_granularity(major)
    if sms < 2 * lo:
        raise ValueError(f"{sms} SMs cannot hold two groups of {lo}")
    n_enc = round_sms(share * sms, sms, major, room=lo)
    rest = sms - n_enc
    n_rest = max(lo, lo + step * ((rest - lo) // step))
    return n_enc, n_rest


class GreenContexts:
    """The green contexts of one CUDA device, made once per SM count (creating one costs a
    driver call; a run switches between a few counts), and their streams."""

    def __init__(self, torch: Any, spec: str, factory: Any):
        self.torch = torch
        self.spec = spec
        self.factory = factory
        props = torch.cuda.get_device_properties(spec)
        self.sms: int = int(props.multi_processor_count)
        self.major: int = int(getattr(props, "major", 9))
        self.index: int = torch.device(spec).index or 0
        self._ctx: dict[int, Any] = {}
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def probe(cls, torch: Any, spec: str) -> tuple[GreenContexts | None, str]:
        """(contexts, "") where green contexts work on `spec`; else (None, why not)."""
        try:
            from torch.cuda.green_contexts import SUPPORTED, GreenContext
        except ImportError:
            return None, f"torch {torch.__version__} has no torch.cuda.green_contexts"
        if not SUPPORTED:
            return None, f"torch {torch.__version__} was built without green-context support"
        try:
            gc = cls(torch, spec, GreenContext)
            gc.stream(sm_granularity(gc.major)[0])  # old driver, MIG, no .Stream(): fail here
        except Exception as exc:  # noqa: BLE001 — a probe: any failure means "not here"
            return None, f"green contexts unavailable: {exc}"
        return gc, ""

    def count(self, share: float) -> int:
        """The SM count given for a share of the device."""
        return round_sms(share * self.sms, self.sms, self.major)

    def context(self, n: int) -> Any:
        with self._lock:
            ctx = self._ctx.get(n)
            if ctx is None:
                ctx = self._ctx[n] = self.factory.create(num_sms=n, device_id=self.index)
            return ctx

    def stream(self, n: int) -> Any:
        """The stream of the green context holding n SMs (work queued on it runs there)."""
        s = self._streams.get(n)
        if s is None:
            s = self.context(n).Stream()
            with self._lock:
                s = self._streams.setdefault(n, s)
        return s

    @property
    def made(self) -> list[int]:
        """SM counts of the contexts made so far."""
        with self._lock:
            return sorted(self._ctx)
