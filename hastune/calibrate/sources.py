"""Where the profile builder reads its kernel tables from: one interface, two sources.

- `CsvSource(root)`: the gzipped CSV tables in hastune/data/calibration/kernels/<system>/
  (hastune.calibrate.tables): bf16, vLLM's default kernels. The shipped profiles are built from
  it, and CI's tests use it as their fixture.
- `AicSource(engine, ...)` (hastune.calibrate.aic): the parquet tables that NVIDIA's
  aiconfigurator-core package installs (`pip install 'hastune[kernels]'`): per engine (vLLM,
  SGLang, TensorRT-LLM) and version, GEMM in bf16 and fp8, attention with a bf16 or fp8 KV
  cache, MoE, MLA and NCCL collectives.

hastune.calibrate.device fits its predictors on whatever `as_source(root)` returns; a plain
path means the CSV folder, so every caller that passed a calibration folder still does.
Sources are frozen dataclasses: hashable and equal by their settings, so fitted predictors
are cached per (source, system).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from hastune.calibrate import tables
from hastune.calibrate.tables import Hardware, KernelTable

CSV_DATABASE = "NVIDIA aiconfigurator 0.12.0 performance database (vLLM kernels, bf16)"


class KernelSource(ABC):
    """Measured kernel tables per system, in hastune's shapes (tables.COLUMNS) and seconds."""

    @property
    @abstractmethod
    def origin(self) -> str:
        """Where the tables are, for a profile's header (e.g. 'hastune/data/calibration')."""

    @property
    @abstractmethod
    def database(self) -> str:
        """The database and the kernels it holds, for a profile's `source` line."""

    @abstractmethod
    def systems(self) -> list[str]:
        """The systems this source has tables for."""

    @abstractmethod
    def hardware(self, system: str) -> Hardware:
        """Nominal specs of `system`; `measured_with` says which engine measured it."""

    @abstractmethod
    def has_table(self, system: str, kind: str) -> bool:
        """Whether `system` has a `kind` table (tables.KINDS, or a source's extra kinds)."""

    @abstractmethod
    def table(self, system: str, kind: str) -> KernelTable:
        """The `kind` table of `system`: duplicates merged, latency in seconds; an
        InputError naming what is available when there is none."""


@dataclass(frozen=True)
class CsvSource(KernelSource):
    """The calibration folder's CSV tables (kernels/<system>/<kind>_bf16.csv.gz)."""

    root: Path

    @property
    def origin(self) -> str:
        from hastune.data import CALIBRATION

        here = Path(self.root).resolve()
        return "hastune/data/calibration" if here == CALIBRATION else str(here)

    @property
    def database(self) -> str:
        return CSV_DATABASE

    def systems(self) -> list[str]:
        base = Path(self.root) / "kernels"
        return sorted(p.name for p in base.iterdir() if (p / "hardware.yaml").exists())

    def hardware(self, system: str) -> Hardware:
        return tables.load_hardware(Path(self.root), system)

    def has_table(self, system: str, kind: str) -> bool:
        return tables.has_table(Path(self.root), system, kind)

    def table(self, system: str, kind: str) -> KernelTable:
        return tables.load_table(Path(self.root), system, kind)


def as_source(root: Path | str | KernelSource) -> KernelSource:
    """`root` itself if it is a source, else the CSV folder at that path."""
    if isinstance(root, KernelSource):
        return root
    return CsvSource(Path(root))
