"""Profiles on demand (issue 12): a model, GPU, precision and engine with no shipped profile get
one built from aiconfigurator-core's kernel tables (hastune.calibrate.aic_profiles) on first
use, and cached.

Cache: $HASTUNE_CACHE/profiles/ if set, else $XDG_CACHE_HOME/hastune/profiles/, else
~/.cache/hastune/profiles/. One file per key, `<model>@<gpu>.<precision>.<engine>.<hash>.yaml`;
the hash covers the architecture read from the config (every figure the builder reads), the
GPU, precision, engine and version, the kernel package's version, hastune's version and the
source of the code that builds profiles (hastune.calibrate, hastune.models), so an edit of any
of them builds afresh and nothing stale is read. Delete the folder to clear it. A cached file is
read with hastune.yamlio like any profile; one that does not read or validate is rebuilt.
Writers take an exclusive lock on the folder (one process builds, the others wait and read its file)
and write to a temporary file renamed over the target, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from hastune.errors import InputError
from hastune.model_ref import Engine, Precision
from hastune.models.spec import ModelArch
from hastune.profile import Profile, load_profile

CACHE_ENV = "HASTUNE_CACHE"
HEADER_KEY = "# hastune on-demand cache key: "


def cache_dir() -> Path:
    """Where built profiles are cached (see the module docstring)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser() / "profiles"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return root / "hastune" / "profiles"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of the source of the code a profile is built by."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for d in (here, here.parent / "models"):
        for p in sorted(d.glob("*.py")):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def resolve_gpu(gpu: str, file: str | Path | None = None, field: str = "cluster.gpu"
                ) -> tuple[str, str]:
    """(hastune name, build_profile's GPU argument) of a GPU or kernel-database system."""
    from hastune.calibrate.gpus import canonical_gpu, gpu_names

    found = canonical_gpu(gpu)
    if found is None:
        import difflib

        close = difflib.get_close_matches(str(gpu).lower(), gpu_names(), n=1, cutoff=0.6)
        raise InputError(file, field, f"unknown GPU {gpu!r}" + (
            f"; did you mean {close[0]}?" if close else ""), f"use one of {', '.join(gpu_names())}")
    return found


@dataclass(frozen=True)
class Request:
    """What a profile is built for."""

    arch: ModelArch
    gpu: str                   # a GPU or system name (resolve_gpu)
    precision: Precision = Precision()
    engine: Engine = Engine()

    @property
    def name(self) -> str:
        """The profile's name: model@gpu, with the precision and engine where not default."""
        gpu = resolve_gpu(self.gpu)[0]
        tags = [t for t in (self.precision.tag, self.engine.name) if t not in ("bf16", "vllm")]
        return f"{self.arch.name}@{gpu}" + "".join(f"+{t}" for t in tags)

    def key(self) -> str:
        from hastune import __version__
        from hastune.calibrate.aic import package_version

        arch = replace(self.arch, source="")   # where the config lies does not matter
        parts = [repr(arch), resolve_gpu(self.gpu)[0], self.precision.tag, self.engine.name,
                 self.engine.version or "", package_version(), __version__, code_fingerprint()]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]

    def filename(self) -> str:
        gpu = resolve_gpu(self.gpu)[0]
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.arch.name)
        return f"{safe}@{gpu}.{self.precision.tag}.{self.engine.name}.{self.key()}.yaml"


def build(req: Request, file: str | Path | None = None, fields: tuple[str, str] = (
        "model", "cluster.gpu")) -> tuple[dict, str]:
    """(profile mapping, YAML text) for `req`; InputError where it cannot be built: the
    kernels extra missing, a GPU, engine or precision without tables, a model that fits no
    TP degree of one node. `fields`: what the errors call the model and the GPU."""
    from hastune.calibrate.aic import package_dir
    from hastune.calibrate.aic_profiles import aic_source, build_profile
    from hastune.calibrate.build import render

    model_field, gpu_field = fields
    name, arg = resolve_gpu(req.gpu, file, gpu_field)
    try:
        package_dir()
    except InputError as exc:
        raise InputError(file, model_field, f"no shipped profile for {req.arch.name} on {name} "
                         f"({req.precision.label}, {req.engine.name}); building one needs "
                         f"the kernel tables, but {exc.problem}", exc.fix) from None
    prec = req.precision.model_dump()
    try:
        data = build_profile(req.arch, arg, prec, engine=req.engine.name,
                             version=req.engine.version)
    except ValueError as exc:
        raise _no_fit(req, name, arg, str(exc), file, model_field) from None
    except InputError as exc:
        where = ": ".join(x for x in (exc.file, exc.field) if x)
        raise InputError(file, model_field, f"no profile for {req.arch.name} on {name} "
                         f"({req.precision.label}, {req.engine.name} kernels): "
                         f"{where + ': ' if where else ''}{exc.problem}", exc.fix) from None
    data["name"], data["gpu"] = req.name, name
    origin = aic_source(prec, req.engine.name, req.engine.version).origin
    return data, render(data, origin=origin)


