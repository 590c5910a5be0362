"""The options `hastune tune` and `hastune plan` share, and tune's own: one place for their
names, defaults and help."""

from __future__ import annotations

from pathlib import Path

import typer

from hastune.evaluators import EVALUATORS

RECIPE = typer.Argument(..., help="recipe YAML")
SAMPLER = typer.Option("tpe", "--sampler", help="tpe | gp | skopt | random")
EVALUATOR = typer.Option("sim", "--evaluator", help="what measures each trial: "
                         f"{', '.join(EVALUATORS)} (real: the engine)")
STORAGE = typer.Option(None, "--storage", help="optuna storage URL, or journal:PATH "
                       "(default: sqlite DIR/study.db)")
SEED = typer.Option(None, "--seed", help="sampler seed (default: recipe seed)")
JSON = typer.Option(False, "--json", help="print the result as JSON")
NO_PLOTS = typer.Option(False, "--no-plots", help="skip the PNG plots")

TRIALS = typer.Option(40, "--trials", "-n", help="evaluations in the study (total)")
STUDY = typer.Option(None, "--study", help="study name (default: from recipe)")
WORKERS = typer.Option("auto", "--workers", "-w", help="processes that evaluate: auto (the "
                       "cores this machine gives it; 1 on an engine) or a number — the result "
                       "is the same for any")
TARGET = typer.Option("auto", "--target", help="search only what this engine can launch as "
                      "tuned: vllm, sglang, dynamo or runners; auto (default): the recipe's "
                      "engine (vllm unless it names sglang; every configuration for trtllm); "
                      "all: every configuration (EAServe's dynamic SM split runs on runners/ "
                      "only). candidates.csv and the summary say which engines can launch each")
PATIENCE = typer.Option(None, "--patience", help="stop once this many evaluations in a row "
                        "did not raise the best goodput (the summary's `stopped` says why it "
                        "stopped); default: run --trials evaluations")
IN_FLIGHT = typer.Option(2, "--in-flight", help="evaluations under way at once: each is "
                         "proposed while the ones before it still run (the result depends on "
                         "this, not on --workers)")
TUNE_OUT = typer.Option(Path("tune-out"), "--out", "-o", help="output directory DIR")
NO_PRUNE = typer.Option(False, "--no-prune", help="skip stage 1: no pruning, no bound "
                        "ranking, no warm start (plain Bayesian optimisation)")
EARLY_STOP = typer.Option(False, "--early-stop", help="stop a trial's search once a full probe "
                          "fails at or below the best goodput so far (it cannot win: its "
                          "answer would be below; its recorded goodput is then a lower bound); "
                          "a configuration that can win is searched in full")
BASELINE = typer.Option(None, "--baseline", help="a previous summary.json to compare against")
MAX_REGRESSION = typer.Option(0.05, "--max-regression", help="allowed goodput drop vs "
                              "--baseline (share)")
FORCE = typer.Option(False, "--force", help="resume a study tuned with another recipe, "
                     "sampler or evaluator (refused without it), or compare with a --baseline "
                     "of another recipe")
ENGINE = typer.Option(None, "--engine", help="with --evaluator real: each trial launches its "
                      "deployment on vllm or sglang and measures it (docs/deploy.md; one "
                      "worker)")
LAUNCH_CMD = typer.Option(None, "--launch-cmd", help="with --engine: start this command per "
                          "trial instead of the export ({port}: a free port; default "
                          "$HASTUNE_ENGINE_CMD)")
RECHECK = typer.Option(0, "--recheck", help="after the simulated search, the engine "
                       "(runners/) measures the top K configurations, re-fits the profile "
                       "from their steps, re-ranks, and measures what enters the top K; the "
                       "answer is the best measured (0: off)")
RECHECK_ROUNDS = typer.Option(3, "--recheck-rounds", help="measuring rounds of --recheck at "
                              "most")
