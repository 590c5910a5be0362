"""Kernel tables from NVIDIA's aiconfigurator-core package: `pip install 'hastune[kernels]'`.

The package (Apache-2.0) installs measured kernel latencies per system under
aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/<table>.parquet and each
system's nominal specs in systems/<system>.yaml. `AicSource` reads them as hastune's
KernelTables (hastune.calibrate.sources): the columns of tables.COLUMNS, latency in seconds
(the parquet `latency` column is in milliseconds), duplicates merged (median), rows with no
positive finite latency dropped. Only kernel tables are read: never an end-to-end table.

Selection, per table:
- engine: vllm | sglang | trtllm (NCCL tables are versioned by NCCL, not by the engine);
- version: None (the package's own `current` slot for the system and engine,
  systems/query_versions.yaml, backward-filled from older versions for tables it lacks),
  "newest" (the newest version holding rows), or an exact version;
- dtype: GEMM and MoE by `gemm_dtype` (bf16 | fp8 | fp8_block), attention and MLA by the KV
  cache's `kv_dtype` (bf16 | fp8); encoder attention and all-reduce are bf16;
- kernel (the `kernel_source` lane): `lanes` pins one per kind; else CUDA-graph all-reduce
  (what vLLM and SGLang run decode with), else the lane with the most rows.
Attention rows are full attention (window_size 0); MoE rows by default power-law routing with
alpha 1.2, the package's own default for MoE models (1.01 for DeepSeek's; `distribution`),
their lane chosen per shape, fp8 weights' from fp8, fp8_block and bf16 rows (aic_moe).

With vLLM, bf16, the current version, these are exactly the rows of hastune/data/calibration
(tests/calibrate/test_aic_source.py). The package is imported by neither this module nor
`import hastune`: its directory is located by importlib and pyarrow imported on first read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from hastune.calibrate.aic_fabric import COMM_KINDS, STRETCH, extend, rack, stretch, twin
from hastune.calibrate.aic_moe import MOE_ALSO, moe_lanes
from hastune.calibrate.sources import KernelSource
from hastune.calibrate.tables import COLUMNS, Hardware, KernelTable, _merge_duplicates
from hastune.errors import InputError

PACKAGE, MODULE, PIN = "aiconfigurator-core", "aiconfigurator_core", "0.12.0"
INSTALL_FIX = "pip install 'hastune[kernels]'"
ENGINES = ("vllm", "sglang", "trtllm")
ENGINE_LABEL = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
PKG_DTYPE = {  # role → hastune dtype → the package's value
    "gemm": {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4",
             "mxfp4": "bfloat16", "int4": "bfloat16"},
    # the routed experts' kernels: gpt-oss's MXFP4 experts run as 4-bit weights with bf16
    # activations on every GPU the tables have them for (vLLM's and TensorRT-LLM's w4a16);
    # weight-only int4 groups (Kimi K2.5's) as the tables' int4_wo rows (vLLM, SGLang)
    "moe": {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4",
            "mxfp4": "w4a16_mxfp4", "int4": "int4_wo"},
    "kv": {"bf16": "bfloat16", "fp8": "fp8"},
    # NVFP4 checkpoints (ModelOpt) leave MLA's projections out of the quantization
    # (hf_quant_config.json's exclude_modules: every self_attn projection): bf16 rows
    "mla_gemm": {"bf16": "bfloat16", "fp8": "fp8_block", "fp8_block": "fp8_block",
                 "nvfp4": "bfloat16", "mxfp4": "bfloat16", "int4": "bfloat16"},
    "comm": {"bf16": "half", "fp8": "int8"},
}
GDN_COLUMNS = ("batch_size", "seq_len", "num_k_heads", "head_k_dim", "num_v_heads",
               "head_v_dim", "d_conv")
# the kernels by their kernel_source's start (engines name variants: vLLM's
# chunk_gated_delta_rule_flashinfer); the variant with the most rows is kept, as for any lane
GDN_LANES = {("conv", "context"): "causal_conv1d_fn",
             ("scan", "context"): "chunk_gated_delta_rule",
             ("conv", "generation"): "causal_conv1d_update",
             ("scan", "generation"): "fused_recurrent_gated_delta_rule"}
_MOE_ROWS: dict = {}    # (source, system, path) → moe_lanes' key → lane, filled by _rows
MOE_COLUMNS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
               "moe_ep_size")


@dataclass(frozen=True)
class Spec:
    """Where one kind lives and how its rows are chosen."""

    op: str                                   # data/<system>/<op>/
    file: str                                 # <file>.parquet
    columns: tuple[str, ...]                  # shape columns, in KernelTable order
    dtypes: tuple[tuple[str, str], ...]       # (column, role in PKG_DTYPE, "bf16", "attn")
    fixed: tuple[tuple[str, object], ...] = ()  # column == value, where the column exists
    nccl: bool = False                        # versioned by NCCL, not by the engine
    lane_prefix: str = ""                     # kernel_source starts so (one kernel of a table)


# attention compute: bf16 with a bf16 KV cache; with an fp8 one whatever the lane runs
# (vLLM's FA3 computes in bf16, SGLang's in fp8): then part of the lane
_ATTN = (("kv_cache_dtype", "kv"), ("attn_dtype", "attn"))
_MLA = (("kv_cache_dtype", "kv"), ("mla_dtype", "attn"))
_FULL = (("window_size", 0), ("beam_width", 1))
SPECS: dict[str, Spec] = {
    "gemm": Spec("gemm", "gemm_perf", COLUMNS["gemm"], (("gemm_dtype", "gemm"),)),
    "context_attention": Spec("attention", "context_attention_perf",
                              COLUMNS["context_attention"], _ATTN, _FULL),
    "generation_attention": Spec("attention", "generation_attention_perf",
                                 COLUMNS["generation_attention"], _ATTN, _FULL),
    "encoder_attention": Spec("encoder_attention", "encoder_attention_perf",
                              COLUMNS["encoder_attention"], (("attn_dtype", "bf16"),)),
    "allreduce": Spec("comm", "custom_allreduce_perf", COLUMNS["allreduce"],
                      (("allreduce_dtype", "bf16"),)),
    # extras for MoE / MLA models: fused MoE (all experts of one layer, one GPU's share)
    "moe": Spec("moe", "moe_perf", MOE_COLUMNS, (("moe_dtype", "moe"),),
                (("distribution", "power_law_1.2"),)),
    # MLA attention kernel alone (SGLang, TensorRT-LLM); num_heads per GPU at tp_size
    "context_mla": Spec("mla", "context_mla_perf", ("batch_size", "isl", "num_heads", "tp_size"),
                        _MLA),
    "generation_mla": Spec("mla", "generation_mla_perf",
                           ("batch_size", "num_heads", "step", "tp_size"), _MLA),
    # the whole MLA block of DeepSeek-V3 (projections + attention; vLLM, TensorRT-LLM)
    "mla_context_module": Spec("mla", "mla_context_module_perf",
                               ("batch_size", "isl", "num_heads"),
                               _MLA + (("gemm_type", "mla_gemm"),), (("tp_size", 1),)),
    "mla_generation_module": Spec("mla", "mla_generation_module_perf",
                                  ("batch_size", "num_heads", "step"),
                                  _MLA + (("gemm_type", "mla_gemm"),), (("tp_size", 1),)),
    # Gated DeltaNet (Qwen3.5): the conv and the recurrence, one kernel per table
    **{f"gdn_{k}_{ph}": Spec("linear_attention", "gdn_perf", GDN_COLUMNS, (),
                             (("phase", ph),), lane_prefix=lane)
       for (k, ph), lane in GDN_LANES.items()},
    **{f"nccl_{op}": Spec("comm", "nccl_perf", ("num_gpus", "message_size"),
                          (("nccl_dtype", "comm"),), (("op_name", op),), nccl=True)
       for op in ("all_reduce", "all_gather", "alltoall", "reduce_scatter")},
}


def package_dir() -> Path:
    """The installed aiconfigurator_core directory (not imported), or an InputError."""
    import importlib.util

    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(None, "kernel source", f"{PACKAGE} is not installed (the kernel "
                         "tables of GPUs without a shipped profile come from it)", INSTALL_FIX)
    return Path(next(iter(spec.submodule_search_locations)))


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def _vkey(v: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(v), v)
    except InvalidVersion:
        return (0, None, v)


@lru_cache(maxsize=128)
def _read(path: Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    tbl = pq.read_table(path)
    return {name: tbl.column(name).to_numpy(zero_copy_only=False) for name in tbl.column_names}


@lru_cache(maxsize=32)
def _yaml(path: Path) -> dict:
    from hastune.yamlio import read_yaml_mapping

    return read_yaml_mapping(path, f"{PACKAGE} system file")


@dataclass(frozen=True)
class AicSource(KernelSource):
    """aiconfigurator-core's tables for one engine, version policy and precision."""

    engine: str = "vllm"
    version: str | None = None        # None: the package's current; "newest"; or exact
    gemm_dtype: str = "bf16"          # weights: bf16 | fp8 | fp8_block | nvfp4 | mxfp4 | int4
    kv_dtype: str = "bf16"            # KV cache (attention, MLA): bf16 | fp8
    comm_dtype: str = "bf16"          # NCCL tables: bf16 (half) | fp8 (int8)
    nccl_version: str | None = None   # None: the system yaml's nccl_version, else newest
    distribution: str = "power_law_1.2"   # MoE routing: power_law_1.2 | power_law_1.01 | balanced
    lanes: tuple[tuple[str, str], ...] = ()   # (kind, kernel_source) pins

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise InputError(None, "engine", f"unknown engine {self.engine!r}",
                             f"use one of {', '.join(ENGINES)}")
        for role, value in (("gemm", self.gemm_dtype), ("kv", self.kv_dtype),
                            ("comm", self.comm_dtype)):
            if value not in PKG_DTYPE[role]:
                raise InputError(None, f"{role} dtype", f"unknown dtype {value!r}",
                                 f"use one of {', '.join(PKG_DTYPE[role])}")

    # --- KernelSource ---------------------------------------------------------------------
    @property
    def origin(self) -> str:
        return f"{PACKAGE} {package_version()} ({self.engine})"

    @property
    def database(self) -> str:
        return (f"NVIDIA {PACKAGE} {package_version()} performance database "
                f"({ENGINE_LABEL[self.engine]} kernels; GEMM {self.gemm_dtype}, KV cache "
                f"{self.kv_dtype}), read from the installed package")

    def systems(self) -> list[str]:
        root = package_dir() / "systems"
        return sorted(p.stem for p in root.glob("*.yaml")
                      if (root / "data" / p.stem / "gemm").is_dir())

    def hardware(self, system: str) -> Hardware:
        data = _yaml(self._system_yaml(system))
        gpu, node = data["gpu"], data.get("node", {})
        versions = {k: self.resolve(system, k)[0] for k in ("gemm", "context_attention",
                                                            "allreduce")
                    if self.has_table(system, k)}
        main = versions.get("gemm", "")
        others = ", ".join(f"{k} {v}" for k, v in versions.items() if v != main)
        return Hardware(
            system=system, peak_flops=float(gpu["bfloat16_tc_flops"]),
            mem_bw=float(gpu["mem_bw"]), mem_bytes=float(gpu["mem_capacity"]),
            mem_bw_efficiency=float(gpu.get("mem_bw_empirical_scaling_factor", 0.8)),
            mem_latency_s=float(gpu.get("mem_empirical_constant_latency", 3e-6)),
            intra_node_bw=float(node.get("intra_node_bw", 0.0)),
            measured_with=f"{self.engine} {main}" + (f" ({others})" if others else ""))

    def has_table(self, system: str, kind: str) -> bool:
        """Whether the engine measured `kind` on `system` at all; a table without this
        source's dtype counts (table() then says which dtypes it has)."""
        return bool(self.versions(system, kind))

    def table(self, system: str, kind: str) -> KernelTable:
        return _table(self, system, kind)

    def moe_rows(self, system: str) -> dict[tuple[int, ...], str]:
        """Per shape key of the moe table, the lane its rows are from ("kernel_source",
        "|moe_dtype" appended where dtypes competed: fp8 weights, aic_moe)."""
        self.table(system, "moe")
        return _MOE_ROWS.get((self, system, str(self.resolve(system, "moe")[1])), {})

    # --- selection ------------------------------------------------------------------------
    def versions(self, system: str, kind: str) -> list[str]:
        """Versions (oldest first) whose folder holds this kind's parquet file."""
        spec = self._spec(kind)
        base = self._data(system) / spec.op / ("nccl" if spec.nccl else self.engine)
        found = [p.parent.name for p in base.glob(f"*/{spec.file}.parquet")
                 if not spec.lane_prefix or _has_lane(p, spec.lane_prefix)]
        return sorted(found, key=_vkey)

    def resolve(self, system: str, kind: str) -> tuple[str, Path]:
        """(version, parquet path) of `kind` on `system`, or an InputError listing what
        there is."""
        spec = self._spec(kind)
        have = self.versions(system, kind)
        base = self._data(system) / spec.op / ("nccl" if spec.nccl else self.engine)
        if not have:
            engines = [e for e in ENGINES if e != self.engine and any(
                (self._data(system) / spec.op / e).glob(f"*/{spec.file}.parquet"))]
            raise InputError(base, kind, f"{system} has no {kind} table for {self.engine}",
                             (f"engines that have one: {', '.join(engines)}" if engines
                              else f"no engine has one on {system}") +
                             f"; kinds {self.engine} has there: "
                             f"{', '.join(self.kinds(system)) or 'none'}")
        pinned = self.nccl_version if spec.nccl else self.version
        if pinned not in (None, "newest"):
            if pinned not in have:
                raise InputError(base, "version", f"no {kind} table for {self.engine} "
                                 f"{pinned} on {system}", f"use one of {', '.join(have)}")
            candidates = [pinned]
        else:
            cap = None if pinned == "newest" else self._default_cap(system, spec)
            candidates = [v for v in reversed(have) if cap is None
                          or _vkey(v) <= _vkey(cap)] or list(reversed(have))
        for v in candidates:
            path = base / v / f"{spec.file}.parquet"
            if len(self._rows(path, kind, system, v, strict=False)[1]):
                return v, path
        v = candidates[0]
        self._rows(base / v / f"{spec.file}.parquet", kind, system, v, strict=True)
        raise InputError(base / v, kind, f"{system}'s {kind} table ({self.engine} {v}) has no "
                         "row with a positive latency", "use another version or engine")

    def fabric_twin(self, system: str) -> str | None:
        """The 8-GPU board whose collectives extend `system`'s past its node
        (hastune.calibrate.aic_fabric), or None."""
        return _twin(system)

    def derived_collectives(self, system: str) -> str | None:
        """What a rack-scale system's collectives past its tables rest on, for the profile's
        record; None where nothing is derived."""
        other = _twin(system)
        most = rack(_yaml(self._system_yaml(system)))
        built = [n for n in STRETCH if n <= most]
        out = []
        if other is not None:
            out.append(f"all-reduce, all-gather, all-to-all and reduce-scatter past {system}'s "
                       f"measured GPU counts: {other}'s times on as many GPUs, scaled by "
                       f"{system} / {other} at the most GPUs both measured")
        if built:
            out.append(f"on {' and '.join(map(str, built))} GPUs where no table measured "
                       "them: the time on the most GPUs measured times the bus factor "
                       "(n - 1) / n over theirs")
        return "; ".join(out) + " (hastune.calibrate.aic_fabric)" if out else None

    def built_counts(self, system: str, kind: str) -> list[int]:
        """The GPU counts of `kind` on `system` that no table measured, built by the bus
        factor (hastune.calibrate.aic_fabric.stretch)."""
        have = {int(n) for n in _with_twin(self, system, kind).col("num_gpus")}
        return sorted({int(n) for n in _table(self, system, kind).col("num_gpus")} - have)

    def kinds(self, system: str) -> list[str]:
        return [k for k in SPECS if self.versions(system, k)]

    def _default_cap(self, system: str, spec: Spec) -> str | None:
        """The newest version the package itself queries by default."""
        root = package_dir() / "systems"
        if spec.nccl:
            return str(_yaml(self._system_yaml(system)).get("misc", {}).get("nccl_version")
                       or "") or None
        path = root / "query_versions.yaml"
        if not path.exists():
            return None
        doc = _yaml(path)
        slot = (doc.get("overrides", {}).get(system, {}).get(self.engine)
                or doc.get("defaults", {}).get(self.engine) or {})
        return slot.get("current")

    def _rows(self, path: Path, kind: str, system: str, version: str, strict: bool
              ) -> tuple[np.ndarray, np.ndarray]:
        spec, data = SPECS[kind], _read(path)
        mask = np.ones(len(data["latency"]), dtype=bool)
        lane_of = data["kernel_source"].astype(str)
        for col, role in spec.dtypes:
            if col not in data:
                continue
            if role == "attn" and self.kv_dtype != "bf16":
                lane_of = np.char.add(np.char.add(lane_of, "|"), data[col].astype(str))
                continue
            want = "bfloat16" if role in ("bf16", "attn") else PKG_DTYPE[role][self._dtype(role)]
            wants = (want,) + (MOE_ALSO.get(want, ()) if kind == "moe" else ())
            sel = np.isin(data[col], wants)
            if len(wants) > 1:      # the dtype joins the lane: chosen per shape (_moe_lanes)
                lane_of = np.char.add(np.char.add(lane_of, "|"), data[col].astype(str))
            if strict and not (mask & sel).any():
                have = sorted({_hastune_dtype(role, x) for x in data[col][mask]})
                why = ""
                if self._dtype(role) == "nvfp4" and "nvfp4" not in have:
                    why = (f": NVFP4 needs FP4 tensor cores (Blackwell: b200_sxm, gb200, ...), "
                           f"which {system} has not")
                raise InputError(path, col, f"no {self._dtype(role)} rows in {system}'s "
                                 f"{kind} table ({self.engine} {version}){why}",
                                 f"use one of {', '.join(have)}, or another engine/version")
            mask &= sel
        fixed = dict(spec.fixed)
        if kind == "moe":
            fixed["distribution"] = self.distribution
        for col, value in fixed.items():
            if col not in data:
                continue
            sel = data[col] == value
            if strict and not (mask & sel).any():
                have = ", ".join(sorted(map(str, set(data[col][mask]))))
                raise InputError(path, col, f"no {col} = {value} rows in {system}'s {kind} "
                                 f"table ({self.engine} {version})",
                                 f"it has {have}" + (" (AicSource(distribution=...))"
                                                     if col == "distribution" else ""))
            mask &= sel
        if spec.lane_prefix:
            sel = np.char.startswith(data["kernel_source"].astype(str), spec.lane_prefix)
            if strict and not (mask & sel).any():
                raise InputError(path, "kernel_source", f"no {spec.lane_prefix}* rows in "
                                 f"{system}'s {kind} table ({self.engine} {version})",
                                 f"it has {', '.join(sorted(set(lane_of[mask])))}")
            mask &= sel
        lat = np.asarray(data["latency"], dtype=float)
        mask &= np.isfinite(lat) & (lat > 0)
        allc = np.column_stack([np.asarray(data[c], dtype=float) for c in spec.columns])
        if kind == "moe" and kind not in dict(self.lanes):
            keep, _MOE_ROWS[(self, system, str(path))] = moe_lanes(allc, lat, lane_of, mask)
            mask &= keep
        else:
            lane = self._lane(kind, lane_of[mask], path, strict)
            if lane is not None:
                mask &= lane_of == lane
        shapes = allc[mask]
        return shapes, lat[mask] * 1e-3

    def _lane(self, kind: str, lanes: np.ndarray, path: Path, strict: bool) -> str | None:
        """The lane (kernel_source, with the compute dtype where that is free) to keep."""
        names, counts = np.unique(lanes, return_counts=True)
        if len(names) == 0:
            return None
        pins = dict(self.lanes)
        if kind in pins:
            ok = [n.split("|")[0] == pins[kind] for n in names]
            if not any(ok):
                if strict:
                    raise InputError(path, "kernel_source", f"no {pins[kind]!r} rows for "
                                     f"{kind}", f"use one of {', '.join(names)}")
                return pins[kind]
            names, counts = names[ok], counts[ok]
        elif kind == "allreduce" and any("graph" in n for n in names):
            graph = ["graph" in n for n in names]
            names, counts = names[graph], counts[graph]
        return str(names[int(np.argmax(counts))])

    def _dtype(self, role: str) -> str:
        return {"gemm": self.gemm_dtype, "mla_gemm": self.gemm_dtype, "moe": self.gemm_dtype,
                "kv": self.kv_dtype, "comm": self.comm_dtype}[role]

    def _spec(self, kind: str) -> Spec:
        if kind not in SPECS:
            raise InputError(None, "kind", f"unknown kernel table kind {kind!r}",
                             f"use one of {', '.join(SPECS)}")
        return SPECS[kind]

    def _system_yaml(self, system: str) -> Path:
        self._data(system)
        return package_dir() / "systems" / f"{system}.yaml"

    def _data(self, system: str) -> Path:
        path = package_dir() / "systems" / "data" / system
        if not (path / "gemm").is_dir() or not (path.parent.parent / f"{system}.yaml").exists():
            raise InputError(path, "system", f"{PACKAGE} has no kernel tables for {system!r}",
                             f"use one of {', '.join(self.systems())}")
        return path


