"""The commands that start a plan (hastune.export.plan) on vLLM or SGLang at their pinned
versions: one server per instance with the engine's own flags, and the router or proxy in
front. Every flag used here is checked against the version's flag set (hastune.export.flags)
before anything is written.

vLLM 0.33.0: `vllm serve` per instance; P/D through `--kv-transfer-config` (NixlConnector,
kv_producer / kv_consumer); the disaggregated encoder through `--ec-transfer-config`
(ECExampleConnector: encoder outputs through a shared directory, so encode and prefill
instances share a node or a filesystem) with `--mm-encoder-only` on encode instances; replicas
and P/D behind vllm-router 0.1.17, E/P/D behind the hastune gateway (runners/gateway, in place
of the EPD proxy that vLLM keeps among its examples, not in its wheel).
SGLang 0.5.23: `python3 -m sglang.launch_server` per instance; encoders `--encoder-only`,
prefill servers `--language-only --encoder-urls … --encoder-bootstrap-port` (one port each);
P/D `--disaggregation-mode prefill|decode`
(NIXL transfer backend); sglang-router 0.3.2 in front (`--pd-disaggregation` for P/D), the
hastune gateway for E/P/D.
"""

from __future__ import annotations

from hastune.archs.deploy import Topology
from hastune.export.flags import Command
from hastune.export.plan import (
    BOOTSTRAP_PORT,
    ENCODER_BOOTSTRAP_PORT,
    ROUTER_PORT,
    SIDE_PORT,
    Instance,
    Plan,
)
from hastune.export.target import Target

EC_PATH = "/tmp/hastune-ec-cache"


# CUDA MPS of the co-resident encode and prefill servers: their daemon's pipe directory (only
# they set it, so every other server on the node runs without MPS)
MPS_PIPE = "/tmp/hastune-mps"
MPS_LOG = "/tmp/hastune-mps-log"
# a co-resident pair's memory shares where the target does not say (a config tuned before
# they were written): the encoder server's, and the prefill server's of what is left
ENCODE_SHARE, SHARED_TOTAL = 0.1, 0.9


def memory_share(t: Target, role: str) -> float:
    """The share of its GPU's memory a co-resident server may take (vLLM
    --gpu-memory-utilization, SGLang --mem-fraction-static): the target's, worked out from the
    model's weights when it was tuned (hastune.export.target.memory_shares)."""
    enc = t.memory_shares.encode if t.memory_shares else ENCODE_SHARE
    total = t.memory_shares.total if t.memory_shares else SHARED_TOTAL
    return round(enc if role == "encode" else total - enc, 2)


def url(inst: Instance) -> str:
    return f"http://$NODE_ADDR_{inst.node}:{inst.port}"


def _common(cmd: Command, p: Plan, inst: Instance, t: Target, dummy: bool, tp_flag: str,
            pp_flag: str, memory_flag: str) -> None:
    cmd.add("--host", "$HOST").add("--port", inst.port).add(tp_flag, inst.tp)
    if inst.pp > 1:
        cmd.add(pp_flag, inst.pp)
    cmd.env["CUDA_VISIBLE_DEVICES"] = p.visible_devices(inst)
    if inst.mps_percent is not None:  # shares its GPUs with another server (sm_split)
        cmd.env["CUDA_MPS_PIPE_DIRECTORY"] = MPS_PIPE
        cmd.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(inst.mps_percent)
        cmd.add(memory_flag, memory_share(t, inst.role))
    if dummy:
        cmd.add("--load-format", "dummy")
    if t.precision.weights == "fp8" and t.checkpoint_precision != "fp8":
        cmd.add("--quantization", "fp8")


