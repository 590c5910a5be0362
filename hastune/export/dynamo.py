"""A DynamoGraphDeployment (nvidia.com/v1beta1, Dynamo 1.6.1) for a plan: a Frontend, and one
component per role with the role's instance count as replicas, each pod a worker of the
backend (`python3 -m dynamo.vllm` or `dynamo.sglang`) with the engine's own flags and the
GPUs of one instance. Written as dgd.yaml, validated against dgd_v1beta1.schema.json (pinned
from Dynamo's sources, see its x-source) before it is written.

Roles: aggregated replicas are a `worker` component; P/D are `prefill` and `decode`
components (`--disaggregation-mode`, with vLLM's NIXL KV connector or SGLang's NIXL transfer
backend); vLLM's encode workers are a `worker` component with `--disaggregation-mode encode`
and the prefill workers `--route-to-encoder`. Dynamo's SGLang backend has no encode-worker
role in 1.6.1's blueprints: E/P/D on it is refused (use --backend vllm).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hastune.archs.deploy import Topology
from hastune.export.flags import Command, problems
from hastune.export.plan import Instance, Plan
from hastune.export.target import Target

if TYPE_CHECKING:
    from hastune.export import ExportResult

SCHEMA = Path(__file__).with_name("dgd_v1beta1.schema.json")
IMAGE = "nvcr.io/nvidia/ai-dynamo/{backend}-runtime:1.6.1"
TYPES = {"replica": "worker", "encode": "worker", "prefill": "prefill", "decode": "decode"}


def _knobs(c: Command, p: Plan, inst: Instance, vllm: bool) -> None:
    """The token budget of replicas and the encode batch bound, as the scripts have them."""
    if inst.role == "replica" and p.chunked is False:
        c.add("--disable-chunked-prefill") if vllm else c.add("--chunked-prefill-size", -1)
    elif inst.role == "replica" and p.chunked and p.chunk_tokens:
        if vllm:
            c.add("--enable-chunked-prefill").add("--max-num-batched-tokens", p.chunk_tokens)
        else:
            c.add("--chunked-prefill-size", p.chunk_tokens)
    if inst.role == "encode" and p.encode_batch:
        c.add("--max-num-seqs" if vllm else "--max-running-requests", p.encode_batch)


def _worker(inst: Instance, backend: str, t: Target, model: str, topology: Topology,
            dummy: bool) -> Command:
    prog = f"dynamo-{backend}"
    c = Command(prog, ["python3", "-m", f"dynamo.{backend}"], name=inst.role)
    if backend == "vllm":
        c.add("--model", model).add("--tensor-parallel-size", inst.tp)
        if inst.pp > 1:
            c.add("--pipeline-parallel-size", inst.pp)
        if t.precision.kv_cache == "fp8":
            c.add("--kv-cache-dtype", "fp8")
    else:
        c.add("--model-path", model).add("--tp-size", inst.tp)
        if inst.pp > 1:
            c.add("--pp-size", inst.pp)
        if t.precision.kv_cache == "fp8":
            c.add("--kv-cache-dtype", "fp8_e4m3")
    if t.precision.weights == "fp8" and t.checkpoint_precision != "fp8":
        c.add("--quantization", "fp8")
    if dummy:
        c.add("--load-format", "dummy")
    if inst.expert_parallel:
        c.add("--enable-expert-parallel" if backend == "vllm" else "--ep-size",
              *([] if backend == "vllm" else [inst.tp]))
    if inst.role == "replica":
        return c
    if backend == "vllm":
        c.add("--disaggregation-mode", inst.role)
        # both sides name their connector: Dynamo 1.6.1 gives a vLLM worker none unless told
        # (dynamo/vllm/args.py: "the default is already no connector"; its migration maps
        # prefill to kv_producer and decode to kv_consumer)
        if inst.role in ("prefill", "decode"):
            c.add("--kv-transfer-config", {"kv_connector": "NixlConnector",
                                           "kv_role": "kv_producer" if inst.role == "prefill"
                                           else "kv_consumer"})
        if inst.role == "prefill" and topology.moves_embeddings:
            c.add("--route-to-encoder")
        if topology.moves_embeddings:
            c.add("--enable-multimodal")
    else:
        c.add("--disaggregation-mode", inst.role)
        c.add("--disaggregation-transfer-backend", "nixl")
    return c


def _component(name: str, ctype: str, replicas: int, image: str, cmd: Command,
               gpus: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, "command": cmd.words[:3],
                                 "args": cmd.argv()[3:]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"name": name, "type": ctype, "replicas": replicas,
            "podTemplate": {"spec": {"containers": [container]}}}


def manifest(res: ExportResult, t: Target, backend: str, model: str,
             dummy: bool = False) -> tuple[dict[str, Any], list[Command]]:
    p = res.plan
    image = IMAGE.format(backend=backend)
    front = Command("dynamo-frontend", ["python3", "-m", "dynamo.frontend"], name="Frontend")
    comps = [_component("Frontend", "frontend", 1, image, front, 0)]
    cmds = []
    for role in p.roles:
        insts = p.role(role)
        c = _worker(insts[0], backend, t, model, p.topology, dummy)
        _knobs(c, p, insts[0], backend == "vllm")
        cmds.append(c)
        comps.append(_component(role, TYPES[role], len(insts), image, c,
                                insts[0].tp * insts[0].pp))
    # a DNS-1123 label: at most 63 characters, alphanumeric at both ends (also once cut)
    name = re.sub(r"[^a-z0-9-]+", "-", f"hastune-{t.recipe}".lower())[:63].strip("-")
    doc = {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": name, "annotations": {
               "hastune/target": f"{t.model} on {t.gpus} x {t.gpu}",
               "hastune/goodput-rps": f"{t.goodput_rps:.3f}"}},
           "spec": {"backendFramework": backend, "components": comps}}
    return doc, cmds


def validate(doc: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def backend_blocking(p: Plan, backend: str) -> str | None:
    """Why Dynamo with `backend` cannot launch plan `p` (None: it can)."""
    if p.sm_split is not None:
        return ("the co-resident prefill (sm_split: an encode server and a prefill server on "
                "each encode GPU under CUDA MPS) needs the hastune gateway in front, and "
                "Dynamo's Frontend routes requests itself: export it for vllm or sglang")
    if backend == "sglang" and p.topology.moves_embeddings:
        return ("Dynamo 1.6.1's SGLang backend has no encode-worker role in its blueprints; "
                "export E/P/D for Dynamo with --backend vllm")
    return None


def write_manifest(res: ExportResult, t: Target, backend: str, dummy: bool) -> list[Path]:
    from hastune.export.scripts import one_line

    p = res.plan
    why = backend_blocking(p, backend)
    if why:
        p.blocking.append(why)
        return []
    doc, cmds = manifest(res, t, backend, t.engine_model, dummy)
    bad = [f"{c.name}: {e}" for c in cmds for e in problems(c)]
    if bad:
        raise AssertionError("emitted flags Dynamo's workers do not accept: " + "; ".join(bad))
    validate(doc)
    res.commands = cmds
    res.plan.notes.append("Dynamo's Frontend routes requests; the ports and GPU ids of the "
                          "scripts are the operator's to assign (each pod gets tp x pp GPUs)")
    path = res.out / "dgd.yaml"
    # every value of the manifest goes through yaml's dumper; the comment is kept one line
    head = one_line(f"DynamoGraphDeployment written by `hastune export` for {t.model} on "
                    f"{t.gpus} x {t.gpu}")
    path.write_text(f"# {head}\n# apply: kubectl apply -f dgd.yaml (Dynamo 1.6.1 operator)\n"
                    + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return [path]
