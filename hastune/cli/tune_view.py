"""What `hastune tune` shows while it runs (a hastune.tune.Progress): a live table on a
terminal, a line per trial otherwise, nothing with --json; the recheck stage likewise; and the
result at the end."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from hastune.cli.common import dumps, fmt_s, print_caveats, terms_line
from hastune.cost import cost_line
from hastune.errors import EXIT_GATE, EXIT_INTERRUPTED, EXIT_NO_CONFIG
from hastune.tune.progress import Progress, config_line


class TuneView(Progress):
    """The live view: reads the study (so it shows every worker's trials)."""

    def __init__(self, as_json: bool, recheck: int = 0):
        self.console = Console(stderr=True, highlight=False)
        self.as_json, self.k = as_json, recheck
        self.lines = not as_json and not self.console.is_terminal  # a line per trial
        self.live: Live | None = None
        self.rechecking: RecheckView | None = None
        self.tuner: Any = None
        self.study: Any = None
        self.t0 = time.perf_counter()
        self.seen = 0

    def started(self, tuner: Any, study: Any, resumed: int) -> None:
        self.tuner, self.study, self.seen = tuner, study, resumed
        if resumed:
            self.console.print(f"resuming study {tuner.study_name!r}: {resumed} evaluations "
                               "recorded")
        if self.console.is_terminal and not self.as_json:
            self.live = Live(self.render(), console=self.console, refresh_per_second=4)
            self.live.start()

    def render(self) -> Table:
        from hastune.tune.runner import evaluated_trials, trial_goodput

        trials = self.study.get_trials(deepcopy=False)
        evals = sorted(evaluated_trials(self.study), key=lambda t: t.number)
        target = self.tuner.opts.trials
        best = max(evals, key=lambda t: t.value or 0.0, default=None)
        el = time.perf_counter() - self.t0
        done_now = max(len(evals) - self.seen, 0)
        eta = (el / done_now * (target - len(evals))) if done_now else float("nan")
        rep = self.study.user_attrs.get("prune_report", {})
        t = Table(title=f"hastune tune — {self.tuner.recipe.name} "
                  f"({self.tuner.opts.sampler}, seed {self.tuner.seed})", show_header=False)
        skipped = sum(1 for x in trials
                      if "reason" in x.user_attrs or x.user_attrs.get("duplicate"))
        t.add_row("evaluations", f"{len(evals)} / {target}   (trials {len(trials)}, skipped "
                  f"{skipped}: pruned, infeasible or already evaluated)")
        if rep:
            t.add_row("pruned", f"{rep.get('total', 0) - rep.get('kept', 0)} of "
                      f"{rep.get('total', 0)} configs: " + ", ".join(
                          f"{k} {v}" for k, v in rep.get("rules", {}).items() if v))
        if evals:
            last = evals[-1]
            t.add_row("last", f"#{last.number} {config_line(last.user_attrs.get('config'))} → "
                      f"{trial_goodput(last):.3f} req/s" + _per_dollar(last)
                      + (" (stopped early)" if
                                                    last.user_attrs.get("early_stopped") else ""))
        if best is not None:
            t.add_row("best", f"[bold]{trial_goodput(best):.3f} req/s[/]{_per_dollar(best)} "
                      f"{config_line(best.user_attrs.get('config'))}")
        t.add_row("elapsed / ETA", f"{el:.1f} s / " + (f"{eta:.0f} s" if eta == eta else "-"))
        return t

    def trial(self, trial: Any) -> None:
        if self.lines:
            from hastune.tune.runner import trial_goodput

            note = ("  (stopped early: below the best)" if trial.user_attrs.get("early_stopped")
                    else "")
            self.console.print(f"  #{trial.number:<4} "
                               f"{config_line(trial.user_attrs.get('config'))}"
                               f"  → {trial_goodput(trial):8.3f} req/s{_per_dollar(trial)}"
                               f"{note}")
        self.refresh()

    def refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())

    def stopped(self) -> None:
        if self.live is not None:
            from hastune.tune.workers import storage_errors

            try:
                self.live.update(self.render())
            except storage_errors():
                pass
            self.live.stop()

    def recheck(self, kind: str, info: dict) -> None:
        if self.rechecking is None:
            self.rechecking = RecheckView(self.console, self.k, not self.as_json).__enter__()
        self.rechecking(kind, info)

    def finish(self, summary: dict | None) -> None:
        """The recheck's live table closed, and its comparison printed."""
        if self.rechecking is not None:
            self.rechecking.__exit__(None, None, None)
            if summary is not None:
                self.rechecking.table(summary)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