def vllm_commands(p: Plan, t: Target, dummy: bool = False) -> list[Command]:
    out = []
    for inst in p.instances:
        c = Command("vllm", ["vllm", "serve", "$MODEL"], name=inst.name, node=inst.node,
                    port=inst.port)
        _common(c, p, inst, t, dummy, "--tensor-parallel-size", "--pipeline-parallel-size",
                "--gpu-memory-utilization")
        if t.precision.kv_cache == "fp8":
            c.add("--kv-cache-dtype", "fp8")
        if inst.expert_parallel:
            c.add("--enable-expert-parallel")
        if inst.role == "replica":
            if p.chunked is False:
                c.add("--disable-chunked-prefill")
            elif p.chunked:
                c.add("--enable-chunked-prefill")
                if p.chunk_tokens:
                    c.add("--max-num-batched-tokens", p.chunk_tokens)
        ec_role = {"encode": "ec_producer", "prefill": "ec_consumer"}.get(inst.role)
        if p.topology.moves_embeddings and ec_role:
            c.add("--ec-transfer-config", {"ec_connector": "ECExampleConnector",
                                           "ec_role": ec_role,
                                           "ec_connector_extra_config":
                                               {"shared_storage_path": EC_PATH}})
        if inst.role == "encode":
            c.add("--mm-encoder-only")
            c.add("--enforce-eager")  # as vLLM's own encode instances (disagg_1e1p1d_example)
            if p.encode_batch:
                c.add("--max-num-seqs", p.encode_batch)
        if inst.role in ("prefill", "decode") and p.topology.moves_kv:
            kv_role = "kv_producer" if inst.role == "prefill" else "kv_consumer"
            c.add("--kv-transfer-config", {"kv_connector": "NixlConnector", "kv_role": kv_role})
            # one per instance on a host (vLLM 0.33 adds the data-parallel index to it,
            # nixl/base_scheduler.py): numbered by the instance's first GPU
            c.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(SIDE_PORT + 64 * inst.node
                                                       + inst.gpus[0])
            if p.nodes > 1:  # vLLM advertises "localhost" unless told: its node's address
                c.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = f"$NODE_ADDR_{inst.node}"
        out.append(c)
    out.append(_vllm_front(p))
    return out


GATEWAY_FILE = "gateway.yaml"  # beside the scripts: what `hastune gateway` reads


def gateway_front(p: Plan) -> Command:
    """The hastune gateway (runners/gateway) in front of an E/P/D deployment: it reads
    gateway.yaml beside the scripts (`gateway_config`); the nodes' addresses reach it through
    its environment (the file names them as $NODE_ADDR_<k>)."""
    c = Command("hastune-gateway", ["hastune", "gateway", f"$DEPLOY_DIR/{GATEWAY_FILE}"],
                name="gateway", port=ROUTER_PORT)
    c.add("--host", "$HOST").add("--port", ROUTER_PORT)
    for k in range(p.nodes):
        c.env[f"NODE_ADDR_{k}"] = f"$NODE_ADDR_{k}"
    return c


def gateway_config(p: Plan, t: Target, engine: str) -> dict:
    """gateway.yaml (runners/gateway/config.py): the engine's servers by role, each encode
    server with its co-resident prefill server (sm_split), the runtime's knobs."""
    knobs = dict(p.gateway or {})
    boot = _bootstrap_ports(p) if engine == "sglang" else {}

    def server(inst: Instance) -> str | dict:
        return {"url": url(inst), "bootstrap_port": boot[inst.name]} if boot else url(inst)

    local = {i.pair: i for i in p.role("prefill") if i.pair is not None}
    return {
        "engine": engine, "model": t.engine_model,
        "encode": [{"url": url(e), "prefill": server(local[e.index])} if e.index in local
                   else {"url": url(e)} for e in p.role("encode")],
        "prefill": [server(i) for i in p.role("prefill") if i.pair is None],
        "decode": [url(i) for i in p.role("decode")],
        "B": knobs["B"], "s": knobs["s"],
        "batcher": ({"timeout_ms": knobs["timeout_ms"]} if "timeout_ms" in knobs else
                    {"p": knobs["p"], "max_gap_ms": knobs["max_gap_ms"],
                     "rate_hint": round(max(t.goodput_rps, 1e-3), 3)}),
    }


