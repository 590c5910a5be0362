"""`hastune export`: a tuned config as the launch files of an engine people run.

    export(cfg, target, "vllm", out)  ->  out/{encode,prefill,decode,replica,router}.sh,
                                          out/launch.sh, out/README.md

Engines: vllm and sglang (shell scripts, hastune.export.engines), dynamo (a
DynamoGraphDeployment manifest, hastune.export.dynamo), runners (hastune's own engine, `hastune
serve`). Every emitted flag is checked against the pinned version's flag set first
(hastune.export.flags); what an engine cannot express is written in README.md and returned in
`notes` (knobs it drops) and `blocking` (the deployment itself: then no script is written
unless `closest`, which emits the nearest expressible deployment and lists what changed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hastune import archs
from hastune.archs.base import ConfigBase
from hastune.export import flags as flagsets
from hastune.export.flags import Command
from hastune.export.plan import Plan, plan
from hastune.export.target import Target

ENGINES = ("vllm", "sglang", "dynamo", "runners")


@dataclass
class ExportResult:
    engine: str
    out: Path
    plan: Plan
    files: list[Path] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)

    @property
    def written(self) -> bool:
        return not self.plan.blocking

    def lines(self) -> list[str]:
        """What to print: where the files are, what was left out or changed."""
        p = self.plan
        out = []
        if p.blocking:
            out.append(f"{self.engine}: this deployment cannot be expressed; nothing to launch "
                       f"was written (see {self.out / 'README.md'}):")
            out += [f"  - {b}" for b in p.blocking]
            out.append("  pass --closest for the nearest deployment the engine can run")
            return out
        out.append(f"{self.engine}: wrote {len(self.files)} files to {self.out}"
                   + (f" (start: bash {self.out / 'launch.sh'})"
                      if (self.out / "launch.sh").exists() else ""))
        if p.closest:
            out.append("  closest expressible deployment, not the tuned one:")
            out += [f"  - {c}" for c in p.closest]
            if p.closest_config is not None:
                out.append(f"  as a hastune config: {self.out / 'closest_config.yaml'} "
                           "(hastune evaluate RECIPE --config it: its goodput)")
        if p.notes:
            out.append("  not expressed by the engine:")
            out += [f"  - {n}" for n in p.notes]
        return out


def blocking_for(cfg: ConfigBase, gpus_per_node: int | dict[str, int], engine: str,
                 backend: str = "vllm", architecture: str | None = None,
                 multimodal: bool = False) -> list[str]:
    """Why `engine` cannot launch `cfg` as tuned — what `export` would refuse it for, without
    writing anything (empty: it can). `backend`: Dynamo's engine; `architecture` (the model's
    Hugging Face architecture) and `multimodal` (the workload sends media): what the engine's
    pinned model registry says of the model (hastune.export.models)."""
    p = plan(cfg, gpus_per_node, place=False)  # what blocks it needs no GPU ids
    _model_check(p, engine, backend, architecture, multimodal)
    if engine == "runners":
        p = _runners_plan(cfg, p)
    elif engine == "dynamo" and not p.blocking:
        from hastune.export.dynamo import backend_blocking

        why = backend_blocking(p, backend)
        return [why] if why else []
    return list(p.blocking)


def _model_check(p: Plan, engine: str, backend: str, architecture: str | None,
                 multimodal: bool) -> None:
    """Add to `p.blocking` what the engine (Dynamo: its backend) says of the model."""
    from hastune.export.models import model_blocking

    if p.blocking or engine == "runners":
        return
    p.model_blocking = model_blocking(backend if engine == "dynamo" else engine, architecture,
                                      p.topology, multimodal)
    p.blocking += p.model_blocking


# weights an engine takes from a checkpoint in that format only (it does not quantize to it as
# it loads): its name, what the engine does with what, the checkpoint, its quantization_config
OWN_CHECKPOINT = {
    "nvfp4": ("NVFP4", "loads", "weights", "an NVFP4 checkpoint (ModelOpt)",
              "quant_method: modelopt, quant_algo: NVFP4"),
    "mxfp4": ("MXFP4", "runs", "experts", "an MXFP4 checkpoint (gpt-oss's)",
              "quant_method: mxfp4"),
    "int4": ("int4", "runs", "experts", "a compressed-tensors int4 checkpoint (Kimi K2.5's)",
             "quant_method: compressed-tensors, 4-bit int weight groups"),
}


def check_model(t: Target, engine: str) -> None:
    """Refuse a model an engine would not read as its model: empty, or starting with `-` (a
    flag to the engine). Any other name or path is written as one literal word."""
    from hastune.errors import InputError

    m = t.engine_model
    if engine != "runners" and (not m or m.startswith("-")):
        raise InputError(None, "target.model", f"the model {m!r} "
                         + ("is empty" if not m else "starts with '-': the engine would read "
                            "it as a flag"),
                         "name the model by a path or a Hugging Face repository that does not "
                         "start with '-' (./-name for a folder named so)")
    w = t.precision.weights
    if engine != "runners" and w in OWN_CHECKPOINT and t.checkpoint_precision != w:
        name, verb, what, ckpt, how = OWN_CHECKPOINT[w]
        raise InputError(None, "precision.weights", f"{w} weights, but the model's config is "
                         f"a {t.checkpoint_precision} checkpoint's: {engine} {verb} {name} "
                         f"{what} from {ckpt} and does not quantize to {name} as it loads",
                         f"name the {name} checkpoint as the model (its config.json has "
                         f"quantization_config {how}), or tune with precision.weights fp8 "
                         "or bf16")


def check_commands(cmds: list[Command]) -> None:
    bad = [f"{c.name}: {p}" for c in cmds for p in flagsets.problems(c)]
    if bad:  # a bug of hastune's, never the user's input
        raise AssertionError("emitted flags the pinned engine does not accept: " + "; ".join(bad))


def export(cfg: ConfigBase, target: Target, engine: str, out: str | Path,
           closest: bool = False, dummy: bool = False, config_file: str | None = None,
           backend: str | None = None) -> ExportResult:
    """Write the launch files of `cfg` for `engine` into `out` (created)."""
    from hastune.export import readme

    out = Path(out)
    check_model(target, engine)
    p = plan(cfg, target.node_sizes or target.gpus_per_node, closest=closest)
    backend = backend or dynamo_backend(target.engine.name)
    _model_check(p, engine, backend, target.architecture, target.multimodal)
    if engine == "runners":
        p = _runners_plan(cfg, p)
    res = ExportResult(engine, out, p)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.sh"), out / "gateway.yaml"]:  # a previous export's are not
        if old.exists():                                    # this one's
            old.unlink()
    if not p.blocking:
        if engine in ("vllm", "sglang"):
            res.files += _write_scripts(res, cfg, target, engine, dummy)
        elif engine == "dynamo":
            from hastune.export.dynamo import write_manifest

            res.files += write_manifest(res, target, backend, dummy)
        else:
            res.files += _write_runners(out, config_file)
    if p.closest_config is not None and not p.blocking:
        res.files.append(_write_closest(out, p.closest_config))
    res.files.append(readme.write(res, cfg, target))
    return res


def _write_closest(out: Path, data: dict) -> Path:
    import yaml

    from hastune.config import dump_config, parse_config

    text = ("# The nearest deployment the engine can express (hastune export --closest), as a "
            "hastune config:\n# its goodput in the simulator: hastune evaluate RECIPE --config "
            "closest_config.yaml\n")
    return _write(out / "closest_config.yaml",
                  text + yaml.safe_dump(dump_config(parse_config(data)), sort_keys=False))


def dynamo_backend(engine: str) -> str:
    """The engine Dynamo runs for a target of `engine` (that one where Dynamo has it, else
    vLLM)."""
    return engine if engine in ("vllm", "sglang") else "vllm"


def _write_scripts(res: ExportResult, cfg: ConfigBase, t: Target, engine: str,
                   dummy: bool) -> list[Path]:
    from hastune.export.engines import COMMANDS
    from hastune.export.scripts import FRONTS, launch_script, literal, role_script

    p = res.plan
    cmds = COMMANDS[engine](p, t, dummy)
    check_commands(cmds)
    res.commands = cmds
    title = (f"{archs.get(cfg.architecture).describe(cfg)} for {t.model} on {t.gpu}, "
             f"{flagsets.pinned(cmds[0].program)}")
    order: list[tuple[str, list[Command]]] = []
    by_role = {i.name: i.role for i in p.instances}
    setup = (f"mkdir -p {literal(_ec_dir())}\n"
             if engine == "vllm" and p.topology.moves_embeddings else "")
    for role in p.roles:
        mine = [c for c in cmds if by_role.get(c.name) == role]
        order.append((f"{role}.sh", mine))
    front = [c for c in cmds if c.name in FRONTS]
    order.append(("router.sh", front))
    files = []
    model = t.engine_model
    for script, mine in order:
        role = script[:-3]
        text = role_script(role, mine, model, p.nodes, f"{role}: {title}",
                           extra=role != "router",
                           setup=setup if role == "encode" else "")
        files.append(_write(res.out / script, text))
    from hastune.export.engines import MPS_LOG, MPS_PIPE

    if p.gateway is not None:  # what the gateway in router.sh reads
        import yaml

        from hastune.export.engines import GATEWAY_FILE, gateway_config

        files.append(_write(res.out / GATEWAY_FILE, "# The hastune gateway's config (hastune "
                            "gateway, run by router.sh); written by `hastune export`\n"
                            + yaml.safe_dump(gateway_config(p, t, engine), sort_keys=False)))
    files.append(_write(res.out / "launch.sh", launch_script(
        order, model, p.nodes, f"launch: {title}", p.mps_gpus, (MPS_PIPE, MPS_LOG))))
    return files


def _ec_dir() -> str:
    from hastune.export.engines import EC_PATH

    return EC_PATH


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    if path.suffix == ".sh":
        path.chmod(0o755)
    return path


def _runners_plan(cfg: ConfigBase, p: Plan) -> Plan:
    from hastune.errors import InputError

    try:
        archs.get(cfg.architecture).engine_check(cfg)
    except InputError as exc:
        return Plan(p.topology, [], blocking=[f"hastune's engine (runners/): {exc.problem}"])
    return Plan(p.topology, p.pools, instances=p.instances, notes=[
        "runners/ is hastune's own engine: it runs the reference model (ref-small unless "
        "--model), not the target model; use it to check the architecture, not to serve the "
        "target"])


def _write_runners(out: Path, config_file: str | None) -> list[Path]:
    from hastune.export.scripts import literal

    where = str(Path(config_file).resolve()) if config_file else "best_config.yaml"
    text = ("#!/usr/bin/env bash\n# hastune's own engine (runners/) running this config.\n"
            "set -euo pipefail\n"
            f'if [ -z "${{CONFIG:-}}" ]; then CONFIG={literal(where)}; fi\n'
            'exec hastune serve "$CONFIG" --device "${DEVICE:-cuda}" --ignore-target "$@"\n')
    return [_write(out / "serve.sh", text)]