class RecheckView:
    def __init__(self, console: Console, k: int, enabled: bool):
        self.fmt = config_line
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


def report(res: Any, view: TuneView, max_regression: float) -> None:
    """Print the result (the summary; with --json, as JSON) and exit with its code."""
    from hastune.cli.report import fail

    view.finish(res.summary)
    if res.summary is None:  # the study could not be read back or the outputs written
        fail(res.failures)
    if res.recheck_error is not None:  # the outputs hold what was measured before it
        raise res.recheck_error
    s, con = res.summary, view.console
    if view.as_json:
        print(dumps(s))
    else:
        cost = cost_line({k: s[k] for k in ("cost_per_hour", "goodput_per_dollar") if k in s})
        con.print(f"best: [bold]{s['goodput_rps']:.3f} req/s[/] ({s['goodput_per_gpu']:.3f} per "
                  f"GPU{'; ' + cost if cost else ''}) with {config_line(s['best_config'])}"
                  + (f" (objective {s['objective']})" if s.get("objective", "goodput")
                     != "goodput" else ""))
        con.print("searched: " + (f"what {s['target']} can launch (--target; all: every "
                                   "configuration)" if s.get("target") else
                                   "every configuration (--target all)")
                  + (f" — {s['target_note']}" if s.get("target_note") else ""))
        if "engine_terms" in s:
            con.print(escape(terms_line(s["engine_terms"])))
        print_caveats(con, s.get("caveats", []))
        con.print(f"{s['evaluations']} evaluations, {s['trials']} trials in {s['wall_s']:.1f} "
                  f"s on {s['workers']} worker(s); stopped: {escape(s['stopped'])}; wrote "
                  + ", ".join(str(f) for f in res.files))
        line = deploy_line(s)
        if line:
            con.print(escape(line))
        if s["exit_code"] == EXIT_NO_CONFIG:
            con.print(f"[red]no configuration meets the SLOs[/]: "
                      f"{escape(s['no_config_reason'])}")
        if s["exit_code"] == EXIT_GATE:
            con.print(f"[red]regression: {s['goodput_rps']:.3f} < baseline "
                      f"{s['baseline_goodput_rps']:.3f} req/s by more than "
                      f"{max_regression:.0%}[/]")
    if res.interrupted:
        con.print("interrupted: finished trials are in the study; run the same command to "
                  "resume")
        sys.exit(EXIT_INTERRUPTED)
    if res.failures:
        fail(res.failures, json_said=view.as_json)  # with --json the summary printed says it
    if res.exit_code:
        sys.exit(res.exit_code)


def _per_dollar(t: Any) -> str:
    """', N per dollar' of a trial recorded with a price ('' without)."""
    v = t.user_attrs.get("goodput_per_dollar")
    return f", {v:.4g} per dollar" if v is not None else ""


def deploy_line(s: dict) -> str | None:
    """One line on what DIR/deploy/ holds when it is not simply the best's launch files."""
    d = s.get("deploy")
    if not d or (d.get("written") and not d.get("instead_of_best")):
        return None
    engine = d["engine"]
    if d.get("refused"):  # the engine refuses the target itself, whatever the configuration
        return f"deploy/{engine}: nothing to launch was written: {d['why']}"
    why = ((s.get("engines") or {}).get(engine) or {}).get("why") or d.get("why") or ""
    if d.get("instead_of_best"):
        g, best = d["goodput_rps"], s["goodput_rps"]
        return (f"deploy/{engine}: {engine} cannot launch the best as tuned ({why}); it holds "
                f"the best {engine} can: trial #{d['trial']} at {g:.3f} req/s "
                f"({g / best:.0%} of the best), config in {d['dir']}/config.yaml")
    return (f"deploy/{engine}: nothing to launch was written: {why or 'see its README.md'}; "
            f"no configuration evaluated can be launched by {engine} as tuned — tune with "
            f"--target {engine} for the best it can")
