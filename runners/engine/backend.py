"""Where the engine's workers run: `local` processes (the default) or `ray` actors.

A backend is a *context* with the interface of `multiprocessing.get_context("spawn")` that the
engine uses — `Queue()`, `Array(typecode, size_or_values)`, `Process(target=, args=, name=)`
— plus `close()`. The engine and the worker mains are the same for both: the engine starts a
worker target with its args, and the worker serves the queues and counters it is handed.

- `local`: the spawn context itself (processes, `mp.Queue`, shared `mp.Array`).
- `ray`: one Ray actor per worker (`num_cpus` = the worker's torch threads, one GPU each on
  CUDA) whose single task runs the worker main. Queues and load counters live in one *hub*
  actor placed on the frontend's node. A queue's consumer drains its hub queue into a local
  queue with a pump thread (so `get`/`get_nowait` cost nothing in the hot loops); `put` is a
  fire-and-forget actor call with the item pickled (the hub holds bytes: it never loads
  torch, and an item outlives the worker that sent it). Counters are mirrored per process
  and refreshed at most every `MIRROR_S`; updates made under `get_lock()` (the workers'
  `a[i] -= x`) go to the hub as deltas, so concurrent updates from different machines add
  up. A worker's liveness is its run task: it ends with `ActorDiedError` when the actor is
  killed or its node dies, which the engine sees through `Process.is_alive()` exactly as it
  sees a dead local process.

ray is imported only when the ray backend is chosen (runners/engine/ray_backend.py).
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from hastune.errors import InputError

BACKENDS = ("local", "ray")
RAY_INSTALL = "pip install 'hastune[ray]' (or pip install 'ray>=2.40')"


def context(backend: str = "local", ray_address: str | None = None, *, gpus: float = 0.0,
            cpus: float = 1.0) -> Any:
    """The context the engine starts its workers with."""
    check(backend, ray_address)
    if backend == "local":
        return mp.get_context("spawn")
    from runners.engine.ray_backend import RayContext  # ray loads only here

    return RayContext(ray_address, cpus=cpus, gpus=gpus)


def check(backend: str, ray_address: str | None = None) -> None:
    """Raise InputError unless `backend` is known and usable here."""
    if backend not in BACKENDS:
        raise InputError(None, "--backend", f"unknown backend {backend!r}",
                         f"use {' or '.join(BACKENDS)}")
    if ray_address and backend != "ray":
        raise InputError(None, "--ray-address", f"a Ray address with the {backend} backend",
                         "add --backend ray, or drop --ray-address")
    if backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise InputError(None, "--backend", "the ray backend needs ray, which is not "
                             "installed", RAY_INSTALL) from None


def close(ctx: Any) -> None:
    fn = getattr(ctx, "close", None)
    if fn is not None:
        fn()


def preflight(model: str, device: str, *, model_from: str = "--model",
              path: Any = None, fix: str | None = None) -> None:
    """InputError naming the real cause, before any worker starts, for what would otherwise
    fail in every worker: torch missing, a device that is not cpu / cuda[:N] or that torch
    cannot use, and a `module:factory` model that did not come from the command line
    (`model_from` is "--model" only then: a recipe's `model:` must not import modules)."""
    import importlib.util
    import re

    if ":" in model and model_from != "--model":
        raise InputError(path, model_from, f"model {model!r} names a module:factory, which "
                         "only --model on the command line may load (it imports that module "
                         "in every worker)", fix or f"pass --model {model} to load it, or "
                         "use a preset (ref-tiny, ref-small, ref-base)")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise InputError(None, "--device", f"unknown device {device!r}",
                         "use cpu, cuda or cuda:N")
    if importlib.util.find_spec("torch") is None:
        raise InputError(None, None, "the engine's workers need torch, which is not "
                         "installed", "pip install torch (CPU only: pip install torch "
                         "--index-url https://download.pytorch.org/whl/cpu)")
    if device.startswith("cuda"):
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        k = int(device.partition(":")[2] or 0)
        if k >= n:
            raise InputError(None, "--device", f"--device {device}, but torch "
                             f"{torch.__version__} (CUDA {torch.version.cuda or 'none'}) "
                             f"sees {n} CUDA device{'s' if n != 1 else ''}",
                             "use --device cpu, or a CUDA build of torch on a machine with a "
                             "working NVIDIA driver")
