"""How a measured run was taken, where the file's row says so only through its id: the
benchmark client and the server flags of the suite that produced it.

The rows whose ids begin with a date (`2026_04_06_llama_3_1_70b_...`: the Llama-70B runs of
vLLM on H100 / H200 and of TensorRT-LLM on H200) are SemiAnalysis InferenceX (InferenceMAX)
runs, the cohort aiconfigurator's end-to-end accuracy campaign replays with
`request_count = 10 × concurrency, random_range_ratio 0.8` (its scripts/e2e_accuracy). Their
scripts (github.com/SemiAnalysisAI/InferenceX, benchmarks/70b_fp8_h200_trt_slurm.sh,
70b_fp8_h100_slurm.sh, 70b_fp8_h200_slurm.sh and .github/workflows/full-sweep-tmpl.yml as of
9596d23, 2025-10-29, when Llama-70B left the suite; the model nvidia/Llama-3.3-70B-Instruct-
FP8, Llama-3.1-70B's architecture) run `benchmark_serving.py --dataset-name random
--random-range-ratio 0.8 --num-prompts CONC×10 --max-concurrency CONC --request-rate inf
--ignore-eos` (kimbochen/bench_serving): every prompt and output length drawn uniformly from
⌊0.8 L⌋ … L, all 10 × CONC requests sent at once behind a semaphore of CONC, the mean TTFT and
TPOT over every request. Their servers: TensorRT-LLM 1.1.0rc2.post2 with `--max_num_tokens
16384`, an fp8 KV cache, and for 1024 × 1024 on fewer than 8 GPUs `batch_wait_max_tokens_ratio
0.9, batch_wait_timeout_iters 20` (prompts held up to 20 iterations for a fuller batch: the
first token of a prompt alone comes about 20 decode steps late); vLLM 0.10.2 with
`--max-num-seqs CONC`, `max-num-batched-tokens 8192` and an fp8 KV cache.

Other rows with a dated id are taken as InferenceX runs of another model: its client (the
same benchmark command for every model), the engine's own defaults for its server (the flags
above are the Llama-70B scripts'). The rows without (Llama-3.1-8B: TensorRT-LLM on H100,
SGLang on H200) come from aiconfigurator's own collection, whose client the file does not
describe: every request exactly isl and osl tokens, as hastune/data/calibration/e2e/README.md
says. Wherever the server's flags are not known, a TensorRT-LLM run of fp8 weights holds an
fp8 KV cache (it takes the checkpoint's KV quantisation, kv_cache_config dtype "auto", and
fp8 checkpoints quantise the KV cache too: ModelOpt's kv_cache_quant_algo FP8)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hastune import engine_terms as et
from hastune.fidelity.inferencex import is_inferencex
from hastune.fidelity.rows import Case

# aiconfigurator's own collection (its gap analysis: "source_file=…/aic-auto-gap-analysis/
# data/<system>/<engine>/<version>/<model>.csv"), its TensorRT-LLM runs
_AIC_TRTLLM = re.compile(r"aic-auto-gap-analysis/data/[^/;]+/trtllm/")
# A file without silicon_data_source (silicon_llama31.csv: silicon_train.csv's Llama-3.1 rows,
# same ids) is read by the ids: a dated one is an InferenceX run (in silicon_train.csv exactly
# the rows whose source is a dated export), and its TensorRT-LLM rows on H100 are the
# collection's (engine_terms.FRONTEND_QUEUED)
_INFERENCEX = re.compile(r"^\d{4}_\d{2}_\d{2}_")  # a dated id: an InferenceX run
_LLAMA_70B = re.compile(r"^\d{4}_\d{2}_\d{2}_llama_3_1_70b_")  # one whose scripts we read


@dataclass(frozen=True)
class Harness:
    """A run's client and the server flags it was measured with."""

    name: str
    range_ratio: float = 1.0    # lengths uniform in ⌊r·L⌋ … L (1: exactly L)
    prompts_per_client: int = 0  # requests in all = this × clients, every one counted (0: ours)
    kv_fp8: bool = False        # an fp8 KV cache set on the server
    chunk_tokens: int | None = None  # the server's token budget per iteration (None: default)
    max_seqs: int | None = None
    wait_iters: int = 0         # TensorRT-LLM batch waiting (engine_terms.Scheduler)
    wait_ratio: float = 0.0
    # the client queues a request at one completion and sends it at the next, its TTFT
    # counted from the queueing (engine_terms.FrontEnd.queued): aiconfigurator's collection's
    # TensorRT-LLM runs (TTFT grows with the output length by one completion gap at low
    # concurrency: docs/fidelity.md, benchmarks/fidelity_gap_term.py)
    queued: bool = False

    def scheduler(self, s: et.Scheduler) -> et.Scheduler:
        """The engine's defaults with this run's server flags."""
        upd: dict = {}
        if self.chunk_tokens is not None:
            upd.update(chunk_tokens=self.chunk_tokens, prefill_tokens=self.chunk_tokens)
        if self.max_seqs is not None:
            upd["max_seqs"] = self.max_seqs
        if self.wait_iters:
            upd.update(wait_iters=self.wait_iters, wait_ratio=self.wait_ratio)
        return replace(s, **upd) if upd else s


