"""`hastune serve CONFIG`: run a deployment in the engine, optionally with a load run."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress

from hastune import archs
from hastune.cli.app import app
from hastune.cli.common import RAY_ADDRESS_OPTION, SERVE_BACKEND_OPTION, dumps, fmt_s
from hastune.errors import EXIT_INTERRUPTED, EXIT_REQUESTS_LOST


@app.command()
def serve(
    config: Path = typer.Argument(..., help="deployment config YAML (an architecture the "
                                  f"engine runs: {', '.join(archs.runnable())})"),
    recipe: Path | None = typer.Option(None, "--recipe", "-r",
                                       help="drive a load run with this recipe's workload"),
    rate: float = typer.Option(5.0, "--rate", help="arrival rate of the load run (req/s)"),
    requests: int = typer.Option(200, "--requests", "-n", help="requests in the load run"),
    model: str | None = typer.Option(None, "--model",
                                     help="model: a preset, or package.module:factory (only "
                                     "here; default: the recipe's preset, else ref-small)"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N"),
    seed: int | None = typer.Option(None, "--seed", help="load seed (default: recipe's)"),
    as_json: bool = typer.Option(False, "--json", help="print the load run as JSON"),
    admit: float = typer.Option(2.0, "--admit-margin", help="admission control: reject at "
                                "arrival a request whose predicted TTFT, its wait counted "
                                "this many times, exceeds the recipe's TTFT SLO; 0 turns it "
                                "off"),
    backend: str = SERVE_BACKEND_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
    oversubscribe: bool = typer.Option(False, "--oversubscribe", help="run a deployment that "
                                       "needs more cores (workers × threads) or GPUs than "
                                       "this machine has, workers sharing them (its timings "
                                       "are then not comparable with the simulator's; "
                                       "default: refused, exit 2)"),
    ignore_target: bool = typer.Option(False, "--ignore-target", help="run a config whose "
                                       "target: block names another model or GPU than the "
                                       "one served here (its architecture only)"),
) -> None:
    """Start the engine's workers for CONFIG. With --recipe, run one load of --requests at
    --rate and report every request as completed, rejected at arrival (admission control
    against the recipe's TTFT SLO) or failed; without, serve until Ctrl-C.

    Exit codes: 0 every request completed; 2 bad input (files, options, no torch, an
    unusable --device); 5 requests were rejected or failed (the count is printed);
    130 interrupted (Ctrl-C)."""
    from hastune.config import load_config
    from hastune.errors import InputError
    from hastune.evaluators.sim import check_rate, check_requests, check_seed
    from hastune.recipe import load_recipe
    from hastune.workload import sample_requests
    from runners.engine import Engine, EngineOptions
    from runners.engine.backend import check, preflight
    from runners.engine.load import jobs_from, to_result
    from runners.engine.modes import check_config

    check_rate(rate)  # the values first: nothing is loaded or started for a bad one
    check_requests(requests)
    check_seed(seed)
    if not 0 <= admit < 1e6:  # also refuses nan
        raise InputError(None, "--admit-margin", f"{admit} is not in [0, 1e6)",
                         "give a margin such as 2, or 0 to turn admission control off")
    cfg = load_config(config)
    check_config(cfg, config)
    if not ignore_target:
        check_target(config, model or (load_recipe(recipe).model if recipe else "ref-small"),
                     device)
    check(backend)
    rec = load_recipe(recipe) if recipe else None
    name = model or (rec.model if rec else "ref-small")
    preflight(name, device, model_from="--model" if model else "model", path=recipe)
    from runners.engine.fit import check_fit

    check_fit(cfg, device, 1, backend, oversubscribe, config)  # before any worker starts
    con = Console(stderr=True, highlight=False)
    stdout = _quiet_stdout() if as_json else None  # JSON alone on stdout
    t0 = time.perf_counter()
    try:
        slo = {"ttft_slo_s": rec.slo.ttft_s, "tpot_slo_s": rec.slo.tpot_s} if rec else {}
        eng = Engine(cfg, EngineOptions(model=name, device=device, backend=backend,
                                        ray_address=ray_address, admit_margin=admit or None,
                                        oversubscribe=oversubscribe,
                                        **slo),
                     rate_hint=rate).start()
    except (RuntimeError, ValueError) as exc:
        _restore(stdout)
        raise InputError(config, None, f"the engine could not start model {name!r}: {exc}",
                         "see the worker's error above; check --model (ref-tiny, ref-small, "
                         "ref-base, module:factory)") from None
    except BaseException:
        _restore(stdout)
        raise
    workers = _workers(cfg)
    where = "" if backend == "local" else f" as {backend} actors"
    con.print(f"engine up: {cfg.architecture} with {workers}{where}, model {name} on {device} "
              f"({time.perf_counter() - t0:.1f} s)")
    code = 0
    try:
        if rec is None:
            con.print("serving; Ctrl-C stops")
            signal.pause()
            return
        from hastune.evaluators.engine import _vocab

        s = rec.seed if seed is None else seed
        reqs = sample_requests(rec.workload, requests, s, base=rec.base_dir)
        jobs, offsets = jobs_from(reqs, rate, _vocab(name), s)
        with Progress(console=con, transient=True) as prog:
            task = prog.add_task("requests", total=len(jobs))
            run = eng.run(jobs, offsets, rate,
                          on_progress=lambda done, n: prog.update(task, completed=done))
        out = _report(run, to_result(run, rec.workload.warmup), rec.slo, name, s)
        lost = len(run.rejected) + len(run.failed)
        code = EXIT_REQUESTS_LOST if lost else 0
        out["exit_code"] = code
        _restore(stdout)
        stdout = None
        if as_json:
            print(dumps(out), flush=True)
        else:
            con.print(f"{out['completed']} completed, {out['rejected_at_arrival']} rejected at "
                      f"arrival, {out['failed']} failed of {len(jobs)}; TTFT P90 "
                      f"{fmt_s(out['ttft_p90_s'])} (completed: "
                      f"{fmt_s(out['ttft_p90_completed_s'])}), TPOT P90 "
                      f"{fmt_s(out['tpot_p90_s'])}, attainment {out['attainment']:.1%}; "
                      f"decode overhead {run.overhead['decode_overhead_share']:.1%} of model "
                      f"step time; {run.wall_s:.1f} s")
        if lost:
            con.print(f"[bold red]error:[/] {lost} of {len(jobs)} requests were not served "
                      f"({len(run.rejected)} rejected at arrival, {len(run.failed)} failed)"
                      f"; exit code {code}")
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
        con.print("interrupted")
    finally:
        _restore(stdout)
        eng.stop()
    if code:
        raise typer.Exit(code)


def check_target(config: Path, name: str, device: str) -> None:
    """Refuse to serve a config tuned for another model or GPU (its `target:` block) than
    `name` on `device`: hastune's engine would run something else than was tuned."""
    from hastune.errors import InputError
    from hastune.export.target import gpu_matches, read_target

    t = read_target(config)
    if t is None:
        return
    what = f"{config} was tuned for {t.model_label} on {t.gpus} x {t.gpu}"
    fix = (f"deploy it on its engine: hastune export {config} --engine vllm (or sglang, "
           "dynamo); or pass --ignore-target to run its architecture with this model here")
    if name != t.model:
        raise InputError(config, "target.model", f"{what}; serve would run model {name!r} on "
                         f"{device}", fix)
    dev = _device_name(device)
    if not gpu_matches(t.gpu, dev):
        raise InputError(config, "target.gpu", f"{what}; this machine's {device} is {dev}",
                         fix)


def _device_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "a CPU" if device == "cpu" else device
    try:
        import torch

        idx = int(device.split(":")[1]) if ":" in device else 0
        return torch.cuda.get_device_name(idx)
    except Exception:  # noqa: BLE001  (no torch, no CUDA, a bad index: not the target's GPU)
        return f"{device} (no such CUDA device here)"


def _report(run, res, slo, name: str, seed: int) -> dict:
    """The load run's JSON record: the summary, and every request accounted for
    (sent = completed + rejected_at_arrival + failed)."""
    import numpy as np

    out = res.summary(slo)
    done = res.ttft_measured()
    done = done[np.isfinite(done)]
    out.update({"sent": len(run.arrival), "failed": len(run.failed),
                "rejected_at_arrival": len(run.rejected),
                "ttft_p90_completed_s": (float(np.percentile(done, 90, method="higher"))
                                         if done.size else 0.0),
                "failures": {str(k): v for k, v in sorted(run.failed.items())},
                "model": name, "seed": seed, "wall_s": run.wall_s, **run.overhead})
    if run.sm_split:  # encoder / local prefill split per encode worker
        out["sm_split"] = run.sm_split
    if run.fit:  # the devices it needs and has; oversubscribed: not comparable with the sim
        out["fit"] = run.fit
    if run.steps:  # each worker's step timings (runners/engine/steplog.py)
        out["engine_steps"] = [{"rate": run.rate, "workers": run.steps}]
    return out


def _quiet_stdout() -> int:
    """Point file descriptor 1 at stderr (for this process and every process it starts:
    workers, Ray's daemons) so that only the JSON reaches stdout; returns the saved fd."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved


def _restore(saved: int | None) -> None:
    if saved is not None:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _workers(cfg) -> str:
    """'2 encode, 1 prefill, 4 decode workers' or '4 replicas': the engine's workers."""
    arch = archs.of(cfg)
    roles = Counter(role for _, role in arch.engine_workers(cfg))
    if set(roles) == {"replica"}:
        return f"{roles['replica']} {arch.pool_word}"
    return ", ".join(f"{n} {role}" for role, n in roles.items()) + " workers"
