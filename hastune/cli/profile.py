"""`hastune profile`: measure a real model on a real device and write its profile;
`hastune profile check PROFILE`: a profile's error against measurements (held-out kernel rows
for calibrated profiles, held-out measured rows for measured ones)."""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps
from hastune.errors import EXIT_GATE, InputError

profile_app = typer.Typer(
    help="Latency profiles. `hastune profile --model M --device D --out P.yaml` measures a "
         "model (the reference presets ref-tiny / ref-small / ref-base, or module:factory) on "
         "this machine's device and writes its profile; `check` prints a profile's error "
         "against measurements.",
    no_args_is_help=True,
    invoke_without_command=True,
)
app.add_typer(profile_app, name="profile")


@profile_app.callback()
def measure(
    ctx: typer.Context,
    model: str | None = typer.Option(
        None, "--model", "-m", help="reference preset (ref-tiny, ref-small, ref-base) or "
        "package.module:factory returning a runners.model.base.ServingModel"),
    device: str = typer.Option("cpu", "--device", "-d", help="cpu, cuda or cuda:N"),
    out: Path | None = typer.Option(None, "--out", "-o", help="profile YAML to write "
                                    "(measured rows are kept next to it, <out>.rows.json)"),
    threads: int | None = typer.Option(None, "--threads", min=1,
                                       help="CPU threads (default: torch's, one per core)"),
    gpu: str | None = typer.Option(None, "--gpu", help="the profile's gpu label, i.e. its "
                                   "profiles/<gpu>/ folder (default: cpu, or the CUDA name)"),
    memory_gb: float | None = typer.Option(
        None, "--memory-gb", min=0.01, help="CPU: the memory budget written as gpu_bytes "
        "(default 2 GiB; CUDA uses the device's memory)"),
    quick: bool = typer.Option(False, "--quick", help="a small grid (seconds; for tests)"),
    fresh: bool = typer.Option(False, "--fresh", help="re-measure everything, ignoring the "
                               "rows file of an earlier run"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary"),
) -> None:
    """Measure encode, prefill and decode of a model on a device, fit the profile's linear
    forms and write the profile. An interrupted run resumes from its rows file."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or out is None:
        missing = "--model" if model is None else "--out"
        raise InputError(None, missing, "hastune profile needs --model and --out",
                         "e.g. hastune profile --model ref-small --device cpu --out p.yaml")
    if not device.startswith("cuda") and device != "cpu":
        raise InputError(None, "--device", f"unknown device {device!r}", "use cpu, cuda or "
                         "cuda:N")
    _require_torch(device)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from hastune.calibrate.profiler import profile_model

    con = Console(highlight=False, stderr=True)
    prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[shape]}"),
                    console=con, transient=False)
    task = prog.add_task(f"profiling {model} on {device}", total=None, shape="")

    def on_start(total: int, cached: int) -> None:  # the model is loaded: measuring starts
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        if device == "cpu" and load > 0.5:
            con.print(f"[yellow]warning:[/] load average {load:.2f}: other processes are "
                      "using the CPU, so timings will be slower and noisier than on a quiet "
                      "machine (the profile's source records the load)")
        prog.start()
        prog.update(task, total=total)
        if cached:
            con.print(f"resuming: {cached} of {total} shapes already measured")

    def on_row(shape, cached: bool) -> None:
        prog.update(task, advance=1, shape=shape.key + (" (cached)" if cached else ""))

    try:  # nothing is printed before the model loads: a bad --model is the one line
        res = profile_model(model, device, out, threads=threads, gpu=gpu,
                            memory_gb=memory_gb, quick=quick, fresh=fresh,
                            on_start=on_start, on_row=on_row)
    except ValueError as exc:  # a bad preset or factory: runners.model says what to fix
        problem, _, fix = str(exc).partition(". Fix: ")
        raise InputError(None, "--model", problem, fix or "check --model") from None
    finally:
        prog.stop()
    fit = res.data["fit"]
    if as_json:
        print(dumps({"profile": str(res.path), "rows_file": str(res.rows_path),
                     "name": res.data["name"], "wall_s": res.wall_s, "measured": res.measured,
                     "shapes": len(res.rows), "held_out_error": fit["error"],
                     "fitted_error": fit["measured"]["fitted_error"],
                     "encode": res.data["encode"], "prefill": res.data["prefill"], "exit_code": 0,
                     "decode": res.data["decode"]}))
        return
    out_con = Console(highlight=False)
    out_con.print(f"wrote [bold]{res.path}[/] ({res.data['name']}; {len(res.rows)} shapes, "
                  f"{res.measured} measured now, in {res.wall_s:.1f} s); rows in {res.rows_path}")
    _print_measured(out_con, res.data["fit"], res.data)


def _require_torch(device: str) -> None:
    try:
        import torch
    except ImportError:
        raise InputError(None, "--device", "measuring a model needs PyTorch, which is not "
                         "installed", "pip install 'hastune[torch]' (torch==2.13.0)") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(None, "--device", f"{device} requested but torch sees no CUDA GPU",
                         "use --device cpu, or install a CUDA build of torch")


def _coef_line(section: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in section.items()
                     if isinstance(v, float) and k.endswith("_s") and v)


def _print_measured(con: Console, fit: dict, data: dict | None = None) -> None:
    m = fit["measured"]
    tab = Table(title="linear forms vs measured rows (relative |error|)")
    for col in ("stage", "fitted rows", "median", "P90", "held-out rows", "median", "P90",
                "max"):
        tab.add_column(col, justify="left" if col == "stage" else "right")
    for stage, f in m["fitted_error"].items():
        h = fit["error"].get(stage)
        held = (("-", "-", "-", "-") if h is None else
                (str(h["points"]), f"{h['median_pct']:.1f}%", f"{h['p90_pct']:.1f}%",
                 f"{h['max_pct']:.1f}%"))
        tab.add_row(stage, str(f["points"]), f"{f['median_pct']:.1f}%",
                    f"{f['p90_pct']:.1f}%", *held)
    con.print(tab)
    if data is not None:
        for stage in ("encode", "prefill", "decode"):
            con.print(f"  {stage}: {_coef_line(data[stage])}")
    con.print(f"share curves: {m['share']}")


def _fmt(stat, pct: bool = True) -> tuple[str, str, str]:
    if stat is None:
        return "-", "-", "-"
    if stat.rows == 0 or math.isnan(stat.median_pct):
        return str(stat.rows), "-", "-"
    return str(stat.rows), f"{stat.median_pct:.1f}%", f"{stat.p90_pct:.1f}%"


@profile_app.command("check")
def check(
    profile: Path = typer.Argument(..., help="a calibrated or measured profile YAML"),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="folder holding kernels/<system>/ "
        "(default: $HASTUNE_CALIBRATION, else the tables hastune ships: hastune/data/calibration)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Error of the profile's kernel predictors on the rows they were fitted on and on the
    held-out rows, per kernel kind (median and P90 |error|). Exit code 4 (a gate failed) if a
    held-out median for GEMM or attention is above 10%. For a measured profile (`hastune
    profile`): the linear forms' error on the measured rows fitted and held out (no
    calibration data)."""
    from hastune.calibrate.check import GATE_PCT, check_system, source_of_fit
    from hastune.calibrate.tables import require_calibration
    from hastune.profile import load_profile

    prof = load_profile(profile)
    if prof.fit is not None and prof.fit.measured is not None:
        _check_measured(prof, as_json)
        return
    if prof.fit is None:
        raise InputError(profile, "fit", "the profile has no fit record, so it was not fitted "
                         "on kernel tables", "check a calibrated profile (profiles/<gpu>/*.yaml, "
                         "made by scripts/make_profiles.py)")
    system = prof.fit.calibration
    if prof.fit.kernel_source:     # built from aiconfigurator-core: the same tables again
        root = source_of_fit(prof.fit.kernel_source, None)
        root.hardware(system)      # the package has the system (else an InputError)
    else:
        root = require_calibration(calibration)
        if not (root / "kernels" / system).is_dir():
            raise InputError(profile, "fit.calibration", f"no kernel tables for {system!r} "
                             f"under {root / 'kernels'}", "point --calibration at the folder "
                             "the profile was made from")
    rows = check_system(root, system, prof.fit.holdout_fraction, prof.fit.holdout_seed)
    ok = all(r.passed for r in rows)
    if as_json:
        print(dumps({
            "profile": prof.name, "calibration": system, "passed": ok, "gate_pct": GATE_PCT,
            "kernel_source": prof.fit.kernel_source,
            "holdout_fraction": prof.fit.holdout_fraction, "holdout_seed": prof.fit.holdout_seed,
            "kernels": {r.kind: {part: (None if s is None else asdict(s)) for part, s in
                                 (("fitted", r.fitted), ("held_out", r.held_out),
                                  ("roofline_only", r.roofline_only))} for r in rows},
            "linear_fit": {k: v.model_dump() for k, v in prof.fit.error.items()},
            "exit_code": 0 if ok else EXIT_GATE}))
        raise typer.Exit(0 if ok else EXIT_GATE)
    con = Console(highlight=False)
    if not con.is_terminal:
        con.width = max(con.width, 130)  # the table is wide; pipes default to 80 columns
    ksrc = prof.fit.kernel_source
    via = (f" from aiconfigurator-core {ksrc.get('package')} ({ksrc.get('engine')}, GEMM "
           f"{ksrc.get('gemm_dtype')}, KV {ksrc.get('kv_dtype')})" if ksrc else "")
    con.print(f"[bold]{prof.name}[/] (tp {prof.tp}): kernel tables [bold]{system}[/]{via}, "
              f"{prof.fit.holdout_fraction:.0%} of each table held out (seed "
              f"{prof.fit.holdout_seed})")
    if prof.fit.scale:
        scale = ", ".join(f"{k} x{v:g}" for k, v in prof.fit.scale.items())
        con.print(f"[yellow]derived GPU[/]: errors are of the {system} tables; this profile "
                  f"scales them ({scale}), which no table here measures")
    tab = Table(title="kernel predictors vs measured rows (|error|)",
                caption="roofline only: held-out rows without the table correction, i.e. what "
                        "a shape far from every measured row gets")
    for col in ("kernel", "fit rows", "median", "P90", "held-out", "median", "P90",
                "roofline only", "P90", ""):
        tab.add_column(col, justify="left" if col in ("kernel", "") else "right")
    for r in rows:
        if r.fitted is None:
            tab.add_row(r.kind, "-", "-", "-", "-", "-", "-", "-", "-",
                        "[dim]no table (proxy: see method)[/]")
            continue
        mark = "" if r.kind == "allreduce" else ("[green]ok[/]" if r.passed else "[red]>10%[/]")
        ro = _fmt(r.roofline_only)[1:]
        tab.add_row(r.kind, *_fmt(r.fitted), *_fmt(r.held_out), *ro, mark)
    con.print(tab)
    fit = Table(title="linear profile forms vs the per-layer model (relative error)")
    for col in ("stage", "points", "median", "P90", "max"):
        fit.add_column(col, justify="left" if col == "stage" else "right")
    for stage, s in prof.fit.error.items():
        fit.add_row(stage, str(s.points), f"{s.median_pct:.1f}%", f"{s.p90_pct:.1f}%",
                    f"{s.max_pct:.1f}%")
    con.print(fit)
    verdict = ("[green]pass[/]" if ok else "[red]FAIL[/]")
    con.print(f"held-out median |error| ≤ {GATE_PCT:g}% for GEMM and attention: {verdict}")
    if not ok:
        raise typer.Exit(EXIT_GATE)


def _check_measured(prof, as_json: bool) -> None:
    fit = prof.fit.model_dump()
    m = fit["measured"]
    if as_json:
        print(dumps({"profile": prof.name, "measured": True, "device": m["device"],
                     "command": m["command"], "holdout_fraction": fit["holdout_fraction"],
                     "held_out": fit["error"], "fitted": m["fitted_error"],
                     "rows": m["rows"], "share": m["share"], "exit_code": 0}))
        return
    con = Console(highlight=False)
    con.print(f"[bold]{prof.name}[/]: measured on {m['device']} (torch {m['torch']}), "
              f"{fit['holdout_fraction']:.0%} of each stage's shapes held out "
              f"(seed {fit['holdout_seed']}); median of {m['repeats']} runs after "
              f"{m['warmup']} warm-up")
    _print_measured(con, fit)
    con.print(f"regenerate: {m['command']}")


@profile_app.command("build")
def build(
    model: str = typer.Option(..., "--model", "-m", help="a shipped model's name, or a "
                              "Hugging Face config.json or a folder holding one"),
    gpu: str = typer.Option(..., "--gpu", help="a hastune GPU (h100-80gb, h200-141gb, "
                            "b200-180gb, ...) or a kernel-database system (b200_sxm, gb200, ...)"),
    precision: str | None = typer.Option(None, "--precision", help="weights: bf16 | fp8 | "
                                         "nvfp4 (Blackwell) | mxfp4 | int4 (the experts of "
                                         "such a checkpoint) (default: the checkpoint's)"),
    kv_cache: str = typer.Option("bf16", "--kv-cache", help="KV cache: bf16 | fp8"),
    engine: str = typer.Option("vllm", "--engine", help="whose measured kernels: vllm | "
                               "sglang | trtllm"),
    engine_version: str | None = typer.Option(None, "--engine-version", help="the kernel "
                                              "database's version folder, or newest "
                                              "(default: its current one)"),
    out: Path = typer.Option(..., "--out", "-o", help="profile YAML to write"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Build a calibrated profile for any supported model from aiconfigurator-core's kernel
    tables (pip install 'hastune[kernels]'): what evaluate and tune do on first use for a
    recipe without a shipped profile, written to --out instead of the cache."""
    import time

    from pydantic import ValidationError

    from hastune.calibrate import ondemand
    from hastune.model_ref import WEIGHTS, Engine, Precision
    from hastune.models import load_model

    if not out.parent.is_dir() or out.is_dir():
        raise InputError(out, "--out", "is a folder, or its folder does not exist",
                         "give a file path in an existing folder")
    arch = load_model(model)
    ckpt = arch.llm.checkpoint_precision
    weights = precision or (ckpt if ckpt in WEIGHTS else "bf16")
    try:
        prec = Precision(weights=weights, kv_cache=kv_cache)
    except ValidationError:
        raise InputError(None, "--precision" if weights not in WEIGHTS else
                         "--kv-cache", f"unknown precision {weights}/{kv_cache}",
                         "use bf16, fp8, nvfp4 (Blackwell), mxfp4 or int4 weights and a "
                         "bf16 or fp8 KV cache") from None
    try:
        eng = Engine(name=engine, version=engine_version)
    except ValidationError:
        raise InputError(None, "--engine", f"unknown engine {engine!r} or version "
                         f"{engine_version!r}", "use vllm, sglang or trtllm (and a "
                         "version folder of the kernel database, or newest)") from None
    t0 = time.perf_counter()
    data, text = ondemand.build(ondemand.Request(arch, gpu, prec, eng), fields=("--model",
                                                                                "--gpu"))
    try:
        ondemand.write_atomic(out, text)
    except OSError as exc:
        raise InputError(out, "--out", f"cannot be written ({exc.strerror or exc})",
                         "give a writable path") from None
    wall = time.perf_counter() - t0
    summary = {"profile": str(out), "name": data["name"], "model": data["model"],
               "gpu": data["gpu"], "tp": data["tp"], "tp_degrees": [data["tp"],
                                                                   *data["variants"]],
               "precision": prec.model_dump(), "engine": eng.model_dump(),
               "source": data["source"], "min_pp": data.get("min_pp", 1), "wall_s": wall}
    if as_json:
        print(dumps({**summary, "exit_code": 0}))
        return
    Console(highlight=False).print(
        f"wrote [bold]{out}[/] ({data['name']}; {prec.label}; tp "
        f"{', '.join(map(str, summary['tp_degrees']))}; {wall:.1f} s)\n{data['source']}\n"
        + (f"larger than one node: its weights need {summary['min_pp']} pipeline stages "
           f"(deployments with pp ≥ {summary['min_pp']})\n" if summary["min_pp"] > 1 else "")
        + f"check it against held-out kernel rows: hastune profile check {out}")
