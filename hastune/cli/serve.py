"""`hastune serve CONFIG`: run a deployment in the engine, optionally with a load run."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress

from hastune import archs
from hastune.cli import app
from hastune.cli.common import BACKEND_OPTION, RAY_ADDRESS_OPTION, dumps, fmt_s


@app.command()
def serve(
    config: Path = typer.Argument(..., help="deployment config YAML (an architecture the "
                                  f"engine runs: {', '.join(archs.runnable())})"),
    recipe: Path | None = typer.Option(None, "--recipe", "-r",
                                       help="drive a load run with this recipe's workload"),
    rate: float = typer.Option(5.0, "--rate", help="arrival rate of the load run (req/s)"),
    requests: int = typer.Option(200, "--requests", "-n", help="requests in the load run"),
    model: str | None = typer.Option(None, "--model",
                                     help="model (default: the recipe's; else ref-small)"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    seed: int | None = typer.Option(None, "--seed", help="load seed (default: recipe's)"),
    as_json: bool = typer.Option(False, "--json", help="print the load run as JSON"),
    backend: str = BACKEND_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
) -> None:
    """Start the engine's workers for CONFIG. With --recipe, run one load of --requests at
    --rate and report every request as completed or failed; without, serve until Ctrl-C."""
    from hastune.config import load_config
    from hastune.errors import InputError
    from hastune.recipe import load_recipe
    from hastune.workload import sample_requests
    from runners.engine import Engine, EngineOptions
    from runners.engine.backend import check
    from runners.engine.load import jobs_from, to_result
    from runners.engine.modes import check_config

    cfg = load_config(config)
    check_config(cfg, config)
    if rate <= 0 or requests <= 0:
        raise InputError(None, "--rate/--requests", "must be > 0", "give positive values")
    check(backend)
    rec = load_recipe(recipe) if recipe else None
    name = model or (rec.model if rec else "ref-small")
    con = Console(stderr=True, highlight=False)
    t0 = time.perf_counter()
    try:
        slo = {"ttft_slo_s": rec.slo.ttft_s, "tpot_slo_s": rec.slo.tpot_s} if rec else {}
        eng = Engine(cfg, EngineOptions(model=name, device=device, backend=backend,
                                        ray_address=ray_address, **slo),
                     rate_hint=rate).start()
    except (RuntimeError, ValueError) as exc:
        raise InputError(config, None, f"the engine could not start model {name!r}: {exc}",
                         "check --model (ref-tiny, ref-small, ref-base, module:factory)") \
            from None
    workers = _workers(cfg)
    where = "" if backend == "local" else f" as {backend} actors"
    con.print(f"engine up: {cfg.architecture} with {workers}{where}, model {name} on {device} "
              f"({time.perf_counter() - t0:.1f} s)")
    try:
        if rec is None:
            con.print("serving; Ctrl-C stops")
            signal.pause()
            return
        from hastune.real import _vocab

        s = rec.seed if seed is None else seed
        reqs = sample_requests(rec.workload, requests, s, base=rec.base_dir)
        jobs, offsets = jobs_from(reqs, rate, _vocab(name), s)
        with Progress(console=con, transient=True) as prog:
            task = prog.add_task("requests", total=len(jobs))
            run = eng.run(jobs, offsets, rate,
                          on_progress=lambda done, n: prog.update(task, completed=done))
        res = to_result(run, rec.workload.warmup)
        out = res.summary(rec.slo)
        out.update({"failed": len(run.failed), "failures": {str(k): v for k, v in
                                                            sorted(run.failed.items())},
                    "model": name, "seed": s, "wall_s": run.wall_s, **run.overhead})
        if run.sm_split:  # encoder / local prefill split per encode worker
            out["sm_split"] = run.sm_split
        if as_json:
            print(dumps(out))
        else:
            con.print(f"{out['completed']} completed, {out['failed']} failed of "
                      f"{len(jobs)}; TTFT P90 {fmt_s(out['ttft_p90_s'])}, TPOT P90 "
                      f"{fmt_s(out['tpot_p90_s'])}, attainment {out['attainment']:.1%}; "
                      f"decode overhead {run.overhead['decode_overhead_share']:.1%} of model "
                      f"step time; {run.wall_s:.1f} s")
    except KeyboardInterrupt:
        pass
    finally:
        eng.stop()


def _workers(cfg) -> str:
    """'2 encode, 1 prefill, 4 decode workers' or '4 replicas': the engine's workers."""
    arch = archs.of(cfg)
    roles = Counter(role for _, role in arch.engine_workers(cfg))
    if set(roles) == {"replica"}:
        return f"{roles['replica']} {arch.pool_word}"
    return ", ".join(f"{n} {role}" for role, n in roles.items()) + " workers"