@lru_cache(maxsize=16)
def _twin(system: str) -> str | None:
    root = package_dir() / "systems"
    files = {p.stem: _yaml(p) for p in sorted(root.glob("*.yaml"))
             if (root / "data" / p.stem / "gemm").is_dir()}
    return twin(files, system)


def _has_lane(path: Path, prefix: str) -> bool:
    """Whether a table holds rows of the kernel its kind names (a table of several kernels,
    like gdn_perf, may lack one: SGLang's A100 one has no recurrence rows)."""
    return bool(np.char.startswith(_read(path)["kernel_source"].astype(str), prefix).any())


@lru_cache(maxsize=256)
def _table(src: AicSource, system: str, kind: str) -> KernelTable:
    t = _with_twin(src, system, kind)
    if kind not in COMM_KINDS or not len(t):
        return t
    # a rack's counts past any table's: the bus factor (hastune.calibrate.aic_fabric)
    shapes, lat, added = stretch(t.shapes, t.latency_s, rack(_yaml(src._system_yaml(system))))
    if not added:
        return t
    return KernelTable(system, kind, t.columns, shapes, lat,
                       len(t) if t.measured is None else t.measured)


@lru_cache(maxsize=256)
def _with_twin(src: AicSource, system: str, kind: str) -> KernelTable:
    """`kind`'s table on `system` as measured, a rack-scale system's collectives with its
    fabric twin's larger counts."""
    version, path = src.resolve(system, kind)
    shapes, lat = src._rows(path, kind, system, version, strict=True)
    shapes, lat = _merge_duplicates(shapes, lat)
    own = len(lat)   # the rows measured on this system; a twin's come after
    other = src.fabric_twin(system) if kind in COMM_KINDS else None
    if other is not None and src.has_table(other, kind):  # a rack-scale system: its twin's
        try:                                              # larger GPU counts
            theirs = _with_twin(src, other, kind)
        except InputError:  # the twin lacks this source's dtype or a positive row
            pass
        else:
            shapes, lat, _ = extend(shapes, lat, theirs.shapes, theirs.latency_s,
                                    rack(_yaml(src._system_yaml(system))))
    return KernelTable(system, kind, SPECS[kind].columns, shapes, lat,
                       own if len(lat) > own else None)


def _hastune_dtype(role: str, value: str) -> str:
    if role == "bf16":
        return "bf16"
    back: dict[str, str] = {}
    for k, v in PKG_DTYPE[role].items():
        back.setdefault(v, k)  # the first hastune name of a package value (bf16's, not nvfp4's)
    return back.get(str(value), str(value))