OWN = Harness("aiconfigurator")
INFERENCEX = Harness("inferencex", range_ratio=0.8, prompts_per_client=10)  # its client


def inferencex(case: Case) -> bool:
    """Whether `case` is an InferenceX run: by its silicon_data_source (a dated export), or
    in a file without that column by its id (a dated one)."""
    if case.source:
        return is_inferencex(case.source)  # a dated export of its results
    return bool(_INFERENCEX.match(case.id))


def client(case: Case) -> str:
    """The benchmark client a run was measured with, by its silicon_data_source:
    "inferencex" (a dated export of InferenceX's results), "aiconfigurator" (its own
    collection: a path or its gap-analysis files), "db-dump" (a dump of a results database,
    "db-dump/…"), or "other"; in a file without the column, "inferencex" by a dated id, else
    "aiconfigurator" (silicon_llama31.csv's other rows)."""
    if inferencex(case):
        return "inferencex"
    src = case.source
    if not src or "gap-analysis" in src or "aic-auto-gap" in src:
        return "aiconfigurator"
    return "db-dump" if src.startswith("db-dump") else "other"


def queued(case: Case) -> bool:
    """Whether `case`'s client counts one completion gap more (Harness.queued): a run of
    aiconfigurator's collection on TensorRT-LLM, by its silicon_data_source; in a file
    without that column, engine_terms.FRONTEND_QUEUED's (engine, GPU)."""
    if case.source:
        return bool(_AIC_TRTLLM.search(case.source))
    return not inferencex(case) and (case.engine, case.gpu) in et.FRONTEND_QUEUED


def harness(case: Case) -> Harness:
    """How `case` was measured (the module's docstring)."""
    ckpt_kv = case.engine == "trtllm" and case.weights == "fp8"  # the checkpoint's KV
    if not inferencex(case):
        return replace(OWN, kv_fp8=ckpt_kv, queued=queued(case))
    if _LLAMA_70B.match(case.id) and case.engine == "trtllm":
        waits = case.isl == 1024 and case.osl == 1024 and case.tp < 8
        return replace(INFERENCEX, kv_fp8=True, chunk_tokens=16384,
                       wait_iters=20 if waits else 0, wait_ratio=0.9 if waits else 0.0)
    if _LLAMA_70B.match(case.id) and case.engine == "vllm":
        return replace(INFERENCEX, kv_fp8=True, chunk_tokens=8192, max_seqs=case.clients)
    # another model's run, or an engine with no Llama-70B script: the client only
    return replace(INFERENCEX, kv_fp8=ckpt_kv)
