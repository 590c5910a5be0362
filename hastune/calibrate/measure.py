"""Measure a serving model's stage latencies on a real device (`hastune profile`).

What is timed, per shape of a `Plan`: `encode` of a batch of equal payloads (per modality and
size), `prefill_batch` of equal prompts (batch × length), one `decode_step` of a batch at a
context, and — where a share of the device can be given to a run — encode and prefill at
several shares (CPU: threads via torch.set_num_threads; CUDA: SMs via green contexts). Each
shape runs `warmup` untimed times, then `repeats` timed ones; the median is kept. Rows are
cached in a JSON file as they come, so an interrupted run resumes where it stopped.

torch (and the model) load only inside `open_model` / `measure`; plans, rows and the cache are
plain data, so `import hastune` stays light.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Plan:
    """The shapes to measure. Caps keep the grid inside a token budget per call."""

    encode_batches: tuple[int, ...] = (1, 2, 4, 8)
    encode_token_cap: int = 4096          # batch × encoder tokens per item
    prefill_batches: tuple[int, ...] = (1, 2, 4, 8)
    prefill_lengths: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048)
    prefill_token_cap: int = 2048         # batch × length; also the profile's max_batch_tokens
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    decode_contexts: tuple[int, ...] = (32, 128, 512, 1024, 2048)
    decode_token_cap: int = 32768         # batch × context
    share_batches: tuple[int, ...] = (1, 2, 4, 8)      # encode batches timed at each share
    share_prefill: tuple[tuple[int, int], ...] = ((1, 256), (4, 256))  # (batch, length)
    warmup: int = 2
    repeats: int = 5

    @property
    def kv_tokens(self) -> int:
        """KV room the decode grid needs (each sequence grows by warmup + repeats tokens)."""
        steps = self.warmup + self.repeats + 1
        need = max(n * (c + steps) for n in self.decode_batches for c in self.decode_contexts
                   if n * c <= self.decode_token_cap)
        return max(need, self.prefill_token_cap) + 64 * max(self.decode_batches)


QUICK = Plan(encode_batches=(1, 2), encode_token_cap=256, prefill_batches=(1, 2),
             prefill_lengths=(16, 64), prefill_token_cap=128, decode_batches=(1, 4),
             decode_contexts=(16, 64), decode_token_cap=256, share_batches=(1,),
             share_prefill=((1, 64),), warmup=1, repeats=3)


@dataclass(frozen=True)
class Shape:
    stage: str            # encode | prefill | decode | encode@share | prefill@share
    key: str
    params: dict[str, Any]


@dataclass
class Row:
    stage: str
    key: str
    params: dict[str, Any]
    seconds: float        # median of the timed runs
    samples: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ModelInfo:
    """What a profile needs to know about the model besides its timings."""

    name: str
    weight_bytes: float
    encoder_weight_bytes: float
    kv_bytes_per_token: float
    embedding_bytes_per_token: float
    modalities: tuple[str, ...]
    config: dict[str, Any] | None = None


def shapes(plan: Plan, sizes: dict[str, list[float]],
           tokens: Callable[[str, float], tuple[int, int]], shares: list[float]) -> list[Shape]:
    """Every shape of the plan for a model with payload `sizes` per modality; `tokens(m, s)`
    gives (encoder, LLM) tokens of one payload; `shares` below 1.0 to time at."""
    out: list[Shape] = []
    for mod, sz in sizes.items():
        for s in sz:
            enc, llm = tokens(mod, s)
            for b in plan.encode_batches:
                if b == 1 or b * enc <= plan.encode_token_cap:
                    out.append(Shape("encode", f"encode:{mod}:{s:g}:b{b}",
                                     {"modality": mod, "size": s, "batch": b, "tokens": enc,
                                      "llm_tokens": llm}))
    for b in plan.prefill_batches:
        for n in plan.prefill_lengths:
            if b * n <= plan.prefill_token_cap:
                out.append(Shape("prefill", f"prefill:b{b}:L{n}", {"batch": b, "length": n}))
    for b in plan.decode_batches:
        for c in plan.decode_contexts:
            if b * c <= plan.decode_token_cap:
                out.append(Shape("decode", f"decode:b{b}:c{c}", {"batch": b, "context": c}))
    if shares and sizes:
        mod = "image" if "image" in sizes else next(iter(sizes))
        size = sorted(sizes[mod])[len(sizes[mod]) // 2]
        enc, llm = tokens(mod, size)
        for b in plan.share_batches:  # shares of one shape back to back: same conditions
            for f in [*shares, 1.0]:
                out.append(Shape("encode@share", f"encode@{f:.4g}:{mod}:{size:g}:b{b}",
                                 {"modality": mod, "size": size, "batch": b, "tokens": enc,
                                  "llm_tokens": llm, "share": f}))
    for b, n in (plan.share_prefill if shares else ()):
        for f in [*shares, 1.0]:
            out.append(Shape("prefill@share", f"prefill@{f:.4g}:b{b}:L{n}",
                             {"batch": b, "length": n, "share": f}))
    return out


class RowCache:
    """Measured rows in a JSON file, valid for one fingerprint (model, device, plan, torch)."""

    def __init__(self, path: Path | None, fingerprint: dict[str, Any], fresh: bool = False):
        self.path = path
        self.fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back (no tuples)
        self.rows: dict[str, Row] = {}
        self.stale = False
        if path is not None and path.exists() and not fresh:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = {}
            if data.get("fingerprint") == self.fingerprint:
                self.rows = {k: Row(**r) for k, r in data.get("rows", {}).items()}
            else:
                self.stale = True

    def put(self, row: Row) -> None:
        self.rows[row.key] = row
        if self.path is None:
            return
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps({"fingerprint": self.fingerprint,
                                   "rows": {k: asdict(r) for k, r in self.rows.items()}},
                                  indent=1), encoding="utf-8")
        os.replace(tmp, self.path)


# -- the device side (torch) ------------------------------------------------------------------

class Device:
    """A torch device, its clock, and how a share of it is given to a run."""

    def __init__(self, spec: str, threads: int | None = None):
        import torch

        self.torch = torch
        self.spec = spec
        self.is_cuda = spec.startswith("cuda")
        self.threads = threads or torch.get_num_threads()
        if not self.is_cuda:
            torch.set_num_threads(self.threads)
        self._green: Any = None
        self.share_kind = "none"
        self.shares: list[float] = []
        if self.is_cuda:
            self._setup_green()
        elif self.threads > 1:
            counts = sorted({1, max(1, self.threads // 4), max(1, self.threads // 2),
                             max(1, 3 * self.threads // 4)} - {self.threads})
            self.shares = [k / self.threads for k in counts]
            self.share_kind = "threads"
        else:  # one thread: nothing to measure; an encoder and its prefill time-share it
            self.share_kind = "time-shared"

    def _setup_green(self) -> None:
        from runners.device.green import GreenContexts

        self._green, _why = GreenContexts.probe(self.torch, self.spec)
        if self._green is None:
            return
        self.sms = self._green.sms
        self.shares = [0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
        self.share_kind = "green contexts"

    def describe(self) -> str:
        torch = self.torch
        if self.is_cuda:
            name = torch.cuda.get_device_name(self.spec)
            return f"{self.spec}: {name}, {self.sms if self._green else '?'} SMs"
        cpu = "CPU"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"cpu: {cpu}, {self.threads} thread{'s' if self.threads != 1 else ''}"

    def sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize(self.spec)

    @contextmanager
    def share(self, f: float) -> Iterator[float]:
        """Run the body on share f of the device; yields the share really given."""
        if f >= 1.0:
            yield 1.0
        elif not self.is_cuda:
            k = max(1, round(f * self.threads))
            self.torch.set_num_threads(k)
            try:
                yield k / self.threads
            finally:
                self.torch.set_num_threads(self.threads)
        else:  # work goes on a stream of a green context holding n of the GPU's SMs
            n = self._green.count(f)  # rounded onto the driver's SM grid, contexts cached
            stream = self._green.stream(n)
            with self.torch.cuda.stream(stream):
                yield n / self.sms
            self.sync()


def open_model(name: str, device: str, plan: Plan) -> tuple[Any, ModelInfo]:
    """Load a model (preset or module:factory) sized for the plan's KV needs."""
    from runners.model import load_model

    kwargs: dict[str, Any] = {}
    if ":" not in name:
        kwargs["kv_tokens"] = plan.kv_tokens
        if not device.startswith("cuda"):
            kwargs["dtype"] = "float32"  # bf16 matmuls are slow on most CPUs
    model = load_model(name, device=device, **kwargs)
    cfg = getattr(model, "config", None)
    info = ModelInfo(
        name=getattr(model, "name", name), weight_bytes=float(model.weight_bytes),
        encoder_weight_bytes=float(model.encoder_weight_bytes),
        kv_bytes_per_token=float(model.kv_bytes_per_token),
        embedding_bytes_per_token=float(model.embedding_bytes_per_token),
        modalities=tuple(model.modalities),
        config=asdict(cfg) if cfg is not None and hasattr(cfg, "__dataclass_fields__") else None)
    return model, info


