"""Measured end-to-end runs (the silicon CSV format of hastune/data/calibration/e2e/) as cases
the simulator can run: one aggregated engine instance (tp GPUs), `batch_size` closed-loop
clients, every request exactly `isl` prompt and `osl` output tokens; or (`read_rows`) a
disaggregated run as a `fudg` deployment (`Pools`: prefill workers × TP, decode workers × TP),
its clients `decode_batch_size` per decode worker and attention-DP rank."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from hastune.errors import InputError
from hastune.fidelity import inferencex

REQUIRED = ("backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms")
MAX_BYTES = 64 * 2**20

# the kernel database's systems → hastune GPUs
SYSTEMS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200-141gb", "a100_sxm": "a100-80gb",
           "b200_sxm": "b200-180gb", "gb200": "gb200-186gb", "l40s": "l40s-48gb"}
# Hugging Face names → the model configs shipped in examples/models
MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
          "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
          "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b"}
QUANT = {"": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4",
         "int4_wo": "int4"}


@dataclass(frozen=True)
class Pools:
    """A disaggregated run's two pools as fudg runs them: `*_workers` instances of `*_tp` GPUs
    each, a pool's MoE experts split over its TP group (`*_ep` False: the row's MoE TP = TP,
    EP 1) or whole on each GPU of it (True: EP = TP, MoE TP 1); or, `*_dp` > 1, each worker
    that many attention-DP ranks at TP 1 with the experts whole over all of them (EP = DP)."""

    prefill_workers: int
    prefill_tp: int
    prefill_ep: bool
    decode_workers: int
    decode_tp: int
    decode_ep: bool
    prefill_dp: int = 1
    decode_dp: int = 1

    @property
    def gpus(self) -> int:
        return (self.prefill_workers * self.prefill_tp * self.prefill_dp
                + self.decode_workers * self.decode_tp * self.decode_dp)


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
    pools: Pools | None = None  # a disaggregated run's pools (tp: its decode workers' TP)
    ep: bool = False    # an aggregated MoE run's experts whole on each GPU (MoE EP = TP)
    dp: int = 1         # an aggregated run's attention-DP ranks (TP `tp` each; experts over all)
    # silicon_data_source: where the run came from ("" in a file without the column); the
    # benchmark-client rules key on it (hastune.fidelity.harness)
    source: str = ""
    # a disaggregated run's decode workers' draft tokens a step (multi-token prediction;
    # hastune.speculative): 0 without
    nextn: int = 0

    @property
    def gpus(self) -> int:
        """The GPUs the run used: its TP group (× its attention-DP ranks), or every worker of
        both pools."""
        return self.tp * self.dp if self.pools is None else self.pools.gpus

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
    out = []
    for line, row in rows:
        if (row.get("mode") or "").strip() != "agg":  # disaggregated rows: not one instance
            continue
        try:
            out.append(_case(row, p, line))
        except Unmodelled as exc:
            raise InputError(p, f"line {line}: attention_dp_size, moe_tp_size, moe_ep_size",
                             str(exc), "drop the row, or score the file with --shipped, "
                             "which reports such rows as unsupported") from None
    if not out:
        raise InputError(p, "mode", "no aggregated (mode agg) rows", "give aggregated runs")
    return out


ENGINES = ("vllm", "sglang", "trtllm")  # a row's `backend`


def _case(row: dict, p: Path, line: int) -> Case:
    fields = _common(row, p, line)
    pp = (row.get("pp_size") or "1").strip() or "1"
    if float(pp) != 1:
        raise InputError(p, f"line {line}: pp_size", "pipeline parallel runs are not "
                         "modelled here", "drop the row")
    tp, ep, dp = _agg_layout(row, int(_num(row, "tp_size", p, line, True)), p, line)
    return Case(**fields, clients=_agg_clients(row, p, line), tp=tp, ep=ep, dp=dp)


def _agg_clients(row: dict, p: Path, line: int) -> int:
    """An aggregated run's closed-loop clients: batch_size per attention-DP rank, as the
    file's columns give it (150 of the 151 rows with attention-DP have batch_size ×
    attention_dp_size = the silicon_concurrency their source states; 2,619 of the 2,632
    without it batch_size = that concurrency, the other 13 batch_size × tp_size: runs whose
    attention-DP the columns do not record, simulated as one rank's load on the TP group)."""
    dp = (row.get("attention_dp_size") or "").strip()
    return int(_num(row, "batch_size", p, line, True)) * (
        int(_num(row, "attention_dp_size", p, line, True)) if dp else 1)


