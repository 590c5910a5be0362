"""Does a deployment fit the machine? The devices the engine's workers need against the ones
this process has, checked before any worker starts.

A worker is one device, as the simulator assumes:
- CPU (local backend): a worker's `threads` torch threads run on `threads` cores of its own
  (the engine pins it there), so a deployment needs workers × threads cores of the ones this
  process may run on (`os.sched_getaffinity`; taskset / cgroups narrow it). An encode worker's
  co-resident local prefill time-shares its worker's cores, as it shares a GPU's SMs.
- CUDA (local backend): one GPU per worker, from the device named (`cuda` or `cuda:N`) up;
  worker k runs on cuda:N+k.
- Ray: the cluster places actors by their num_cpus / num_gpus; nothing is checked here.

A deployment that needs more is refused (InputError: the arithmetic and the fix), or, with
`oversubscribe`, runs anyway — workers share cores / GPUs round robin — and its result says it
is not comparable with the simulator. torch is imported only to count CUDA devices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hastune import archs
from hastune.errors import InputError

NOT_COMPARABLE = ("oversubscribed: workers share devices, which the simulator (one device per "
                  "worker) does not model; the result is not comparable with the simulator's")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cpu_cores() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cuda_base(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def cuda_count() -> int:
    import torch  # only on CUDA: the CPU path never loads it

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass
class Fit:
    """What a deployment needs (`need` cores or GPUs) and what this process has."""

    device: str                   # "cpu", "cuda" or "cuda:N"
    workers: list[str]            # worker names, in start order
    threads: int = 1              # torch threads per worker (CPU)
    have: int = 0                 # cores (CPU) or GPUs from cuda:N up
    cores: list[int] = field(default_factory=list)
    checked: bool = True          # False: the backend places workers itself (ray)
    oversubscribed: bool = False  # it runs although need > have

    @property
    def cpu(self) -> bool:
        return not self.device.startswith("cuda")

    @property
    def need(self) -> int:
        return len(self.workers) * (self.threads if self.cpu else 1)

    @property
    def fits(self) -> bool:
        return not self.checked or self.need <= self.have

    def arithmetic(self) -> str:
        n = len(self.workers)
        if self.cpu:
            return (f"{_plural(n, 'worker')} × {_plural(self.threads, 'thread')} = "
                    f"{_plural(self.need, 'thread')} on {_plural(self.have, 'core')}")
        return f"{_plural(n, 'worker')} need {_plural(n, 'GPU')}; {self.have} visible"

    def cores_for(self, k: int) -> list[int]:
        """The cores of the k-th worker started (round robin once they run out)."""
        c = self.cores or [0]
        return sorted({c[(k * self.threads + j) % len(c)] for j in range(self.threads)})

    def device_for(self, k: int) -> str:
        """The device string of the k-th worker started."""
        if self.cpu or not self.checked:
            return self.device
        return f"cuda:{cuda_base(self.device) + k % max(self.have, 1)}"

    def as_dict(self) -> dict[str, Any]:
        out = {"device": self.device, "workers": len(self.workers), "need": self.need,
               "have": self.have, "unit": "cores" if self.cpu else "GPUs",
               "fits": self.fits, "oversubscribed": self.oversubscribed,
               "arithmetic": self.arithmetic() if self.checked else "placed by ray"}
        if self.cpu:
            out["threads_per_worker"] = self.threads
        if self.oversubscribed:
            out["note"] = NOT_COMPARABLE
        return out


def plan(config: Any, device: str = "cpu", threads: int = 1, backend: str = "local",
         have: int | None = None) -> Fit:
    """The Fit of `config` (an architecture the engine runs) on this machine; `have`
    overrides the count (tests)."""
    names = [n for n, _ in archs.of(config).engine_workers(config)]
    if backend != "local":
        return Fit(device, names, threads, checked=False)
    if not device.startswith("cuda"):
        cores = cpu_cores()
        return Fit(device, names, threads, len(cores) if have is None else have, cores)
    n = max(0, cuda_count() - cuda_base(device)) if have is None else have
    return Fit(device, names, threads, n)


def pools_field(config: Any) -> str | None:
    """The config fields that count its workers ("n_E/n_P/n_D", "replicas", "instances")."""
    return "/".join(archs.of(config).count_knobs) or None


def check_fit(config: Any, device: str = "cpu", threads: int = 1, backend: str = "local",
              oversubscribe: bool = False, path: Any = None, have: int | None = None) -> Fit:
    """The Fit of `config`; InputError (its arithmetic and the fix) when it needs more than
    the machine has, unless `oversubscribe` (then the Fit says it is oversubscribed)."""
    fit = plan(config, device, threads, backend, have)
    if fit.fits:
        return fit
    if oversubscribe:
        fit.oversubscribed = True
        return fit
    unit = "cores" if fit.cpu else "GPUs"
    most = fit.have // (fit.threads if fit.cpu else 1)
    raise InputError(path, pools_field(config), f"the deployment does not fit this machine: "
                     f"{fit.arithmetic()} ({config.architecture}: "
                     f"{', '.join(fit.workers)})",
                     f"use at most {_plural(most, 'worker')} here"
                     + (f" at {_plural(fit.threads, 'thread')} each" if fit.cpu else "")
                     + f", run on a machine with {fit.need} {unit}, or pass --oversubscribe "
                     "(the result is then not comparable with the simulator)")