def _no_fit(req: Request, name: str, arg: str, why: str, file, field: str) -> InputError:
    """Why a model fits no TP degree (or the builder's own reason), and what would."""
    from hastune.calibrate.aic_profiles import aic_source, gpu_spec
    from hastune.calibrate.build import TP_DEGREES, UTILISATION

    if "does not fit" not in why:
        return InputError(file, field, f"cannot build a profile for {req.arch.name} on "
                          f"{name}: {why}", "check the model config")
    src = aic_source(req.precision.model_dump(), req.engine.name, req.engine.version)

    def memory(gpu: str) -> float:
        spec = gpu_spec(gpu, src)
        return spec.mem_bytes or src.hardware(spec.system).mem_bytes

    mem, tp = memory(arg), max(TP_DEGREES)
    need = req.arch.llm.weight_bytes(1, req.precision.weights)
    if req.arch.encoder is not None:
        need += req.arch.encoder.params * 2
    fix = []
    if req.precision.weights == "bf16":
        fix.append("fp8 weights (precision: fp8 in a recipe, --precision fp8 to profile "
                   "build; about half the bytes)")
    bigger = [g for g, s in (("h200-141gb", "h200_sxm"), ("b200-180gb", "b200_sxm"),
                             ("b300-288gb", "b300_sxm"))
              if memory(s) > mem and tp * memory(s) * UTILISATION > 1.05 * need]
    if bigger:
        fix.append(f"a GPU with more memory ({', '.join(bigger)})")
    return InputError(file, field, f"{req.arch.name} does not fit on {name} at any TP degree "
                      f"of one node ({', '.join(map(str, TP_DEGREES))}): its "
                      f"{req.precision.weights} weights are {need / 1e9:,.0f} GB, and {tp} x "
                      f"{mem / 2**30:.0f} GiB have {tp * mem * UTILISATION / 1e9:,.0f} GB usable "
                      f"({UTILISATION:.0%}) for the weights, activations and at least one "
                      "request's KV cache", "use " + ", or ".join(fix or ["a larger GPU"]) +
                      "; profiles cover TP up to 8 within a node")


@dataclass(frozen=True)
class Cached:
    profile: Profile
    path: Path
    built: bool               # built now (else read from the cache)
    seconds: float            # building took


def ensure(req: Request, file: str | Path | None = None, directory: Path | None = None
           ) -> Cached:
    """The cached profile for `req`, built and cached first if there is none (or the cached
    file does not read)."""
    resolve_gpu(req.gpu, file)  # before req.filename(), which names no file
    d = directory or cache_dir()
    path = d / req.filename()
    prof = _read(path)
    if prof is not None:
        return Cached(prof, path, False, 0.0)
    try:
        d.mkdir(parents=True, exist_ok=True)
        lock = open(d / ".lock", "a+")   # one for the folder: builds take seconds
    except OSError as exc:
        raise InputError(d, f"${CACHE_ENV}", f"the profile cache cannot be written "
                         f"({exc.strerror or exc})", f"set {CACHE_ENV} to a writable folder"
                         ) from None
    with lock:
        _lock(lock)
        prof = _read(path)     # another process may have built it while this one waited
        if prof is not None:
            return Cached(prof, path, False, 0.0)
        t0 = time.perf_counter()
        _, text = build(req, file)
        seconds = time.perf_counter() - t0
        write_atomic(path, HEADER_KEY + req.key() + "\n" + text)
    prof = load_profile(path)
    return Cached(prof, path, True, seconds)


def _read(path: Path) -> Profile | None:
    if not path.is_file():
        return None
    try:
        return load_profile(path)
    except InputError:
        return None            # corrupt or stale: rebuilt


def _lock(f) -> None:
    try:
        import fcntl
    except ImportError:        # pragma: no cover - not POSIX: the atomic rename still holds
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