def _agg_layout(row: dict, tp: int, p: Path, line: int) -> tuple[int, bool, int]:
    """An aggregated run's (TP, experts whole per GPU, attention-DP ranks) as nodg runs it
    (`_experts_whole`; attention-DP: that many replicas at TP 1, the experts over all their
    GPUs); Unmodelled for a mixed MoE TP × EP and for attention-DP with TP or MoE TP inside.

    Where the columns give one pair twice — MoE TP = EP > 1 (tp_size 64, MoE TP 8 × EP 8;
    16, 4 × 4) or tp_size = attention-DP (4 × 4, MoE EP 16) — with the pair's product the run's
    GPUs, the row is read as the deployment its name gives ("…_tp8_ep8_…", "…_tp4_ep4_…"): 8
    (4) GPUs with whole experts on each, by attention-DP ranks where the row has them. Such a
    run measures what the same model does on 8 GPUs, not 64 (docs/fidelity.md, "Reading the
    rows"): the columns were filled from a (TP, EP) pair as if both were degrees of one group."""
    cell = {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}

    def num(k: str) -> int:
        return int(_num(row, k, p, line, True)) if cell.get(k) else 1

    mtp, mep, dp = num("moe_tp_size"), num("moe_ep_size"), num("attention_dp_size")
    gpus = tp * dp
    pair = (mtp if mtp == mep > 1 and mtp * mep == gpus
            else tp if dp == tp > 1 and mtp * mep == gpus else 0)
    if pair:  # one (TP, EP) pair, twice
        return (pair, True, 1) if dp == 1 else (1, True, pair)
    if dp == 1:
        return tp, _experts_whole("agg", "", tp, mtp, mep), 1
    if tp != 1 or mtp != 1 or mep != gpus:
        raise Unmodelled(f"agg: attention-DP not modelled (attention-DP {dp} × TP {tp}, MoE TP "
                         f"{mtp} × EP {mep}; nodg runs attention-DP ranks at TP 1 with whole "
                         "experts over all their GPUs)")
    return 1, True, dp


def _ranks(s: str, v: dict[str, int]) -> int:
    """A disaggregated pool's attention-DP ranks per worker (1: none): ranks at TP 1 with the
    experts whole over all of them (MoE TP 1, EP = the ranks); Unmodelled for any other
    attention-DP layout."""
    n = v["attention_dp_size"]
    if n == 1:
        return 1
    if v["tp_size"] == 1 and v["moe_tp_size"] == 1 and v["moe_ep_size"] == n:
        return n
    raise Unmodelled(f"disagg: attention-DP not modelled ({s} attention-DP {n} × TP "
                     f"{v['tp_size']}, MoE TP {v['moe_tp_size']} × EP {v['moe_ep_size']}; fudg "
                     "runs attention-DP ranks at TP 1 with whole experts over all of them)")


def _experts_whole(mode: str, at: str, tp: int, mtp: int, mep: int) -> bool:
    """A TP group's MoE layout as nodg (`mode` agg) or fudg (disagg) runs it: experts split
    over the group (MoE EP 1, MoE TP 1 or TP: False) or whole on each of its GPUs (MoE EP =
    TP > 1, MoE TP 1: True); Unmodelled for a mixed MoE TP × EP."""
    if mep == 1 and mtp in (1, tp):
        return False
    if mep == tp and mtp == 1 and tp > 1:
        return True
    sim, group = ("nodg", "an instance's") if mode == "agg" else ("fudg", "a pool's")
    raise Unmodelled(f"{mode}: MoE TP × EP not modelled ({at}MoE TP {mtp} × EP {mep} over TP "
                     f"{tp}; {sim} splits {group} experts over its TP group or holds them "
                     "whole: EP 1 or EP = TP)")