def _median_time(dev: Device, fn: Callable[[], Any], after: Callable[[Any], None] | None,
                 warmup: int, repeats: int) -> list[float]:
    samples = []
    for i in range(warmup + repeats):
        dev.sync()
        t0 = time.perf_counter()
        out = fn()
        dev.sync()
        dt = time.perf_counter() - t0
        if after is not None:
            after(out)
        if i >= warmup:
            samples.append(dt)
    return samples


def _prompt(n: int) -> list[int]:
    return [(7 * i + 3) % 13 + 1 for i in range(n)]


def _call(model: Any, shape: Shape) -> tuple[Callable[[], Any], Callable[[Any], None] | None]:
    """The timed call of an encode or prefill shape, and what to undo after it."""
    p = shape.params
    if shape.stage.startswith("encode"):
        payloads = [model.example_payload(p["modality"], p["size"], seed=i)
                    for i in range(p["batch"])]
        return (lambda: model.encode(payloads)), None
    items = [(_prompt(p["length"]), None)] * p["batch"]

    def after(out: Any) -> None:
        for _, h in out:
            model.free(h)
    return (lambda: model.prefill_batch(items)), after


def measure_shape(model: Any, dev: Device, shape: Shape, plan: Plan) -> Row:
    gc.collect()
    if shape.stage == "decode":
        return _measure_decode(model, dev, shape, plan)
    call, after = _call(model, shape)
    samples = _median_time(dev, call, after, plan.warmup, plan.repeats)
    return Row(shape.stage, shape.key, shape.params, statistics.median(samples), samples)