def _bootstrap_ports(p: Plan) -> dict[str, int]:
    """SGLang: each prefill server's --disaggregation-bootstrap-port, by instance name."""
    return {inst.name: BOOTSTRAP_PORT + k for k, inst in enumerate(p.instances)
            if inst.role == "prefill"}


def _vllm_front(p: Plan) -> Command:
    if p.gateway is not None:  # every E/P/D deployment: vLLM's EPD proxy is only an example
        return gateway_front(p)
    c = Command("vllm-router", ["vllm-router"], name="router", port=ROUTER_PORT)
    c.add("--host", "$HOST").add("--port", ROUTER_PORT)
    if p.topology is Topology.PD:
        c.add("--vllm-pd-disaggregation")
        for i in p.role("prefill"):
            c.add("--prefill", url(i))
        for i in p.role("decode"):
            c.add("--decode", url(i))
    else:
        c.add("--worker-urls", *[url(i) for i in p.role("replica")])
    return c


def sglang_commands(p: Plan, t: Target, dummy: bool = False) -> list[Command]:
    out = []
    encoders = [url(i) for i in p.role("encode")]
    for k, inst in enumerate(p.instances):
        c = Command("sglang", ["python3", "-m", "sglang.launch_server"], name=inst.name,
                    node=inst.node, port=inst.port)
        c.add("--model-path", "$MODEL")
        _common(c, p, inst, t, dummy, "--tp-size", "--pp-size", "--mem-fraction-static")
        if t.precision.kv_cache == "fp8":
            c.add("--kv-cache-dtype", "fp8_e4m3")
        if inst.expert_parallel:
            c.add("--ep-size", inst.tp)
        if inst.role == "replica":
            if p.chunked is False:
                c.add("--chunked-prefill-size", -1)
            elif p.chunk_tokens:
                c.add("--chunked-prefill-size", p.chunk_tokens)
        if inst.role == "encode":
            c.add("--encoder-only")
            if p.encode_batch:
                c.add("--max-running-requests", p.encode_batch)
        elif p.topology.moves_embeddings and inst.role == "prefill":
            # the language server that takes the encoders' embeddings (SGLang's EPD docs:
            # decode servers are plain P/D decode servers); each runs an encoder bootstrap
            # server, 8997 unless told: one port each, or two on a host collide. A
            # co-resident prefill server names only its own GPU's encoder: SGLang's prefill
            # server picks the encoder itself
            c.add("--language-only")
            c.add("--encoder-urls", *([url(p.role("encode")[inst.pair])]
                                      if inst.pair is not None else encoders))
            c.add("--encoder-bootstrap-port", ENCODER_BOOTSTRAP_PORT + inst.index)
        if inst.role in ("prefill", "decode") and p.topology.moves_kv:
            c.add("--disaggregation-mode", inst.role)
            c.add("--disaggregation-transfer-backend", "nixl")
            if inst.role == "prefill":
                c.add("--disaggregation-bootstrap-port", BOOTSTRAP_PORT + k)
        out.append(c)
    if p.gateway is not None:
        out.append(gateway_front(p))
        return out
    r = Command("sglang-router", ["python3", "-m", "sglang_router.launch_router"],
                name="router", port=ROUTER_PORT)
    r.add("--host", "$HOST").add("--port", ROUTER_PORT)
    if p.topology.moves_kv:
        r.add("--pd-disaggregation")
        for c, inst in zip(out, p.instances):
            if inst.role == "prefill":
                bp = dict(c.flags)["--disaggregation-bootstrap-port"][0]
                r.add("--prefill", url(inst), bp)
        for inst in p.role("decode"):
            r.add("--decode", url(inst))
    else:
        r.add("--worker-urls", *[url(i) for i in p.role("replica")])
    out.append(r)
    return out


COMMANDS = {"vllm": vllm_commands, "sglang": sglang_commands}
