"""`hastune calibrate RUN... --profile P --out P2.yaml`: re-fit a profile's latency forms from
the step timings the engine recorded in real runs (hastune/calibrate/from_runs.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps
from hastune.errors import InputError


def _pct(e: dict | None) -> str:
    if not e:
        return "—"
    return f"{e['median_pct']:.1f}% / {e['p90_pct']:.1f}% / Σ {e['total_pct']:+.1f}%"


@app.command()
def calibrate(
    runs: list[Path] = typer.Argument(..., help="run records with engine step timings: the "
                                      "JSON of `evaluate --evaluator real --json` or "
                                      "`serve --recipe R --json`"),
    profile: Path = typer.Option(..., "--profile", "-p", help="the profile to re-fit"),
    out: Path = typer.Option(..., "--out", "-o", help="where to write the re-fitted profile"),
    seed: int = typer.Option(0, "--seed", help="which steps are held out"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Re-fit the profile's encode, prefill and decode forms from the engine's recorded steps
    and write the result to --out; prints each stage's error against the recorded steps
    before and after (median / P90 relative error; held out: on the quarter of the steps not
    fitted).

    Exit codes: 0 written; 2 bad input."""
    from hastune.calibrate.from_runs import load_runs, recalibrate, write_profile
    from hastune.profile import load_profile

    if out.resolve() == profile.resolve():
        raise InputError(out, "--out", "would overwrite the profile it re-fits",
                         "write to another file, e.g. P-calibrated.yaml")
    try:
        prof = load_profile(profile)
    except FileNotFoundError:
        raise InputError(profile, "--profile", "no such profile", "give a profile YAML "
                         "(e.g. profiles/cpu/ref-small-1core.yaml)") from None
    probes = load_runs(runs)
    new, fits = recalibrate(prof, probes, seed=seed)
    cmd = "hastune calibrate " + " ".join(shlex.quote(str(r)) for r in runs) + \
        f" --profile {shlex.quote(str(profile))} --out {shlex.quote(str(out))}"
    head = (f"# Re-fitted from {sum(f.rows for f in fits)} engine steps of {len(runs)} "
            f"run(s) ({len(probes)} probes) on {profile}.\n# Regenerate: {cmd}\n")
    write_profile(new, out, head)
    if as_json:
        print(dumps({"profile": str(profile), "out": str(out), "probes": len(probes),
                     "stages": [f.as_dict() for f in fits], "exit_code": 0}))
        return
    tab = Table(title=f"{profile} → {out}: error against {sum(f.rows for f in fits)} "
                "recorded steps (median / P90 |error|, Σ: total seconds)")
    for c in ("stage", "steps", "before", "after", "held out: before", "after ", "how"):
        tab.add_column(c)
    for f in fits:
        tab.add_row(f.stage, str(f.rows), _pct(f.before), _pct(f.after),
                    _pct(f.held_out_before), _pct(f.held_out_after), f.method)
    con = Console(highlight=False)
    con.print(tab)
    for f in fits:
        if f.new != f.old:
            con.print(f"  {f.stage}: " + ", ".join(f"{k} {f.new[k]:.4g}" for k in f.new))
    con.print(f"wrote {out}")
