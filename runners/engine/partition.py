"""How an encode worker shares its device with its co-resident local prefill.

EAServe's dynamic SM partitioning: while the encoder runs a batch of b items it gets the
smallest SM share f(b) whose encode latency stays within (1 + δ) of the full GPU's — the shared
`SMPartitioner` (profile curves, else the seed's table; the simulator uses the same object) —
and the local prefill gets the rest; while the encoder idles the local prefill has the whole
device. Three ways, chosen at start:

- `green contexts` (CUDA, torch built with them, driver ≥ 12.8): the encode batch runs on the
  stream of a green context of n_E = f(b)·SMs SMs, a local prefill batch that starts while an
  encode runs goes on a green context of the remaining SMs, one that starts while the encoder
  idles on a stream over the whole device. Counts are rounded onto the driver's SM grid
  (runners/device/green.py); contexts and streams are made once per SM count. Each call
  waits for its stream, so the embeddings the encoder hands over are complete.
- `threads` (CPU): what the engine has always done: the encoder and the local prefill are two
  threads of the process, each running torch with the worker's `threads`; the OS shares the
  cores between them. No share is applied.
- `none` (CUDA without green contexts): both run on the device's current stream, no split;
  the report says why.

`report()` is what the worker tells the frontend (the run record's `sm_split`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hastune.policies import SMPartitioner
from runners.device.green import GreenContexts, sm_granularity, split_sms

GREEN, THREADS, NONE = "green contexts", "threads", "none"


class DevicePartition:
    def __init__(self, torch: Any, device: str, threads: int,
                 partitioner: SMPartitioner | None, local_prefill: bool = True,
                 green: GreenContexts | None = None, why: str = ""):
        """`green`: the device's contexts, or None (then CPU → threads, CUDA → none with
        `why`). Use `DevicePartition.open` to probe the device."""
        self.torch = torch
        self.device = device
        self.threads = threads
        self.partitioner = partitioner
        self.local_prefill = local_prefill
        self.is_cuda = device.startswith("cuda")
        self.green = green if self.is_cuda and local_prefill else None
        if self.green is not None:
            self.kind = GREEN
        elif not self.is_cuda:
            self.kind = THREADS
        else:
            self.kind = NONE
        self.why = why if self.is_cuda and local_prefill else (
            "" if local_prefill else "no local prefill (the static baseline)")
        self._lock = threading.Lock()
        self._encoding: tuple[int, int] | None = None  # (encode SMs, prefill SMs) while busy
        self.splits: dict[int, tuple[float, int, int]] = {}  # batch → (share, SMs E, SMs P)
        self.encodes = 0
        self.prefills_split = 0      # local prefill batches started during an encode
        self.prefills_whole = 0      # … while the encoder idled (whole device)
        self._whole: Any = None      # a stream over the whole device, for the latter
        self._busy = 0               # CPU: encode + local prefill batches running now

    @classmethod
    def open(cls, torch: Any, device: str, threads: int, partitioner: SMPartitioner | None,
             local_prefill: bool = True) -> DevicePartition:
        green, why = None, ""
        if device.startswith("cuda") and local_prefill:
            green, why = GreenContexts.probe(torch, device)
            lo = sm_granularity(green.major)[0] if green is not None else 0
            if green is not None and green.sms < 2 * lo:
                green, why = None, f"{green.sms} SMs cannot hold two groups of {lo}"
        return cls(torch, device, threads, partitioner, local_prefill, green, why)

    def sms_for(self, batch: int) -> tuple[float, int, int]:
        """(encode share, encode SMs, local prefill SMs) for an encode batch of `batch`."""
        g = self.green
        assert g is not None and self.partitioner is not None
        s = self.splits.get(batch)
        if s is None:
            f = self.partitioner.encode_share(batch)
            n_e, n_p = split_sms(f, g.sms, g.major)
            s = self.splits[batch] = (f, n_e, n_p)
        return s

    @contextmanager
    def _sharing(self) -> Iterator[tuple[float, int]]:
        """Without green contexts an encode and a local prefill share the whole device:
        (1.0, 1 if the other was running when this one started)."""
        with self._lock:
            self._busy += 1
            overlap = int(self._busy > 1)
        try:
            yield 1.0, overlap
        finally:
            with self._lock:
                self._busy -= 1

    @contextmanager
    def encoding(self, batch: int) -> Iterator[tuple[float, int]]:
        """Run an encode batch of `batch` items inside: on its SM share (green contexts).
        Yields (the device share it runs on, 1 if a local prefill runs at its start)."""
        self.encodes += 1
        if self.green is None:
            with self._sharing() as got:
                yield got
            return
        _, n_e, n_p = self.sms_for(batch)
        stream = self.green.stream(n_e)
        with self._lock:
            self._encoding = (n_e, n_p)
        try:
            stream.wait_stream(self.torch.cuda.current_stream(self.device))
            with self.torch.cuda.stream(stream):
                yield n_e / self.green.sms, 0
            stream.synchronize()
        finally:
            with self._lock:
                self._encoding = None

    @contextmanager
    def prefilling(self) -> Iterator[tuple[float, int]]:
        """Run a local prefill batch inside: on the SMs the encoder leaves (green contexts).
        Yields (the device share it runs on, 1 if an encode runs at its start)."""
        if self.green is None:
            self.prefills_whole += 1
            with self._sharing() as got:
                yield got
            return
        share = 1.0
        with self._lock:
            busy = self._encoding
        if busy is not None:
            self.prefills_split += 1
            stream = self.green.stream(busy[1])
            share = busy[1] / self.green.sms
        else:
            self.prefills_whole += 1
            if self._whole is None:
                self._whole = self.torch.cuda.Stream(device=self.device)
            stream = self._whole
        stream.wait_stream(self.torch.cuda.current_stream(self.device))
        with self.torch.cuda.stream(stream):
            yield share, int(busy is not None)
        stream.synchronize()

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sm_split": self.kind}
        if self.why:
            out["why"] = self.why
        if self.kind == THREADS:
            out.update({"encode_threads": self.threads,
                        "prefill_threads": self.threads if self.local_prefill else 0})
        elif self.kind == GREEN:
            g = self.green
            assert g is not None
            out.update({"sms": g.sms,
                        "shares": {str(b): {"encode_share": f, "encode_sms": e,
                                            "prefill_sms": p}
                                   for b, (f, e, p) in sorted(self.splits.items())},
                        "contexts_made": g.made})
        out.update({"encodes": self.encodes, "local_prefills_split": self.prefills_split,
                    "local_prefills_whole": self.prefills_whole})
        return out
