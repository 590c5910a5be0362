"""The recheck stage of `hastune tune --recheck K` on the console (hastune/tune/recheck.py):
a live table on a terminal, a line per event otherwise, nothing with --json."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from hastune.cli.common import fmt_s


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


class RecheckView:
    def __init__(self, console: Console, k: int, enabled: bool):
        from hastune.cli.tune import _fmt_cfg

        self.fmt = _fmt_cfg
        self.console, self.k, self.enabled = console, k, enabled
        self.stage = f"recheck: the engine measures the simulator's top {k}"
        self.entries: list[Any] = []
        self.t0 = time.perf_counter()
        self.live: Live | None = None

    def __enter__(self) -> RecheckView:
        if self.enabled and self.console.is_terminal:
            self.live = Live(self.render(), console=self.console, refresh_per_second=4)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(*exc)

    def render(self) -> Table:
        t = Table(title=f"hastune tune — {self.stage} ({time.perf_counter() - self.t0:.0f} s)")
        for c in ("config", "sim", "sim recalibrated", "measured", "round"):
            t.add_column(c, justify="left" if c == "config" else "right")
        for e in self.entries:
            t.add_row(self.fmt(e.config), _num(e.sim_goodput_rps),
                      _num(e.sim_recalibrated_rps),
                      "…" if e.measured_goodput_rps is None else _num(e.measured_goodput_rps),
                      str(e.round or "-"))
        return t

    def _say(self, text: str) -> None:
        if self.live is not None:
            self.live.update(self.render())
        elif self.enabled:
            self.console.print(text)

    def __call__(self, kind: str, info: dict) -> None:
        e = info.get("entry")
        if e is not None and e not in self.entries:
            self.entries.append(e)
        if kind == "round":
            self.stage = (f"recheck round {info['round']}: measuring {len(info['new'])} "
                          "configuration(s) on the engine")
            self._say(f"[bold]{self.stage}[/]")
        elif kind == "measure":
            self._say(f"  {self.fmt(e.config)}  (simulated {e.sim_goodput_rps:.3f} req/s"
                      + (f", recalibrated {e.sim_recalibrated_rps:.3f}"
                         if e.sim_recalibrated_rps is not None else "") + ")")
        elif kind == "probe":
            p = info["probe"]
            self._say(f"    rate {p.rate:8.3f} req/s  TTFT P90 {fmt_s(p.ttft_p):>9}  "
                      f"TPOT P90 {fmt_s(p.tpot_p):>9}  "
                      + ("[green]pass[/]" if p.passed else "[red]fail[/]"))
        elif kind in ("measured", "reused"):
            how = "reused its record" if kind == "reused" else f"{e.wall_s:.1f} s"
            self._say(f"  → measured [bold]{e.measured_goodput_rps:.3f} req/s[/] ({how}) "
                      f"{self.fmt(e.config)}")
        elif kind == "resimulate" and info["done"] == 0:
            self.stage = (f"recheck: re-simulating {info['total']} configuration(s) with the "
                          "re-fitted profile")
            self._say(f"  {self.stage}")

    def table(self, summary: dict) -> None:
        """The final comparison, after the stage."""
        if not self.enabled or not summary.get("recheck"):
            return
        t = Table(title="recheck: simulated vs measured goodput (req/s)")
        for c in ("config", "sim", "sim recalibrated", "measured"):
            t.add_column(c, justify="left" if c == "config" else "right")
        for r in summary["recheck"]:
            t.add_row(self.fmt(r["config"]), _num(r["sim_goodput_rps"]),
                      _num(r["sim_recalibrated_rps"]), _num(r["measured_goodput_rps"]))
        self.console.print(t)
        info = summary.get("recheck_info", {})
        self.console.print(f"recheck stopped: {info.get('stop', '')}; re-fitted profile "
                           f"{info.get('profile')}")


def recheck_stage(tuner: Any, study: Any, k: int, rounds: int, summary: dict,
                  console: Console, enabled: bool):
    """Run the recheck, make its best measured configuration the summary's answer, and
    return that configuration's measured GoodputResult (None if nothing was measured) and
    the InputError that stopped it, if one did (the engine could not start, say): what was
    measured before it is kept, and the outputs are written before it is raised."""
    from hastune.errors import InputError
    from hastune.tune.recheck import Runner

    runner = Runner(tuner, study, k, rounds=rounds)
    error = None
    with RecheckView(console, k, enabled) as view:
        runner.on_event = view
        try:
            got = runner.run()
        except InputError as exc:
            error, got = exc, runner.result
    if got is None:  # it stopped before it had candidates
        summary["recheck_info"] = {"error": str(error)}
        return None, error
    if error is not None:
        got.stop = f"stopped by an error: {error.problem}"
    got.apply(summary)
    view.table(summary)
    return (got.best.result if got.best is not None else None), error
