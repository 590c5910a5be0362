"""`hastune profile check PROFILE`: a calibrated profile's error against measured kernels.

(Measuring a real model on a real device, `hastune profile` proper, waits for the engine's
reference model; see docs/profiles.md.)
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from hastune.cli import app
from hastune.cli.common import dumps
from hastune.errors import InputError

profile_app = typer.Typer(
    help="Calibrated latency profiles. `check` compares a profile's kernel model with the "
         "measured kernel tables it was fitted on. (Measuring a model on your own device is "
         "pending the engine's reference model.)",
    no_args_is_help=True,
)
app.add_typer(profile_app, name="profile")


def _fmt(stat, pct: bool = True) -> tuple[str, str, str]:
    if stat is None:
        return "-", "-", "-"
    if stat.rows == 0 or math.isnan(stat.median_pct):
        return str(stat.rows), "-", "-"
    return str(stat.rows), f"{stat.median_pct:.1f}%", f"{stat.p90_pct:.1f}%"


@profile_app.command("check")
def check(
    profile: Path = typer.Argument(..., help="a calibrated profile YAML (profiles/<gpu>/...)"),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="folder holding kernels/<system>/ "
        "(default: $HASTUNE_CALIBRATION, else <repo>/../shared/calibration)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Error of the profile's kernel predictors on the rows they were fitted on and on the
    held-out rows, per kernel kind (median and P90 |error|). Exit code 1 if a held-out median
    for GEMM or attention is above 10%."""
    from hastune.calibrate.check import GATE_PCT, check_system
    from hastune.calibrate.tables import require_calibration
    from hastune.profile import load_profile

    prof = load_profile(profile)
    if prof.fit is None:
        raise InputError(profile, "fit", "the profile has no fit record, so it was not fitted "
                         "on kernel tables", "check a calibrated profile (profiles/<gpu>/*.yaml, "
                         "made by scripts/make_profiles.py)")
    root = require_calibration(calibration)
    system = prof.fit.calibration
    if not (root / "kernels" / system).is_dir():
        raise InputError(profile, "fit.calibration", f"no kernel tables for {system!r} under "
                         f"{root / 'kernels'}", "point --calibration at the folder the profile "
                         "was made from")
    rows = check_system(root, system, prof.fit.holdout_fraction, prof.fit.holdout_seed)
    ok = all(r.passed for r in rows)
    if as_json:
        print(dumps({
            "profile": prof.name, "calibration": system, "passed": ok, "gate_pct": GATE_PCT,
            "holdout_fraction": prof.fit.holdout_fraction, "holdout_seed": prof.fit.holdout_seed,
            "kernels": {r.kind: {part: (None if s is None else asdict(s)) for part, s in
                                 (("fitted", r.fitted), ("held_out", r.held_out),
                                  ("roofline_only", r.roofline_only))} for r in rows},
            "linear_fit": {k: v.model_dump() for k, v in prof.fit.error.items()}}))
        raise typer.Exit(0 if ok else 1)
    con = Console(highlight=False)
    if not con.is_terminal:
        con.width = max(con.width, 130)  # the table is wide; pipes default to 80 columns
    con.print(f"[bold]{prof.name}[/] (tp {prof.tp}): kernel tables [bold]{system}[/], "
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
        raise typer.Exit(1)
