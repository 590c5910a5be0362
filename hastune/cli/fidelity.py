"""`hastune fidelity CSV`: how far the simulator is from measured runs of real engines."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps
from hastune.errors import EXIT_GATE, InputError


def _models(items: list[str] | None) -> dict[str, str]:
    out = {}
    for it in items or []:
        name, sep, path = it.partition("=")
        if not sep or not name or not path:
            raise InputError(None, "--model", f"{it!r} is not NAME=DIR",
                             "give the file's model_path, '=', and a folder holding config.json")
        out[name] = path
    return out


@app.command()
def fidelity(
    measurements: Path = typer.Argument(..., help="CSV of measured runs (the silicon format "
                                        "of hastune/data/calibration/e2e/silicon_llama31.csv)"),
    model: list[str] | None = typer.Option(None, "--model", help="NAME=DIR: the config of a "
                                           "model_path the shipped examples/models lack"),
    engine: str | None = typer.Option(None, "--engine", help="only this engine's rows"),
    rows: bool = typer.Option(False, "--rows", help="print every row's errors"),
    write: bool = typer.Option(False, "--write", help="write the fitted terms to "
                               "hastune/engine_fitted.py (what the simulator uses)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    prefill_scale: bool = typer.Option(False, "--prefill-scale", help="fit a sixth term, "
                                       "the prompt tokens' kernel time on top of the kernel "
                                       "scale (held at 1 otherwise; docs/fidelity.md)"),
    shipped: bool = typer.Option(False, "--shipped", help="score the engine terms as shipped "
                                 "(no refit) on every row, a disaggregated one as a fudg "
                                 "deployment of its workers: each scored, or unsupported "
                                 "with why; agg and disagg summarised apart; --rows lists "
                                 "them"),
    cv: str | None = typer.Option(None, "--cv", help="model | gpu: fit the terms (as "
                                  "--write would) on every model's (GPU's) rows but one's and "
                                  "score that one's, for each (a model: an architecture with "
                                  "all its checkpoints); per engine the mean over "
                                  "held-out models (GPUs) beside the in-sample fit "
                                  "(docs/fidelity.md)"),
    share: str | None = typer.Option(None, "--share", help="with --cv: how the terms are "
                                     "shared — gpu (a set per engine and GPU of 30 rows or "
                                     "more, else the engine's pooled one), engine (one "
                                     "per engine), kernel (one per engine, a kernel scale per "
                                     "GPU), models (a set per engine and GPU whose rows come "
                                     "from two architectures or more, else the engine's), "
                                     "client, "
                                     "client-kernel, clients, clients-kernel "
                                     "(docs/fidelity.md); default: as the shipped terms are "
                                     "fitted"),
) -> None:
    """Simulate every measured run (one aggregated instance, closed-loop clients, fixed
    lengths), fit the engine terms per (engine, GPU) with folds that leave whole isl × osl
    shapes out, and print the errors of mean TTFT and TPOT: cross-validated, fitted, and with
    the kernels alone; by engine, GPU, isl × osl shape, TP and concurrency. Exit 0 when every
    engine with ≥ 40 rows meets the bar (cross-validated median |error| ≤ 20% TTFT, ≤ 8% TPOT,
    bias within ±10%), 4 otherwise, 2 on bad input."""
    from hastune.fidelity import score
    from hastune.fidelity.rows import ENGINES
    from hastune.fidelity.write import write_fitted

    if engine is not None and engine not in ENGINES:
        raise InputError(None, "--engine", f"unknown engine {engine!r}",
                         f"use one of {', '.join(ENGINES)}, or leave --engine out for all")
    con = Console(stderr=True, highlight=False)
    if cv is not None:
        if write or shipped:
            raise InputError(None, "--cv", "cross-validates the fit: writes nothing, scores "
                             "no shipped terms", "drop --write / --shipped")
        _cv(measurements, cv, _models(model), engine, rows, as_json, prefill_scale, con,
            share)
        return
    if shipped:
        if write or prefill_scale:
            raise InputError(None, "--shipped", "scores the shipped terms: nothing is fitted",
                             "drop --write / --prefill-scale, or drop --shipped to fit")
        _shipped(measurements, _models(model), engine, rows, as_json, con)
        return
    only = (lambda c: c.engine == engine) if engine else None
    with _bar(con, as_json) as progress:
        card = score.run(measurements, _models(model), only=only, progress=progress,
                         prefill=prefill_scale)
    if engine is not None and not card.rows:
        raise InputError(measurements, "--engine", f"no aggregated rows of engine {engine!r}",
                         "give the engine of some of its rows, or leave --engine out")
    agg = score.aggregate(card)
    ok = score.passes(agg)
    code = 0 if ok and all(ok.values()) else EXIT_GATE
    out = {"file": str(measurements), "rows": len(card.rows), "wall_s": card.wall_s,
           "aggregate": agg, "passes": ok, "exit_code": code,
           "terms": {f"{e}@{g}": dict(zip(score.F.NAMES, map(float, th)))
                     for (e, g), th in card.terms.items()},
           "folds": {f"{e}@{g}": f for (e, g), f in card.folds.items()}}
    if rows:
        out["per_row"] = [{"id": r.case.id, "engine": r.case.engine, "gpu": r.case.gpu,
                           "tp": r.case.tp, "isl": r.case.isl, "osl": r.case.osl,
                           "clients": r.case.clients, "ttft_ms": r.case.ttft_ms,
                           "tpot_ms": r.case.tpot_ms, "cv_ttft_ms": r.cv_ttft,
                           "cv_tpot_ms": r.cv_tpot, "fit_ttft_ms": r.fit_ttft,
                           "fit_tpot_ms": r.fit_tpot} for r in card.rows]
    if write:
        out["written"] = str(write_fitted(card, measurements))
    if as_json:
        print(dumps(out))
    else:
        _print(agg, ok, card, rows)
        if write:
            print(f"wrote {out['written']}")
    if code:
        raise typer.Exit(code)


@contextmanager
def _bar(con: Console, quiet: bool):
    """A progress bar on stderr (none with --json): yields `progress(what, done, total)`."""
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}"
                  "/{task.total}"), TimeElapsedColumn(), console=con, transient=True,
                  disable=quiet) as bar:
        task = bar.add_task("simulating", total=None)

        def progress(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        yield progress


def _shipped(measurements: Path, models: dict[str, str], engine: str | None, rows: bool,
             as_json: bool, con: Console) -> None:
    """`--shipped`: every row with the shipped terms; a table row per engine and mode (agg and
    disagg each on its own), or one JSON."""
    from hastune.fidelity import shipped

    with _bar(con, as_json) as progress:
        res = shipped.score(measurements, models,
                            only=(lambda r: r.engine == engine) if engine else None,
                            progress=progress)
    if engine is not None and not res["rows"]:
        raise InputError(measurements, "--engine", f"no rows of engine {engine!r}",
                         "give the engine of some of its rows, or leave --engine out")
    if not rows:
        res = {k: v for k, v in res.items() if k != "rows"}
    if as_json:
        print(dumps(res))
        return
    out = Console(highlight=False)
    per_mode = ", ".join(f"{m} {b['coverage']:.0%} of {b['rows']}"
                         for m, b in res["modes"].items())
    t = Table(title=f"shipped engine terms on {measurements} ({res['coverage']:.0%} of rows "
              f"scored: {per_mode}); errors in %: median |error| / P90 |error| / bias")
    for col in ("engine", "mode", "rows", "scored", "TTFT", "TPOT", "unsupported, by reason"):
        t.add_column(col)

    def pct(b: dict, k: str) -> str:
        if b[f"{k}_median_abs_pct"] is None:
            return "-"
        return (f"{b[f'{k}_median_abs_pct']:.0f} / {b[f'{k}_p90_abs_pct']:.0f} / "
                f"{b[f'{k}_bias_pct']:+.0f}")

    for m, mb in res["modes"].items():  # each mode on its own: agg, then disagg
        for e, b in mb["engines"].items():
            why = "; ".join(f"{n} {r}" for r, n in list(b["unsupported_by"].items())[:3])
            t.add_row(e, m, str(b["rows"]), str(b["scored"]), pct(b, "ttft"), pct(b, "tpot"),
                      why or "-")
    out.print(t)
    for r in res.get("rows", []):
        tt, tp = r["ttft_ms"], r["tpot_ms"]
        sim = (f"TTFT {tt['measured']:.4g} → {tt['simulated']:.4g} ms, TPOT "
               f"{tp['measured']:.4g} → {tp['simulated']:.4g} ms"
               if r["status"] == "scored" else r["reason"])
        out.print(escape(f"{r['id']}: {r['engine']} {r['gpu']} {r['mode']}: {sim}"))


def _cv(measurements: Path, by: str, models: dict[str, str], engine: str | None, rows: bool,
        as_json: bool, prefill: bool, con: Console, share: str | None = None) -> None:
    """`--cv model|gpu`: per engine the held-out figures (each model or GPU held out in
    turn) and the in-sample fit's; exit 4 when an engine with ≥ cv.MIN_ROWS rows misses the
    bar on the held-out figures."""
    from hastune.fidelity import cv, score

    cv.key_of(by)  # refuses an unknown one before anything runs
    if share is not None and share not in score.SHARES:
        raise InputError(None, "--share", f"unknown {share!r}",
                         f"use one of {', '.join(score.SHARES)}")
    with _bar(con, as_json) as progress:
        res = cv.run(measurements, by, models,
                     only=(lambda c: c.engine == engine) if engine else None,
                     progress=progress, prefill=prefill, share=share)
    code = EXIT_GATE if not all(res["passes"].values()) else 0
    res["exit_code"] = code
    if not rows:
        res = {k: v for k, v in res.items() if k != "per_row"}
    if as_json:
        print(dumps(res))
    else:
        out = Console(highlight=False)
        t = Table(title=f"leave-one-{by}-out ({res['share']}) on {measurements}: {res['rows']} of "
                  f"{res['agg_rows']} aggregated rows simulated; the mean over held-out {by}s "
                  "of median |error| / bias, %")
        for c in ("engine", by, "rows", "TTFT held out", "TPOT held out", "TTFT in-sample",
                  "TPOT in-sample"):
            t.add_column(c, overflow="fold")

        def two(b: dict | None, k: str) -> str:
            if b is None or b[f"{k}_median_abs_pct"] is None:
                return "-"
            return f"{b[f'{k}_median_abs_pct']:.1f} / {b[f'{k}_bias_pct']:+.1f}"

        for e, b in res["engines"].items():
            for k, v in b[f"{by}s"].items():
                short = " + ".join(n.split("/")[-1] for n in k.split(" + "))  # checkpoints
                t.add_row(e, short, str(v["rows"]), two(v["cv"], "ttft"),
                          two(v["cv"], "tpot"), two(v["fit"], "ttft"), two(v["fit"], "tpot"))
            t.add_row(f"[b]{e}[/b]", f"mean of {b['cv']['held_out'] if b['cv'] else 0}",
                      str(b["rows"]), two(b["cv"], "ttft"), two(b["cv"], "tpot"),
                      two(b["fit"], "ttft"), two(b["fit"], "tpot"), end_section=True)
        out.print(t)
        for e, b in res["engines"].items():
            if b.get("note"):
                out.print(f"{e}: {b['note']}")
        verdict = ", ".join(f"{e} {'meets' if v else 'misses'}" for e, v in res["passes"].items())
        out.print(f"{res['wall_s']:.0f} s; the bar (held out, engines with ≥ {cv.MIN_ROWS} rows: "
                  f"TTFT ≤ 20%, TPOT ≤ 10%, bias within ±10%): {verdict or 'no engine'}")
        for r in res.get("per_row", []):
            out.print(escape(f"{r['id']}: {r['engine']} {r['model']} {r['gpu']}: TTFT "
                             f"{r['ttft_ms']:.4g} → {r['cv_ttft_ms'] or float('nan'):.4g} ms, "
                             f"TPOT {r['tpot_ms']:.4g} → {r['cv_tpot_ms'] or float('nan'):.4g} "
                             "ms"))
    if code:
        raise typer.Exit(code)


def _fmt(b: dict) -> str:
    if not b.get("n"):
        return "-"
    return f"{b['median_abs_pct']:.1f} / {b['p90_abs_pct']:.0f} / {b['bias_pct']:+.1f}"


def _print(agg: dict, ok: dict, card, rows: bool) -> None:
    con = Console(highlight=False)
    for key, title in (("engine", "engine"), ("engine_gpu", "engine @ GPU"),
                       ("shape", "engine @ GPU, isl × osl"), ("tp", "TP"),
                       ("clients", "concurrency")):
        t = Table(title=f"by {title}: median |error| / P90 |error| / bias, %")
        for c in (title, "rows", "TTFT cv", "TPOT cv", "TTFT fit", "TPOT fit", "TTFT kernels",
                  "TPOT kernels"):
            t.add_column(c, justify="right" if c != title else "left")
        for k, b in agg[key].items():
            t.add_row(k, str(b["rows"]), *(_fmt(b[s][m]) for s in ("cv", "fit", "kernels")
                                           for m in ("ttft", "tpot")))
        con.print(t)
    for (e, g), th in card.terms.items():
        k, it, seq, fe, st, pk = th
        con.print(f"{e}@{g}: kernel_scale {k:.3f} (prompts × {pk:.3f}), iteration "
                  f"{it * 1e3:.2f} ms, per sequence "
                  f"{seq * 1e6:.1f} µs, front end {fe * 1e3:.1f} ms + {st * 1e3:.2f} ms per "
                  "request in flight")
    if rows:
        t = Table(title="rows (ms): measured, cross-validated")
        for c in ("engine", "gpu", "tp", "isl×osl", "c", "TTFT", "cv", "TPOT", "cv"):
            t.add_column(c)
        for r in card.rows:
            c = r.case
            t.add_row(c.engine, c.gpu, str(c.tp), c.shape, str(c.clients), f"{c.ttft_ms:.1f}",
                      f"{r.cv_ttft:.1f}", f"{c.tpot_ms:.2f}", f"{r.cv_tpot:.2f}")
        con.print(t)
    verdict = ", ".join(f"{e} {'meets' if v else 'misses'}" for e, v in ok.items())
    con.print(f"{len(card.rows)} rows in {card.wall_s:.1f} s; the bar (cross-validated): "
              f"{verdict}")
