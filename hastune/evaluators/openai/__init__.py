"""Real trials on the engines people run: `--evaluator real --engine vllm|sglang`.

For each deployment config it
1. writes the deployment's launch files (hastune.export, the scripts `hastune export` writes)
   into a scratch folder and starts `bash launch.sh` there, on this machine's GPUs, under a
   watchdog that ends every process of it (hastune.evaluators.openai.proc) — or, with a launch
   command (`--launch-cmd` / $HASTUNE_ENGINE_CMD; `{port}` in it is replaced by a free port),
   starts that instead: the way CI points it at the stand-in server (hastune.standin);
2. waits until GET /v1/models answers (the served model's id is what requests name);
3. runs the goodput search (hastune.goodput) with the bundled engine's short-probe settings
   (hastune.evaluators.engine.RealOptions: 120 requests per probe, ≤ 20 s of arrivals, 10%
   rate grid — or
   the recipe's, when coarser —, ≤ 8 probes, or the recipe's max_probes when fewer; a close
   probe is run again, up to 3 runs: hastune.evaluators.engine.Probing.close_call); each probe
   sends the recipe's requests at their arrival times to /v1/completions with stream=true,
   `max_tokens` its output length with ignore_eos, its prompt as that many token ids (media
   items: their LLM tokens as text tokens — the stand-in and a text model take them; the
   encoder is not exercised), and reads TTFT and TPOT at the client from the SSE stream;
4. tears the deployment down, also on an error, Ctrl-C or SIGTERM.

Probe records are the bundled engine's: a RunResult per probe (hastune.runs) with arrival and
finish times, judged by the same stability verdict.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hastune.config import AnyConfig
from hastune.errors import InputError
from hastune.evaluators.engine import ProbeOptions, Probing
from hastune.goodput import GoodputResult, Probe, search_goodput
from hastune.recipe import Recipe
from hastune.runs import RunResult, latencies
from hastune.workload import RequestSet, sample_requests

ENGINES = ("vllm", "sglang")
ENV_CMD = "HASTUNE_ENGINE_CMD"


@dataclass
class OpenAIOptions(ProbeOptions):  # its warm-up runs at the search's start rate
    engine: str = "vllm"
    launch_cmd: str | None = None   # replaces the exported launch.sh ({port}: a free port)
    max_rate: float = 1e3
    health_timeout_s: float = 1800.0
    request_timeout_s: float = 300.0
    dummy_weights: bool = False     # exported launch: --load-format dummy (no checkpoint)
    grace_s: float = 10.0           # SIGTERM → SIGKILL
    prompt_ids: tuple[int, int] = (100, 1000)  # prompt token ids drawn from [lo, hi)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port (connections in TIME_WAIT do not count: the
    servers bind with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def local_gpus() -> list[str]:
    """The names of the NVIDIA GPUs this process may use (nvidia-smi -L, cut by
    CUDA_VISIBLE_DEVICES)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [ln.split(":", 1)[1].split("(UUID")[0].strip()
             for ln in out.stdout.splitlines() if ln.startswith("GPU ") and ":" in ln]
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        names = names[:len([v for v in vis.split(",") if v.strip()])]
    return names


class Deployment:
    """One running deployment: its processes, endpoint and served model."""

    def __init__(self, launched, url: str, model: str, where: str):
        self.launched, self.url, self.model, self.where = launched, url, model, where

    def stop(self) -> None:
        self.launched.stop()