def measure_shares(model: Any, dev: Device, group: list[Shape], plan: Plan) -> list[Row]:
    """One shape at several shares, interleaved (share a, b, …, 1.0, a, b, …) for 2 × repeats
    rounds: only the ratios matter, and interleaving cancels drift in the machine's speed."""
    gc.collect()
    call, after = _call(model, group[0])
    samples: dict[str, list[float]] = {s.key: [] for s in group}
    given: dict[str, float] = {}
    rounds = plan.warmup + 2 * plan.repeats
    for i in range(rounds):
        for shape in group:
            with dev.share(shape.params["share"]) as g:
                t = _median_time(dev, call, after, 0, 1)[0]
            given[shape.key] = g
            if i >= plan.warmup:
                samples[shape.key].append(t)
    return [Row(s.stage, s.key, {**s.params, "share": given[s.key]},
                statistics.median(samples[s.key]), samples[s.key]) for s in group]


def _measure_decode(model: Any, dev: Device, shape: Shape, plan: Plan) -> Row:
    n, c = shape.params["batch"], shape.params["context"]
    if hasattr(model, "synthetic_handle"):  # skip the prefill: step cost is the same
        handles = [model.synthetic_handle(c) for _ in range(n)]
    else:
        handles = [h for _, h in model.prefill_batch([(_prompt(c), None)] * n)]
    try:
        samples = _median_time(dev, lambda: model.decode_step(handles), None, plan.warmup,
                               plan.repeats)
    finally:
        for h in handles:
            model.free(h)
    # the step attends over the cached tokens plus its own; the context grew during the runs
    mean_ctx = c + 1 + plan.warmup + (plan.repeats - 1) / 2
    return Row(shape.stage, shape.key, {**shape.params, "mean_context": mean_ctx},
               statistics.median(samples), samples)


def measure(model: Any, dev: Device, todo: list[Shape], plan: Plan, cache: RowCache,
            on_row: Callable[[Shape, bool], None] | None = None) -> list[Row]:
    """Measure every shape not in the cache (cached ones are reused); rows in `todo` order.
    `on_row(shape, cached)` is called after each."""
    groups: dict[tuple, list[Shape]] = {}
    for shape in todo:  # a shape's shares are measured together (see measure_shares)
        if "@share" in shape.stage:
            key = (shape.stage, *sorted((k, v) for k, v in shape.params.items()
                                        if k != "share"))
            groups.setdefault(key, []).append(shape)
    group_of = {s.key: g for g in groups.values() for s in g}
    rows = []
    for shape in todo:
        row = cache.rows.get(shape.key)
        cached = row is not None
        if row is None:
            group = group_of.get(shape.key)
            if group is None:
                cache.put(measure_shape(model, dev, shape, plan))
            else:  # re-measure the whole group: its rows are only comparable together
                for r in measure_shares(model, dev, group, plan):
                    cache.put(r)
            row = cache.rows[shape.key]
        rows.append(row)
        if on_row is not None:
            on_row(shape, cached)
    return rows
