"""README.md of an export: what the deployment is for, its instances (role, GPUs, port, the
engine flags each got), what the engine does not express, and how to start it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from hastune import archs
from hastune.archs.base import ConfigBase
from hastune.export import flags as flagsets
from hastune.export.scripts import one_line, quote
from hastune.export.target import Target

if TYPE_CHECKING:
    from hastune.export import ExportResult


def code(text: str) -> str:
    """`text` as one Markdown code span on one line (its own backticks fenced by more, a
    newline or other unprintable character escaped, `|` escaped for a table cell)."""
    text = one_line(text).replace("|", "\\|")
    fence = "`" * (1 + max((len(r) for r in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def shell(argv: list[str]) -> str:
    """A command as the scripts write it (hastune's variables expand, the rest is quoted)."""
    return " ".join(quote(w) for w in argv)


def _sources(programs: list[str]) -> list[str]:
    out = []
    for prog in dict.fromkeys(programs):
        d = flagsets.load(prog)
        src = d["source"]
        where = src.get("wheel") or f"{src.get('repo')}@{src.get('commit', '')[:12]}"
        out.append(f"- {d['engine']} {d['version']}: flags from {where} "
                   f"({src.get('parser') or src.get('read')}), "
                   f"hastune/export/{flagsets.FILES[prog]}")
    return out


def write(res: ExportResult, cfg: ConfigBase, t: Target) -> Path:
    p = res.plan
    arch = archs.get(cfg.architecture)
    # every value from the config, target or recipe is kept on its line (one_line, code)
    lines = [one_line(f"# {res.engine} launch files for {arch.describe(cfg)}"), "",
             one_line(f"Tuned by hastune {t.hastune} for recipe {code(t.recipe)}: model "
                      f"{code(t.model_label)}"
                      + (f" (sha256 of config.json {code(t.model_config_sha256[:12])}…)"
                         if t.model_config_sha256 else "")
                      + (f", {t.gpus} GPUs of types {', '.join(t.node_sizes)}" if t.node_sizes
                         else f", {t.gpus} x {t.gpu}")
                      + f", {t.precision.label}; P{t.slo.percentile:g} "
                      f"TTFT {t.slo.ttft_s:g} s / TPOT {t.slo.tpot_s:g} s; goodput "
                      f"{t.goodput_rps:.3f} req/s ({t.goodput_per_gpu:.3f} per GPU) as "
                      "hastune evaluated it."), ""]
    if p.blocking:
        lines += ["## Not expressible", "",
                  f"{res.engine} cannot run this deployment as tuned, so no launch file was "
                  "written:", ""]
        lines += [f"- {one_line(b)}" for b in p.blocking]
        lines += ["", "`hastune export CONFIG --engine ENGINE --closest` writes the nearest "
                  "deployment the engine can run and lists what it changes.", ""]
    if p.closest:
        lines += ["## Closest expressible deployment (not the tuned one)", ""]
        lines += [f"- {one_line(c)}" for c in p.closest] + [""]
        if p.closest_config is not None:
            lines += ["As a hastune config: closest_config.yaml (`hastune evaluate RECIPE "
                      "--config closest_config.yaml` gives its goodput in the simulator).", ""]
    if res.commands:
        lines += ["## Instances", "", "| name | role | node | GPUs | port | command |",
                  "| --- | --- | --- | --- | --- | --- |"]
        inst = {i.name: i for i in p.instances}
        kinds = {i.node: i.gpu_type for i in p.instances if i.gpu_type}
        if kinds:  # pools on several GPU types: each node holds one
            lines[-2:-2] = ["Nodes by GPU type (run launch.sh on each with its NODE_RANK): "
                            + ", ".join(f"node {n}: {one_line(t)}"
                                        for n, t in sorted(kinds.items())) + ".", ""]
        for c in res.commands:
            i = inst.get(c.name)
            gpus = ",".join(map(str, i.gpus)) if i else c.env.get("CUDA_VISIBLE_DEVICES", "")
            if i is not None and i.mps_percent is not None:
                gpus += f" ({i.mps_percent}% of SMs, MPS)"
            lines.append(one_line(f"| {c.name} | {i.role if i else c.name} | {c.node} | "
                                  f"{gpus} | {c.port} | {code(shell(c.argv()))} |"))
        start = ("`kubectl apply -f dgd.yaml` with Dynamo 1.6.1's operator installed (each "
                 "role is one component; replicas = its instances)." if res.engine == "dynamo"
                 else "")
        lines += ["", "## Start", "", start] if start else ["", "## Start", "",
                  "`bash launch.sh` starts every role script in order, waits for each "
                  "server's /health, then starts the router; Ctrl-C stops all of them. Set "
                  "`MODEL` (default: the target's), `HOST` (default 127.0.0.1), `LOG_DIR`, "
                  "`EXTRA_ARGS` (appended to every server), and on several nodes `NODE_RANK` "
                  "and `NODE_ADDR_<k>` (run launch.sh on each node)."]
        lines += ["", "Pinned versions (every flag above exists there; tests/export checks "
                  "it):", ""]
        lines += _sources([c.program for c in res.commands]) + [""]
    if p.notes:
        lines += ["## Not expressed by the engine", ""]
        lines += [f"- {one_line(n)}" for n in p.notes] + [""]
    path = res.out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