def _common(row: dict, p: Path, line: int) -> dict:
    """What an aggregated and a disaggregated row share: engine, system, precision, model,
    lengths and the measured latencies (InputError naming what is wrong)."""
    eng = (row["backend"] or "").strip()
    if eng not in ENGINES:
        raise InputError(p, f"line {line}: backend", f"unknown engine {eng!r}",
                         f"use one of {', '.join(ENGINES)}")
    system = (row["system"] or "").strip()
    gpu = gpu_of(system)
    if gpu is None:
        raise InputError(p, f"line {line}: system", f"unknown system {system!r}",
                         f"use one of {', '.join(SYSTEMS)} or another system of the kernel "
                         "database (hastune.calibrate.gpus)")
    quant = (row.get("gemm_quant_mode") or "").strip()
    if quant not in QUANT:
        raise InputError(p, f"line {line}: gemm_quant_mode", f"unknown {quant!r}",
                         f"use one of {', '.join(k or '(empty)' for k in QUANT)}")
    return dict(id=(row.get("id") or f"line{line}").strip(), engine=eng,
                version=(row.get("backend_version") or "").strip(),
                model=(row["model_path"] or "").strip(), gpu=gpu,
                weights=QUANT[quant], isl=int(_num(row, "isl", p, line, True)),
                osl=int(_num(row, "osl", p, line, True)),
                ttft_ms=_num(row, "silicon_ttft_ms", p, line),
                tpot_ms=_num(row, "silicon_tpot_ms", p, line), line=line,
                source=(row.get("silicon_data_source") or "").strip())


def gpu_of(system: str) -> str | None:
    """The hastune GPU of a row's `system`: SYSTEMS, else the kernel database's system's
    (hastune.calibrate.gpus: b300_sxm → b300-288gb); None for one neither knows."""
    if system in SYSTEMS:
        return SYSTEMS[system]
    from hastune.calibrate.gpus import canonical_gpu

    found = canonical_gpu(system) if system else None
    return None if found is None else found[0]


class Unmodelled(ValueError):
    """A disaggregated row whose deployment fudg does not model, and why (the reason a row of
    `fidelity --shipped` gets: "disagg: …")."""


_CONCURRENCY = re.compile(r"(?:^|;)\s*silicon_concurrency=(\d+)\s*(?:;|$)")


def _disagg_case(row: dict, p: Path, line: int) -> Case:
    """A disaggregated run as a fudg deployment: InputError for what the file gets wrong (as
    `_case`), Unmodelled for a deployment fudg cannot stand for — worker counts not given,
    attention-DP, MoE TP × EP mixed in a pool, pipeline stages."""
    fields = _common(row, p, line)
    cell = {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}
    side: dict[str, dict[str, int]] = {}
    if cell.get("prefill_num_workers") and cell.get("decode_num_workers"):
        for s in ("prefill", "decode"):
            # workers and TP must be given; an empty PP, attention-DP, MoE TP or EP is 1
            side[s] = {k: int(_num(row, f"{s}_{k}", p, line, True))
                       if cell.get(f"{s}_{k}") or k in ("num_workers", "tp_size") else 1
                       for k in ("num_workers", "tp_size", "pp_size", "attention_dp_size",
                                 "moe_tp_size", "moe_ep_size")}
    elif inferencex.is_inferencex(cell.get("silicon_data_source", "")):
        for s in ("prefill", "decode"):
            _num(row, f"{s}_tp_size", p, line, True)
        try:  # the pools as the config that ran the row lists them
            side = inferencex.deployment(cell)
        except inferencex.NotFound as exc:
            raise Unmodelled(f"disagg: {exc}") from None
    else:
        raise Unmodelled("disagg: no worker counts (prefill_num_workers / decode_num_workers "
                         "empty): the pools' sizes are not known")
    for s, v in side.items():
        if v["pp_size"] != 1:
            raise Unmodelled(f"disagg: pipeline parallel not modelled ({s} PP {v['pp_size']})")
    dp = {s: _ranks(s, v) for s, v in side.items()}
    ep = {s: dp[s] == 1 and _experts_whole("disagg", f"{s} ", v["tp_size"], v["moe_tp_size"],
                                           v["moe_ep_size"]) for s, v in side.items()}
    d = side["decode"]
    if cell.get("decode_batch_size"):  # clients per decode worker and attention-DP rank
        clients = d["num_workers"] * d["attention_dp_size"] * int(
            _num(row, "decode_batch_size", p, line, True))
    else:
        m = _CONCURRENCY.search(cell.get("silicon_data_source", ""))
        if m is None:
            raise InputError(p, f"line {line}: decode_batch_size", "empty, and "
                             "silicon_data_source gives no silicon_concurrency",
                             "give the clients per decode worker")
        clients = int(m.group(1))
    pools = Pools(side["prefill"]["num_workers"], side["prefill"]["tp_size"], ep["prefill"],
                  d["num_workers"], d["tp_size"], ep["decode"], dp["prefill"], dp["decode"])
    return Case(**fields, clients=clients, tp=pools.decode_tp, pools=pools,
                nextn=d.get("nextn", 0))


