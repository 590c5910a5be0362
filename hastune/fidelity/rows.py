"""Measured end-to-end runs (the silicon CSV format of hastune/data/calibration/e2e/) as cases
the simulator can run: one aggregated engine instance (tp GPUs), `batch_size` closed-loop
clients, every request exactly `isl` prompt and `osl` output tokens."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from hastune.errors import InputError

REQUIRED = ("backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms")
MAX_BYTES = 64 * 2**20

# the kernel database's systems → hastune GPUs
SYSTEMS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200-141gb", "a100_sxm": "a100-80gb",
           "b200_sxm": "b200-180gb", "l40s": "l40s-48gb"}
# Hugging Face names → the model configs shipped in examples/models
MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
          "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
          "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b"}
QUANT = {"": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8"}


@dataclass(frozen=True)
class Case:
    """One measured run."""

    id: str
    engine: str
    version: str
    model: str          # the HF name in the file
    gpu: str            # hastune GPU
    weights: str        # bf16 | fp8 (fp8_block runs as fp8: the tables time fp8 GEMMs)
    isl: int
    osl: int
    clients: int
    tp: int
    ttft_ms: float
    tpot_ms: float
    line: int

    @property
    def group(self) -> tuple[str, str]:
        """What one set of engine terms is fitted on: (engine, GPU)."""
        return (self.engine, self.gpu)

    @property
    def shape(self) -> str:
        """The configuration a cross-validation fold leaves out whole (isl × osl)."""
        return f"{self.isl}x{self.osl}"


def _num(row: dict, key: str, path: Path, line: int, integer: bool = False) -> float:
    raw = (row.get(key) or "").strip()
    try:
        v = float(raw)
    except ValueError:
        raise InputError(path, f"line {line}: {key}", f"{raw!r} is not a number",
                         "give a number (the file's own format: silicon_llama31.csv)") from None
    if not math.isfinite(v) or v <= 0 or (integer and v != int(v)):
        raise InputError(path, f"line {line}: {key}", f"{raw!r} is not a positive "
                         + ("whole number" if integer else "number"), "fix the row or drop it")
    return v


def _rows(path: str | Path):
    """(path, [(line, row)]) of a measurements file after the checks of the file itself:
    it exists, is not too large, has the required columns."""
    p = Path(path)
    if not p.is_file():
        raise InputError(p, None, "no such measurements file", "give the path of a CSV in the "
                         "silicon format (e.g. hastune/data/calibration/e2e/silicon_llama31.csv)")
    if p.stat().st_size > MAX_BYTES:
        raise InputError(p, None, f"larger than {MAX_BYTES >> 20} MiB", "split the file")
    with p.open(newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(p, ", ".join(missing), "missing column(s)", "give a CSV in the "
                             "silicon format, header " + ",".join(REQUIRED))
        return p, list(enumerate(reader, start=2))


def read_cases(path: str | Path) -> list[Case]:
    """The file's aggregated runs; InputError naming the line and column of anything wrong."""
    p, rows = _rows(path)
    out = [_case(row, p, line) for line, row in rows
           if (row.get("mode") or "").strip() == "agg"]  # disaggregated rows: not one instance
    if not out:
        raise InputError(p, "mode", "no aggregated (mode agg) rows", "give aggregated runs")
    return out


ENGINES = ("vllm", "sglang", "trtllm")  # a row's `backend`


