"""The deployment of a disaggregated InferenceX run, from the config that ran it.

An InferenceX row (silicon_data_source `source_file=<date>.csv; model=<name>;
silicon_concurrency=<n>; measured=<time>`) gives its prefill and decode workers' TP but not
how many workers of each ran, whether attention-DP was on, nor speculative decoding; and its
MoE columns are not the run's (a decode pool "TP 8, MoE TP 2 × EP 4" behind a prefill pool of
EP 4, where the config says decode TP 8, EP 8). SemiAnalysis InferenceX's NVIDIA master config
lists every such deployment by model, precision, GPU, framework, lengths and concurrency;
hastune/data/calibration/e2e/inferencex_disagg.csv (scripts/inferencex_deployments.py) holds
every one it listed from 2025-11-03 to 2026-04-29, with when it listed it.

`deployment(cell)` finds the row's: the entries of its model, precision, GPU, engine, lengths
and concurrency with the row's prefill and decode TP, listed at any time from its measurement
to a week after (a run of a pull request is measured before its config lands); the
concurrency is the clients its benchmark ran, which for the H200 TensorRT-LLM recipes named
per decode worker ("c4_ctx1_gen9_…") is the entry's concurrency × its decode workers
(`clients_of`: 36 clients for conc 4 and 9 decode workers, as the recipe's benchmark says).
Exactly one deployment must remain; anything else is Unmodelled, with the reason. Its
speculative decoding, multi-token prediction (MTP), is modelled where the entry's settings
(DECODE_MTP_SIZE=3) or its recipe's name ("…_mtp3") give its draft tokens per step
(`nextn_of`, the decode pool's `nextn`; hastune.speculative), and Unmodelled where neither
does. Where the row's prefill and decode TP are one number above every TP the configs list for
its cell (some GB200 runs measured 2025-12-05: "TP 36" for a cell whose configs list prefill
TP 4 and decode TP 8), the number is read as the deployment's GPUs: the entry whose workers ×
TP over both pools sum to it (36 = 1 × 4 + 4 × 8). The rule keys on silicon_data_source (the
source and the model name it gives) and the row's own columns, never on its id."""

from __future__ import annotations

import csv
import datetime as dt
import re
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "e2e" / \
    "inferencex_disagg.csv"
WINDOW = dt.timedelta(days=7)  # a config listed up to a week after the run still ran it

# The model names InferenceX's exports give (silicon_data_source `model=`), letters and
# digits only, lower case → its configs' model-prefix (InferenceX MODELS.md, "Model support
# matrix": the prefix of each model architecture class)
PREFIXES = {"deepseekr1": "dsr1", "deepseekr10528": "dsr1", "deepseekv4pro": "dsv4",
            "gptoss120b": "gptoss", "kimik25": "kimik2.5", "glm5": "glm5", "glm51": "glm5.1",
            "minimaxm25": "minimaxm2.5", "minimaxm27": "minimaxm2.5", "minimaxm3": "minimaxm3",
            "qwen35397b": "qwen3.5", "qwen35397ba17b": "qwen3.5", "llama3170b": "llama70b",
            "llama3170binstruct": "llama70b", "kimik3": "kimik3", "glm52": "glm5.2"}
# its frameworks → the file's `backend`
ENGINES = {"trt": "trtllm", "trtllm": "trtllm", "sglang": "sglang", "vllm": "vllm"}

# InferenceX's runs: silicon_data_source names a dated export of its results
# ("source_file=2026-04-06.csv; model=…; silicon_concurrency=…; measured=…")
_SOURCE = re.compile(r"(?:^|;)\s*source_file=\d{4}-\d{2}-\d{2}\.csv\s*(?:;|$)")
_FIELD = re.compile(r"(?:^|;)\s*(\w+)=([^;]*)")


class NotFound(ValueError):
    """Why a row's deployment is not known (its text is the row's `unsupported` reason)."""