# A quantized checkpoint's name ends in its format; its architecture is its base model's
QUANT_SUFFIX = re.compile(r"-(?:FP8|NVFP4|FP4|MXFP4|AWQ|GPTQ|INT4|INT8|W4A16|W8A8)$", re.I)


def model_dir(name: str, extra: dict[str, str], path: Path) -> str:
    """The config of the file's model `name`: `--model NAME=DIR` first, then the configs
    shipped in examples/models, then aiconfigurator-core's packaged model configs (its
    model_configs/<org>--<name>_config.json; the `kernels` extra). A name neither holds is
    looked up as its base model (`base_names`: the quantization suffix dropped, the same
    model under another organisation, where exactly one has it): the architecture is the
    base model's, the precision the row's."""
    if name in extra:
        return extra[name]
    for cand in (name, *base_names(name)):
        found = _config_of(cand)
        if found is not None:
            return found
    raise InputError(path, "model_path", f"no model config for {name!r}",
                     f"pass --model '{name}=DIR' (a folder holding its config.json)")


def _config_of(name: str) -> str | None:
    if name in MODELS:
        root = Path(__file__).resolve().parent.parent.parent / "examples" / "models"
        return str(root / MODELS[name])
    packaged = aic_model_config(name)
    return str(packaged) if packaged is not None else None


def base_names(name: str) -> list[str]:
    """The names `name`'s architecture may be found under: without a quantization suffix
    (nvidia/Llama-3.1-8B-Instruct-FP8 → nvidia/Llama-3.1-8B-Instruct), then that model under
    the one other organisation that has it in MODELS or the packaged configs
    (→ meta-llama/Llama-3.1-8B-Instruct; zhipuai/GLM-5 → zai-org/GLM-5)."""
    if "/" not in name or ".." in name:
        return []
    org, _, model = name.partition("/")
    out = []
    base = QUANT_SUFFIX.sub("", model)
    if base != model:
        out.append(f"{org}/{base}")
    for m in dict.fromkeys((model, base)):
        orgs = {k.partition("/")[0] for k in MODELS if k.partition("/")[2] == m}
        orgs |= set(_packaged_orgs(m))
        orgs.discard(org)
        if len(orgs) == 1:
            out.append(f"{orgs.pop()}/{m}")
    return out


def _packaged_orgs(model: str) -> list[str]:
    """The organisations aiconfigurator-core packages a config of `model` under."""
    root = _model_configs()
    if root is None or "/" in model or ".." in model:
        return []
    return [p.name[: -len(f"--{model}_config.json")]
            for p in root.glob(f"*--{model}_config.json")]


def aic_model_config(name: str) -> Path | None:
    """aiconfigurator-core's packaged config.json of Hugging Face model `name`, or None (not
    installed, or not packaged). Only its model_configs folder is read."""
    root = _model_configs()
    if root is None or "/" not in name or ".." in name:
        return None
    org, _, model = name.partition("/")
    p = root / f"{org}--{model}_config.json"
    return p if p.is_file() else None


def _model_configs() -> Path | None:
    """aiconfigurator-core's model_configs folder (not imported), or None: not installed."""
    import importlib.util

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "model_configs"


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
    """Every row of the file, each a case or the reason it is not one (an unknown system or
    precision, a bad number, a disaggregated deployment fudg does not model): nothing
    dropped. The file itself (missing, too large, columns missing) is refused as in
    `read_cases`."""
    p, rows = _rows(path)
    out = []
    for line, row in rows:
        cell = {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}
        base = dict(id=cell.get("id") or f"line{line}", engine=cell.get("backend", ""),
                    model=cell.get("model_path", ""), system=cell.get("system", ""),
                    mode=cell.get("mode", ""), ttft_ms=_maybe(cell.get("silicon_ttft_ms")),
                    tpot_ms=_maybe(cell.get("silicon_tpot_ms")), line=line)
        if base["mode"] not in ("agg", "disagg"):
            out.append(Row(**base, reason=f"mode {base['mode'] or '(empty)'}: neither agg nor "
                           "disagg"))
            continue
        try:
            make = _case if base["mode"] == "agg" else _disagg_case
            out.append(Row(**base, case=make(row, p, line)))
        except InputError as exc:
            out.append(Row(**base, reason=f"{exc.field}: {exc.problem}"))
        except Unmodelled as exc:
            out.append(Row(**base, reason=str(exc)))
    return out


def _maybe(raw: str | None) -> float:
    """A cell as a number, nan when it is not one."""
    try:
        return float(raw or "")
    except ValueError:
        return float("nan")
