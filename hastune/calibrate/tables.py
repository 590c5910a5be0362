"""The measured kernel tables (hastune/data/calibration/kernels/<system>/) and their hold-out.

Each table is a gzipped CSV of shape columns and `latency_ms` (see the calibration README).
Rows measured more than once are merged (median) before anything else, so a shape can never
sit on both sides of the hold-out. The hold-out is a seeded 20% of each table's rows that no
fit ever sees; `hastune profile check` reports the error on it.
"""

from __future__ import annotations

import csv
import gzip
import os
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from hastune.errors import InputError

ENV_VAR = "HASTUNE_CALIBRATION"
KINDS = ("gemm", "context_attention", "generation_attention", "encoder_attention", "allreduce")
COLUMNS = {
    "gemm": ("m", "n", "k"),
    "context_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"),
    "generation_attention": ("batch_size", "num_heads", "num_key_value_heads", "head_dim",
                             "step"),
    "encoder_attention": ("batch_size", "isl", "num_heads", "head_dim"),
    "allreduce": ("num_gpus", "message_size"),
}
HOLDOUT_FRACTION = 0.2
HOLDOUT_SEED = 0


def default_calibration_dir() -> Path:
    """$HASTUNE_CALIBRATION, else the tables the package ships (hastune/data/calibration)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    from hastune.data import CALIBRATION

    return CALIBRATION


def require_calibration(root: Path | None = None) -> Path:
    """The calibration folder, or an InputError that says how to provide it."""
    root = Path(root) if root is not None else default_calibration_dir()
    if not (root / "kernels").is_dir():
        raise InputError(
            root, "kernels/", "calibration data (measured kernel tables) not found",
            f"put the calibration folder there, or point {ENV_VAR} (or --calibration) at the "
            "folder that holds kernels/<system>/")
    return root


@dataclass(frozen=True)
class KernelTable:
    """One measured table: shapes (rows × columns) and latency in seconds. Rows past the
    first `measured` (None: every row) were built from measured ones (a rack's collectives
    past its tables' GPU counts, hastune.calibrate.aic_fabric): they are fitted on, never
    held out, and do not move which measured rows are."""

    system: str
    kind: str
    columns: tuple[str, ...]
    shapes: np.ndarray
    latency_s: np.ndarray
    measured: int | None = None

    def __len__(self) -> int:
        return len(self.latency_s)

    def col(self, name: str) -> np.ndarray:
        return self.shapes[:, self.columns.index(name)]

    def subset(self, mask: np.ndarray) -> KernelTable:
        kept = None if self.measured is None else int(np.count_nonzero(mask[:self.measured]))
        return KernelTable(self.system, self.kind, self.columns, self.shapes[mask],
                           self.latency_s[mask], kept)   # the measured rows still first

    def holdout_mask(self, fraction: float = HOLDOUT_FRACTION,
                     seed: int = HOLDOUT_SEED) -> np.ndarray:
        """True for held-out rows: a fixed share of the measured rows, drawn per (system,
        kind) from `seed`; a built row never."""
        n = len(self) if self.measured is None else self.measured
        salt = zlib.crc32(f"{self.system}/{self.kind}".encode())
        order = np.random.default_rng([seed, salt]).permutation(n)
        mask = np.zeros(len(self), dtype=bool)
        mask[order[: int(round(fraction * n))]] = True
        return mask

    def split(self, fraction: float = HOLDOUT_FRACTION, seed: int = HOLDOUT_SEED
              ) -> tuple[KernelTable, KernelTable]:
        """(fit rows, held-out rows)."""
        mask = self.holdout_mask(fraction, seed)
        return self.subset(~mask), self.subset(mask)


def table_path(root: Path, system: str, kind: str) -> Path:
    return root / "kernels" / system / f"{kind}_bf16.csv.gz"


def has_table(root: Path, system: str, kind: str) -> bool:
    return table_path(root, system, kind).exists()


@lru_cache(maxsize=64)
def _read(path: Path) -> tuple[tuple[str, ...], np.ndarray]:
    with gzip.open(path, "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = tuple(next(reader))
        data = np.array([[float(x) for x in row] for row in reader if row], dtype=float)
    return header, data


def load_table(root: Path, system: str, kind: str) -> KernelTable:
    path = table_path(root, system, kind)
    if not path.exists():
        raise InputError(path, None, f"no {kind} table for {system}",
                         "check the calibration folder (see its README)")
    header, data = _read(path)
    cols = COLUMNS[kind]
    if header[:-1] != cols or header[-1] != "latency_ms":
        raise InputError(path, "header", f"expected columns {', '.join(cols)}, latency_ms",
                         "use the table as shipped in the calibration folder")
    shapes, lat = _merge_duplicates(data[:, :-1], data[:, -1] * 1e-3)
    return KernelTable(system, kind, cols, shapes, lat)


def _merge_duplicates(shapes: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inv = np.unique(shapes, axis=0, return_inverse=True)
    inv = inv.ravel()
    if len(uniq) == len(shapes):
        order = np.lexsort(shapes.T[::-1])
        return shapes[order], lat[order]
    merged = np.array([np.median(lat[inv == i]) for i in range(len(uniq))])
    return uniq, merged


@dataclass(frozen=True)
class Hardware:
    """Nominal specs of a measured system (hardware.yaml)."""

    system: str
    peak_flops: float          # bf16 dense tensor-core FLOP/s
    mem_bw: float              # bytes/s
    mem_bytes: float
    mem_bw_efficiency: float   # the source's empirical factor for memory-bound kernels
    mem_latency_s: float       # its per-kernel constant for memory-bound kernels
    intra_node_bw: float
    measured_with: str


def load_hardware(root: Path, system: str) -> Hardware:
    path = root / "kernels" / system / "hardware.yaml"
    if not path.exists():
        raise InputError(path, None, f"no hardware.yaml for {system}",
                         "check the calibration folder (see its README)")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    gpu, node = data["gpu"], data.get("node", {})
    return Hardware(
        system=system, peak_flops=float(gpu["bfloat16_tc_flops"]), mem_bw=float(gpu["mem_bw"]),
        mem_bytes=float(gpu["mem_capacity"]),
        mem_bw_efficiency=float(gpu.get("mem_bw_empirical_scaling_factor", 0.8)),
        mem_latency_s=float(gpu.get("mem_empirical_constant_latency", 3e-6)),
        intra_node_bw=float(node.get("intra_node_bw", 0.0)),
        measured_with=str(data.get("measured_with", "")))
