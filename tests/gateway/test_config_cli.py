"""gateway.yaml errors name the file, the field and the fix; `hastune gateway` and
`python -m runners.gateway` serve a config (and exit 2 on a bad one); `import hastune` and its
CLI stay without aiohttp."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from hastune.errors import InputError
from runners.gateway.config import load_gateway_config
from tests.gateway.harness import chat, config, deploy
from tests.gateway.stubs import dead_url, sse_texts

REPO = Path(__file__).resolve().parents[2]
GOOD = {"engine": "vllm", "model": "m", "encode": [{"url": "http://127.0.0.1:8100",
                                                     "prefill": "http://127.0.0.1:8110"}],
        "prefill": ["http://127.0.0.1:8200"], "decode": ["http://127.0.0.1:8300"],
        "B": 4, "s": 0.5}


def _load(tmp_path: Path, **change) -> object:
    f = tmp_path / "gateway.yaml"
    f.write_text(yaml.safe_dump({**GOOD, **change}))
    return load_gateway_config(f)


def test_a_good_config_parses(tmp_path: Path) -> None:
    cfg = _load(tmp_path)
    assert cfg.encode[0].prefill.url == "http://127.0.0.1:8110" and cfg.listen.port == 8000


@pytest.mark.parametrize("change, field, words", [
    ({"prefill": []}, "s", "remote pool"),
    ({"s": 0.5, "encode": ["http://127.0.0.1:8100"]}, "s", "co-resident"),
    ({"engine": "sglang"}, "prefill", "bootstrap_port"),
    ({"engine": "trtllm"}, "engine", ""),
    ({"listn": {"port": 1}}, "listn", "listen"),
    ({"decode": ["127.0.0.1:8300"]}, "decode", "http"),
    ({"B": 0}, "B", ""),
    ({"decode": ["http://127.0.0.1:8200"]}, None, "listed twice"),
])
def test_bad_configs_name_the_field_and_the_fix(tmp_path: Path, change: dict, field,
                                                words: str) -> None:
    with pytest.raises(InputError) as info:
        _load(tmp_path, **change)
    err = info.value
    assert err.file and err.file.endswith("gateway.yaml") and err.fix
    if field is not None:
        assert err.field is not None and err.field.startswith(field), err.message
    assert words in err.message, err.message


def test_the_cli_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "gateway.yaml"
    f.write_text(yaml.safe_dump({**GOOD, "prefill": []}))
    for argv in (["-m", "hastune", "gateway", str(f)], ["-m", "runners.gateway", str(f)]):
        r = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
        assert r.returncode == 2, r.stderr
        assert "gateway.yaml" in r.stderr and "Fix:" in r.stderr


def test_import_hastune_and_its_cli_leave_aiohttp_out() -> None:
    code = ("import sys, hastune, hastune.cli as c; c._register(); "
            "print('aiohttp' in sys.modules, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_hastune_gateway_serves_a_config(tmp_path: Path) -> None:
    """The command itself, as a process, over stub servers in this test's loop."""
    port = int(dead_url().rsplit(":", 1)[1])

    async def go():
        dep = await deploy("vllm", 1, 1, 1)
        f = tmp_path / "gateway.yaml"
        f.write_text(yaml.safe_dump(config(dep, 2, 0.5)))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hastune", "gateway", str(f), "--port", str(port),
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        url = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as client:
                for _ in range(600):  # until it answers (its start imports hastune)
                    try:
                        async with client.get(url + "/health") as r:
                            health = (r.status, await r.json())
                            break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)
                else:
                    raise AssertionError("hastune gateway never answered")
                async with client.post(url + "/v1/chat/completions",
                                       json=chat(0, 1, True, 3)) as r:
                    answer = (r.status, await r.read())
                async with client.get(url + "/v1/models") as r:
                    models = await r.json()
                async with client.get(url + "/metrics") as r:
                    metrics = await r.json()
        finally:
            proc.terminate()
            await proc.wait()
            await dep.close()
        return health, answer, models, metrics

    health, answer, models, metrics = asyncio.run(go())
    assert health[0] == 200 and health[1]["healthy"] and len(health[1]["servers"]) == 4
    assert answer[0] == 200 and sse_texts(answer[1]) == ["tok0 ", "tok1 ", "tok2 "]
    assert models["data"][0]["id"] == "stub-model"
    assert metrics["completed"] == 1 and metrics["encode_batches"] == 1
    assert json.dumps(metrics)  # plain JSON