def is_inferencex(source: str) -> bool:
    """Whether a silicon_data_source names a dated export of InferenceX's results."""
    return bool(_SOURCE.search(source))


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _when(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


@lru_cache(maxsize=4)
def load(path: Path = TABLE) -> tuple[dict, ...]:
    """The table's rows, typed."""
    out = []
    with Path(path).open(newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            out.append({**r, **{k: int(r[k]) for k in (
                "isl", "osl", "concurrency", "prefill_workers", "prefill_tp", "prefill_ep",
                "decode_workers", "decode_tp", "decode_ep")},
                "prefill_dp_attn": r["prefill_dp_attn"] == "True",
                "decode_dp_attn": r["decode_dp_attn"] == "True",
                "recipe": r.get("recipe") or "",
                "drafts": int(r["drafts"]) if (r.get("drafts") or "").strip() else None,
                "valid_from": _when(r["valid_from"]),
                "valid_to": _when(r["valid_to"]) if r["valid_to"] else None})
    return tuple(out)


def _side(r: dict, s: str) -> dict[str, int]:
    """One pool of a config entry as the file's columns would give it: attention-DP ranks at
    TP 1 with the experts over them (dp-attn), else a TP group with MoE TP × EP = TP."""
    tp, ep = r[f"{s}_tp"], r[f"{s}_ep"]
    if r[f"{s}_dp_attn"]:
        return dict(num_workers=r[f"{s}_workers"], tp_size=1, pp_size=1,
                    attention_dp_size=tp, moe_tp_size=1, moe_ep_size=ep)
    return dict(num_workers=r[f"{s}_workers"], tp_size=tp, pp_size=1, attention_dp_size=1,
                moe_tp_size=max(tp // max(ep, 1), 1), moe_ep_size=ep)


# a multi-node recipe named for its concurrency per decode worker and its workers,
# "c<conc>_ctx<prefill workers>_gen<decode workers>_…" (srt-slurm's recipes/trtllm/h200/…,
# the H200 TensorRT-LLM entries of InferenceX's config): its benchmark runs conc × decode
# workers clients (c4_ctx1_gen9_tep8_…_mtp0: `concurrencies: "36"`; c512_ctx2_gen7: "3584";
# c4_ctx1_gen11_…_mtp3: "44"; 8k1k c256_ctx5_gen3: "768")
_PER_WORKER = re.compile(r"^c(\d+)_ctx(\d+)_gen(\d+)_")


def clients_of(r: dict) -> int:
    """The clients a config entry's benchmark ran: its concurrency, or for a recipe named
    per decode worker (`_PER_WORKER`) that times its decode workers."""
    m = _PER_WORKER.match(r.get("recipe") or "")
    if m and (int(m[1]), int(m[3])) == (r["concurrency"], r["decode_workers"]):
        return r["concurrency"] * r["decode_workers"]
    return r["concurrency"]


# a TensorRT-LLM recipe names its multi-token prediction's draft tokens per step
# ("…_eplb0_mtp3.yaml"): srt-slurm's recipes/dsr1-128k8k/gb200/
# ctx1_ctx_pp8_gen1_tep8_batch1_eplb0_mtp3.yaml sets `speculative_config: {decoding_type:
# MTP, num_nextn_predict_layers: 3}` and its decode `max_num_tokens: 4` (batch 1 × 3 + 1)
_MTP = re.compile(r"_mtp(\d+)(?=[._\[]|$)")


def nextn_of(r: dict) -> int | None:
    """The draft tokens per decode step of a config entry's speculative decoding: 0 without
    it (`spec_decoding` none); the count its settings give (`drafts`: DECODE_MTP_SIZE=3, how
    the entries that name no recipe set it), else the count its recipe's name gives
    ("…_mtp3"); else None (not known: SGLang's recipes set `speculative-num-steps` inside,
    not in the name)."""
    if r["spec_decoding"] == "none":
        return 0
    if r["spec_decoding"] != "mtp":
        return None
    if r.get("drafts") is not None:
        return r["drafts"]
    m = _MTP.search(r.get("recipe") or "")
    return int(m[1]) if m else None


def gpus(r: dict) -> int:
    """A config entry's GPUs: both pools' workers × TP."""
    return r["prefill_workers"] * r["prefill_tp"] + r["decode_workers"] * r["decode_tp"]


def _keyed(entries) -> dict[tuple, dict]:
    """Config entries by their deployment (speculative decoding and its draft tokens, each
    pool's workers, EP and attention-DP): one entry per distinct deployment."""
    return {(r["spec_decoding"], nextn_of(r), *(r[f"{s}_{k}"] for s in ("prefill", "decode")
                                                for k in ("workers", "ep", "dp_attn"))): r
            for r in entries}


def _named(key: tuple) -> str:
    """A deployment key (`_keyed`) as the reason names it."""
    spec = key[0] if key[0] == "none" else f"{key[0]} {'?' if key[1] is None else key[1]}"
    return f"{spec}: {key[2]} prefill + {key[5]} decode workers"


def deployment(cell: dict[str, str], table: tuple[dict, ...] | None = None
               ) -> dict[str, dict[str, int]]:
    """{"prefill": columns, "decode": columns} of the row's run as its config lists it (the
    columns `rows._disagg_case` reads: num_workers, tp_size, pp_size, attention_dp_size,
    moe_tp_size, moe_ep_size; the decode pool's `nextn` too, MTP's draft tokens a step, 0
    without); NotFound with the reason otherwise."""
    source = cell.get("silicon_data_source", "")
    fields = {k: v.strip() for k, v in _FIELD.findall(source)}
    prefix = PREFIXES.get(_norm(fields.get("model", "")))
    if prefix is None:
        raise NotFound("no worker counts, and no InferenceX model-prefix for the source's "
                       f"model (model={fields.get('model', '')!r})")
    try:
        clients = int(fields["silicon_concurrency"])
        when = _when(fields["measured"])
        ptp, dtp = int(cell["prefill_tp_size"]), int(cell["decode_tp_size"])
        isl, osl = int(cell["isl"]), int(cell["osl"])
    except (KeyError, ValueError) as exc:
        raise NotFound("no worker counts, and not what finds them in InferenceX's configs "
                       f"({exc}: silicon_concurrency, measured, prefill_tp_size, "
                       "decode_tp_size, isl, osl)") from None
    gpu = cell.get("system", "").removesuffix("_sxm")
    engine, precision = cell.get("backend", ""), cell.get("precision", "")
    listed = [r for r in (table if table is not None else load())
              if r["config"].startswith(f"{prefix}-{precision}-{gpu}-")
              and ENGINES.get(r["framework"].removeprefix("dynamo-")) == engine
              and (r["isl"], r["osl"], clients_of(r)) == (isl, osl, clients)]
    live = [r for r in listed if not (r["valid_from"] > when + WINDOW or (
        r["valid_to"] is not None and r["valid_to"] <= when))]
    found = _keyed(r for r in live if (r["prefill_tp"], r["decode_tp"]) == (ptp, dtp))
    if not found and ptp == dtp and listed and ptp > max(
            max(r["prefill_tp"], r["decode_tp"]) for r in listed):
        # TP columns above any TP the configs list for the cell: the deployment's GPUs
        found = _keyed(r for r in live if gpus(r) == ptp)
    what = (f"{prefix} {precision} on {gpu}, {engine}, {isl}x{osl}, {clients} clients, "
            f"prefill TP {ptp}, decode TP {dtp}")
    if not found:
        raise NotFound("no worker counts, and InferenceX's configs list no such deployment "
                       f"({what}, in the week from {when:%Y-%m-%d})")
    if len(found) > 1:
        alts = "; ".join(_named(k) for k in sorted(found, key=str))
        raise NotFound("no worker counts, and InferenceX's configs list several deployments "
                       f"of it: which one ran is not known ({what}; {alts})")
    (key, r), = found.items()
    if key[0] not in ("none", "mtp"):
        raise NotFound(f"speculative decoding not modelled ({key[0]} in InferenceX's config "
                       f"of {what})")
    if key[1] is None:
        raise NotFound(f"speculative decoding with draft tokens not known ({key[0]} in "
                       f"InferenceX's config of {what}: its recipe {r['recipe'] or '(none)'} "
                       "does not name them)")
    if min(r["prefill_workers"], r["decode_workers"]) < 1:  # it lists a few such
        raise NotFound(f"no worker counts, and InferenceX's config lists a pool of no workers "
                       f"({what}: {r['prefill_workers']} prefill, {r['decode_workers']} "
                       "decode)")
    out = {s: _side(r, s) for s in ("prefill", "decode")}
    out["decode"]["nextn"] = key[1]  # draft tokens per decode step (0: no MTP)
    return out