class OpenAIEvaluation(Probing):
    name = "real"

    def __init__(self, recipe: Recipe, options: OpenAIOptions | None = None,
                 requests: int | None = None, seed: int | None = None):
        recipe.check_one_type()  # pools on several GPU types: not yet
        self.recipe = recipe
        self.opts = options or OpenAIOptions()
        if self.opts.engine not in ENGINES:
            raise InputError(None, "--engine", f"unknown engine {self.opts.engine!r}",
                             f"use one of {', '.join(ENGINES)}")
        if self.opts.launch_cmd is None:
            self.opts.launch_cmd = os.environ.get(ENV_CMD) or None
        if requests:
            self.opts.requests = requests
        self.seed = recipe.seed if seed is None else seed
        if recipe.workload.arrival.process == "closed":
            raise InputError(recipe.path, "workload.arrival.process", "real trials on "
                             f"{self.opts.engine} drive open-loop arrivals only",
                             "use poisson or gamma arrivals")
        self.pool: RequestSet = sample_requests(recipe.workload, self.opts.requests, self.seed,
                                                base=recipe.base_dir)
        self.live: Deployment | None = None
        self.last: dict = {}            # the last deployment: where, endpoint, model
        self.client: dict = {"lag_max_s": 0.0, "errors": {}}
        self.gpu_note: str | None = None  # the GPUs here are not the recipe's
        self.media_as_text = int((self.pool.llm_tokens > 0).sum())
        if self.media_as_text:
            print(f"hastune: {self.media_as_text} of {len(self.pool)} requests carry media; "
                  f"{self.opts.engine} gets their LLM tokens as text tokens (the encoder is "
                  "not exercised; docs/deploy.md)", file=sys.stderr)

    # --- what it can run -------------------------------------------------------------------

    def check(self, config: AnyConfig, config_path: object = None) -> None:
        """The budget, what the engine can express (hastune.export's plan) and, for the
        exported launch, this machine's GPUs and the router's port."""
        if config.gpus > self.recipe.cluster.gpus:
            raise InputError(config_path, None, f"the config uses {config.gpus} GPUs but the "
                             f"recipe's budget is {self.recipe.cluster.gpus}",
                             "lower the pools or raise cluster.gpus")
        from hastune.export.plan import plan

        p = plan(config, self.recipe.cluster.gpus_per_node)  # type: ignore[arg-type]
        if p.blocking:
            raise InputError(config_path, "architecture", f"{self.opts.engine} cannot run "
                             f"this deployment: {'; '.join(p.blocking)}", "evaluate it with "
                             "--evaluator sim, or export --closest and evaluate that config")
        if self.opts.launch_cmd:
            return
        if p.nodes > 1:
            raise InputError(config_path, None, f"the deployment spans {p.nodes} nodes; a "
                             "real trial launches on this machine only", "evaluate a "
                             "deployment of one node, or launch it yourself (--launch-cmd)")
        names = local_gpus()
        if len(names) < config.gpus:
            raise InputError(config_path, None, f"the deployment needs {config.gpus} GPUs "
                             f"and this machine has {len(names)} usable", "run on a "
                             f"machine with {config.gpus} GPUs, or point --launch-cmd (or "
                             f"${ENV_CMD}) at a server to measure (python -m hastune.standin "
                             "for a stand-in)")
        from hastune.export.target import gpu_matches

        want = self.recipe.cluster.gpu
        other = sorted({n for n in names if not gpu_matches(want, n)})
        if other and self.gpu_note is None:
            self.gpu_note = (f"the recipe is for {want}; this machine's GPUs are "
                             f"{', '.join(other)}: the goodput is theirs")
            print(f"hastune: {self.gpu_note}", file=sys.stderr)
        prog = "vllm" if self.opts.engine == "vllm" else "python3"
        if shutil.which(prog) is None:
            raise InputError(None, "--engine", f"{prog} is not on PATH",
                             f"install {self.opts.engine} (the pinned version: docs/deploy.md)")

    # --- launch and teardown ---------------------------------------------------------------

    def _launch(self, config: AnyConfig, config_path: object = None) -> Deployment:
        from hastune.evaluators.openai.proc import Launched

        scratch = Path(tempfile.mkdtemp(prefix=f"hastune-{self.opts.engine}-"))
        log = scratch / "launch.log"
        if self.opts.launch_cmd:
            port = free_port()
            cmd = self.opts.launch_cmd.replace("{port}", str(port))
            argv, env, cwd = ["bash", "-c", cmd], {"HASTUNE_PORT": str(port)}, None
        else:
            from hastune.export import export
            from hastune.export.plan import ROUTER_PORT
            from hastune.export.target import build_target

            port = ROUTER_PORT
            if not port_free(port):
                raise InputError(None, "--engine", f"port {port} (the exported router's) is "
                                 "in use on 127.0.0.1", "stop what listens there")
            target = build_target(self.recipe, config, 0.0)  # type: ignore[arg-type]
            export(config, target, self.opts.engine, scratch,  # type: ignore[arg-type]
                   dummy=self.opts.dummy_weights)
            argv, cwd = ["bash", "launch.sh"], scratch
            env = {"HOST": "127.0.0.1", "LOG_DIR": str(scratch / "logs"),
                   "HEALTH_TIMEOUT": str(int(self.opts.health_timeout_s))}
            cmd = f"bash {scratch / 'launch.sh'}"
        url = f"http://127.0.0.1:{port}"
        launched = Launched(argv, env=env, cwd=cwd, log=log, grace_s=self.opts.grace_s)
        try:
            model = self._wait(launched, url, cmd, config_path)
        except BaseException:
            launched.stop()
            raise
        self.last = {"launch": cmd, "endpoint": url + "/v1", "model": model,
                     "logs": str(scratch)}
        return Deployment(launched, url, model, str(scratch))

    def _wait(self, launched, url: str, cmd: str, config_path: object) -> str:
        from hastune.evaluators.openai.client import served_model

        deadline = time.monotonic() + self.opts.health_timeout_s
        while True:
            code = launched.exited()
            if code is not None:
                raise InputError(config_path, None, f"{self.opts.engine} exited ({code}) "
                                 f"before it served: {cmd}\n{launched.log_tail()}",
                                 f"see {launched.log_path}")
            model = served_model(url)
            if model is not None:
                return model
            if time.monotonic() > deadline:
                raise InputError(config_path, None, f"{url}/v1/models did not answer in "
                                 f"{self.opts.health_timeout_s:g} s", f"see "
                                 f"{launched.log_path}")
            time.sleep(0.1)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    # --- probes ----------------------------------------------------------------------------

    def _requests(self, reqs: RequestSet, rate: float, seed: int):
        from hastune.evaluators.openai.client import Request

        rng = np.random.default_rng(seed)
        off = reqs.arrivals(rate)
        off = off - off[0]
        lo, hi = self.opts.prompt_ids
        return [Request(float(off[i]),
                        rng.integers(lo, hi, max(1, int(reqs.prefill_tokens[i]))).tolist(),
                        max(1, int(reqs.output_tokens[i]))) for i in range(len(reqs))]

    def _drive(self, reqs: RequestSet, rate: float, seed: int):
        from hastune.evaluators.openai.client import drive

        assert self.live is not None
        rec = drive(self.live.url, self.live.model, self._requests(reqs, rate, seed),
                    self.opts.request_timeout_s)
        self.client["lag_max_s"] = max(self.client["lag_max_s"], rec.lag_max_s)
        for k, v in rec.errors.items():
            self.client["errors"][k] = self.client["errors"].get(k, 0) + v
        return rec

    def run(self, config: AnyConfig, rate: float, config_path: object = None) -> RunResult:
        if self.live is None:
            self.check(config, config_path)
            self.live = self._launch(config, config_path)
        reqs = self.requests_at(rate)
        rec = self._drive(reqs, rate, self.seed)
        code = self.live.launched.exited()
        if code is not None:  # not a measurement of the deployment: say so
            raise InputError(config_path, None, f"{self.opts.engine} exited ({code}) during "
                             f"the probe at {rate:.4g} req/s:\n"
                             f"{self.live.launched.log_tail()}",
                             f"see {self.live.launched.log_path}")
        lost = set(rec.failed)
        ttft, tpot = latencies(rec.arrival, rec.first, rec.last, rec.tokens, lost)
        n = len(ttft)
        run = RunResult(rate=rate, ttft=ttft, tpot=tpot, warmup=int(self.opts.warmup * n),
                        rejected=len(lost), wall_s=rec.wall_s,
                        extra={"failed": float(len(lost)), "client_lag_max_s": rec.lag_max_s},
                        arrival=rec.arrival, finish=rec.last)
        run.verdict = self.judge(run)
        return run

    def describe(self) -> dict:
        out: dict = {"requests_per_probe": self.opts.requests, "engine": self.opts.engine,
                     "repeats": self.opts.repeats, "noise_band": self.opts.noise_band,
                     "client": {"lag_max_s": self.client["lag_max_s"],
                                "errors": dict(self.client["errors"])}}
        out.update(self.last)
        if self.media_as_text:
            out["media_as_text_tokens"] = self.media_as_text
        if self.gpu_note:
            out["gpu_note"] = self.gpu_note
        return out

    def goodput(self, config: AnyConfig, config_path: object = None,
                on_probe: Callable[[Probe], None] | None = None,
                incumbent: float | None = None, early_stop: bool = False) -> GoodputResult:
        self.check(config, config_path)
        start = self.recipe.evaluator.start_rate or self._start_rate(config)
        try:
            self.live = self._launch(config, config_path)
            if self.opts.warm_requests > 0:
                self._drive(self.pool.head(min(self.opts.warm_requests, len(self.pool))),
                            start, self.seed + 1)
            return search_goodput(lambda r: self.run(config, r, config_path), self.recipe.slo,
                                  start_rate=start, on_probe=on_probe, incumbent=incumbent,
                                  early_stop=early_stop, min_rate=0.05,
                                  max_rate=self.opts.max_rate, **self.grid(), **self.noise())
        finally:
            self.close()