def _case(row: dict, p: Path, line: int) -> Case:
    eng = (row["backend"] or "").strip()
    if eng not in ENGINES:
        raise InputError(p, f"line {line}: backend", f"unknown engine {eng!r}",
                         f"use one of {', '.join(ENGINES)}")
    system = (row["system"] or "").strip()
    if system not in SYSTEMS:
        raise InputError(p, f"line {line}: system", f"unknown system {system!r}",
                         f"use one of {', '.join(SYSTEMS)}")
    quant = (row.get("gemm_quant_mode") or "").strip()
    if quant not in QUANT:
        raise InputError(p, f"line {line}: gemm_quant_mode", f"unknown {quant!r}",
                         f"use one of {', '.join(k or '(empty)' for k in QUANT)}")
    pp = (row.get("pp_size") or "1").strip() or "1"
    if float(pp) != 1:
        raise InputError(p, f"line {line}: pp_size", "pipeline parallel runs are not "
                         "modelled here", "drop the row")
    return Case(id=(row.get("id") or f"line{line}").strip(), engine=eng,
                version=(row.get("backend_version") or "").strip(),
                model=(row["model_path"] or "").strip(), gpu=SYSTEMS[system],
                weights=QUANT[quant], isl=int(_num(row, "isl", p, line, True)),
                osl=int(_num(row, "osl", p, line, True)),
                clients=int(_num(row, "batch_size", p, line, True)),
                tp=int(_num(row, "tp_size", p, line, True)),
                ttft_ms=_num(row, "silicon_ttft_ms", p, line),
                tpot_ms=_num(row, "silicon_tpot_ms", p, line), line=line)


def model_dir(name: str, extra: dict[str, str], path: Path) -> str:
    """The config of the file's model `name`: `--model NAME=DIR` first, then the configs
    shipped in examples/models, then aiconfigurator-core's packaged model configs (its
    model_configs/<org>--<name>_config.json; the `kernels` extra)."""
    if name in extra:
        return extra[name]
    if name in MODELS:
        root = Path(__file__).resolve().parent.parent.parent / "examples" / "models"
        return str(root / MODELS[name])
    packaged = aic_model_config(name)
    if packaged is not None:
        return str(packaged)
    raise InputError(path, "model_path", f"no model config for {name!r}",
                     f"pass --model '{name}=DIR' (a folder holding its config.json)")


def aic_model_config(name: str) -> Path | None:
    """aiconfigurator-core's packaged config.json of Hugging Face model `name`, or None (not
    installed, or not packaged). Only its model_configs folder is read."""
    import importlib.util

    if "/" not in name or ".." in name:
        return None
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    org, _, model = name.partition("/")
    p = Path(list(spec.submodule_search_locations)[0]) / "model_configs" / \
        f"{org}--{model}_config.json"
    return p if p.is_file() else None


@dataclass(frozen=True)
class Row:
    """One row of a measurements file as `fidelity --shipped` reads it: the case it stands
    for, or why it cannot be simulated (`reason`)."""

    id: str
    engine: str
    model: str
    system: str
    mode: str
    ttft_ms: float
    tpot_ms: float
    line: int
    case: Case | None = None
    reason: str | None = None


def read_rows(path: str | Path) -> list[Row]:
    """Every row of the file, each a case or the reason it is not one (a disaggregated run, an
    unknown system or precision, a bad number): nothing dropped. The file itself (missing,
    too large, columns missing) is refused as in `read_cases`."""
    p, rows = _rows(path)
    out = []
    for line, row in rows:
        cell = {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}
        base = dict(id=cell.get("id") or f"line{line}", engine=cell.get("backend", ""),
                    model=cell.get("model_path", ""), system=cell.get("system", ""),
                    mode=cell.get("mode", ""), ttft_ms=_maybe(cell.get("silicon_ttft_ms")),
                    tpot_ms=_maybe(cell.get("silicon_tpot_ms")), line=line)
        if base["mode"] != "agg":
            out.append(Row(**base, reason=f"mode {base['mode'] or '(empty)'}: a "
                           "disaggregated run (prefill and decode workers) is not "
                           "simulated by fidelity yet"))
            continue
        try:
            out.append(Row(**base, case=_case(row, p, line)))
        except InputError as exc:
            out.append(Row(**base, reason=f"{exc.field}: {exc.problem}"))
    return out


def _maybe(raw: str | None) -> float:
    """A cell as a number, nan when it is not one."""
    try:
        return float(raw or "")
    except ValueError:
        return float("nan")
