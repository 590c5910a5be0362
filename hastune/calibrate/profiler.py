"""`hastune profile` as a library call: load the model, measure the plan (resuming from the
rows file), fit, write the profile YAML. torch loads only inside `profile_model`."""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hastune.calibrate.fit_measured import HOLDOUT_FRACTION, profile_dict, render
from hastune.calibrate.measure import QUICK, Plan, Row, RowCache, Shape, shapes

DEFAULT_CPU_MEMORY_GB = 2.0


@dataclass
class ProfileResult:
    data: dict            # the profile mapping written
    rows: list[Row]
    path: Path
    rows_path: Path
    measured: int         # shapes measured in this run (the rest came from the rows file)
    wall_s: float


def rows_path_for(out: Path) -> Path:
    return out.with_name(out.stem + ".rows.json")


def device_label(device: str, name: str | None) -> str:
    """profiles/<label>/: cpu, or the CUDA device's name as a slug (nvidia-h200...)."""
    if not device.startswith("cuda") or not name:
        return "cpu" if not device.startswith("cuda") else "cuda"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def command_line(model: str, device: str, out: Path, threads: int | None, gpu: str | None,
                 memory_gb: float | None, quick: bool) -> str:
    parts = ["hastune", "profile", "--model", model, "--device", device]
    if threads:
        parts += ["--threads", str(threads)]
    if gpu:
        parts += ["--gpu", gpu]
    if memory_gb is not None:
        parts += ["--memory-gb", f"{memory_gb:g}"]
    if quick:
        parts.append("--quick")
    parts += ["--out", str(out)]
    return shlex.join(parts)


def profile_model(model: str, device: str, out: Path, *, threads: int | None = None,
                  gpu: str | None = None, memory_gb: float | None = None, quick: bool = False,
                  fresh: bool = False, plan: Plan | None = None,
                  holdout_fraction: float = HOLDOUT_FRACTION, holdout_seed: int = 0,
                  on_start: Callable[[int, int], None] | None = None,
                  on_row: Callable[[Shape, bool], None] | None = None) -> ProfileResult:
    """Measure `model` (a preset or module:factory) on `device` and write the profile to
    `out` (and its measured rows next to it). `on_start(total, cached)` before measuring,
    `on_row(shape, cached)` after each shape."""
    from hastune.calibrate.measure import Device, measure, open_model

    t0 = time.perf_counter()
    plan = plan or (QUICK if quick else Plan())
    dev = Device(device, threads)
    import torch

    mdl, info = open_model(model, device, plan)
    base_mem = torch.cuda.memory_allocated(device) if dev.is_cuda else 0
    if dev.is_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    sizes = {m: s for m, s in mdl.profile_sizes().items() if m in info.modalities}

    def tokens(mod: str, size: float) -> tuple[int, int]:
        return mdl.token_counts(mdl.example_payload(mod, size))

    todo = shapes(plan, sizes, tokens, dev.shares)
    fingerprint = {"model": model, "config": info.config, "device": dev.describe(),
                   "torch": str(torch.__version__), "plan": asdict(plan),
                   "share": dev.share_kind}
    rows_path = rows_path_for(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cache = RowCache(rows_path, fingerprint, fresh=fresh)
    cached = sum(1 for s in todo if s.key in cache.rows)
    if on_start is not None:
        on_start(len(todo), cached)
    load0 = _load()
    rows = measure(mdl, dev, todo, plan, cache, on_row)
    load1 = _load()
    if dev.is_cuda:
        gpu_bytes = float(torch.cuda.get_device_properties(device).total_memory)
        activation = float(torch.cuda.max_memory_allocated(device) - base_mem)
        name = torch.cuda.get_device_name(device)
    else:
        gpu_bytes = (memory_gb or DEFAULT_CPU_MEMORY_GB) * 2**30
        activation, name = None, None
    label = gpu or device_label(device, name)
    cmd = command_line(model, device, out, threads, gpu, memory_gb, quick)
    data = profile_dict(info, rows, plan, gpu=label, device=dev.describe(),
                        torch_version=str(torch.__version__), command=cmd,
                        share_kind=dev.share_kind, gpu_bytes=gpu_bytes,
                        activation_bytes=activation, holdout_fraction=holdout_fraction,
                        holdout_seed=holdout_seed, conditions=_conditions(
                            rows, load0, load1, len(todo) - cached))
    _check(data, out)
    out.write_text(render(data, rows_path.name), encoding="utf-8")
    return ProfileResult(data, rows, out, rows_path, len(todo) - cached,
                         time.perf_counter() - t0)


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _conditions(rows: list[Row], load0: float | None, load1: float | None, measured: int
                ) -> str:
    """How steady the timings were: the median spread (max/min − 1) of a shape's timed runs,
    and the 1-minute load average around this run (other processes on the cores)."""
    spreads = sorted(max(r.samples) / min(r.samples) - 1 for r in rows
                     if len(r.samples) > 1 and min(r.samples) > 0)
    text = (f"median spread of a shape's timed runs {100 * spreads[len(spreads) // 2]:.1f}%"
            if spreads else "")
    if load0 is not None and load1 is not None and measured:
        text += f"; load average {load0:.2f} before, {load1:.2f} after this run"
    return text


def _check(data: dict[str, Any], out: Path) -> None:
    """The profile must load (the simulator's schema) before it is written."""
    from pydantic import ValidationError

    from hastune.errors import from_pydantic
    from hastune.profile import Profile

    try:
        Profile.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(out, exc) from None
