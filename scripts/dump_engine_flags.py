"""Write hastune/export/flags_<engine>.json: the command-line flags of a pinned engine version,
read from the engine's own argument parser (not typed by hand).

Run in an environment where the engine's Python sources import (its wheel unpacked on
sys.path, with the light dependencies its parser imports; torch and GPUs are not needed):

    python scripts/dump_engine_flags.py vllm 0.33.0 WHEEL SRC_DIR OUT.json

`engine` is vllm, sglang, sglang-router or vllm-router. Each flag records its dest, what its
value must be (`kind`: flag, int, float, json, str, probed on the parser's own type
function), its choices, and the file of the engine's sources that defines it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
from pathlib import Path

PARSERS = {
    "vllm": ("vllm.entrypoints.common.cli_args", "make_arg_parser",
             "vllm.utils.argparse_utils", "FlexibleArgumentParser"),
    "sglang": ("sglang.srt.server_args", "ServerArgs.add_cli_args", None, None),
    "sglang-router": ("sglang_router.router_args", "RouterArgs.add_cli_args", None, None),
    "vllm-router": ("vllm_router.router_args", "RouterArgs.add_cli_args", None, None),
}


def build(engine: str) -> argparse.ArgumentParser:
    import importlib

    mod, fn, pmod, pcls = PARSERS[engine]
    m = importlib.import_module(mod)
    parser = (getattr(importlib.import_module(pmod), pcls)() if pmod
              else argparse.ArgumentParser())
    obj = m
    for part in fn.split("."):
        obj = getattr(obj, part)
    out = obj(parser)
    return out if isinstance(out, argparse.ArgumentParser) else parser


def _accepts(action: argparse.Action, value: str) -> bool:
    t = action.type
    if t is None:
        return True
    try:
        t(value)
        return True
    except Exception:  # noqa: BLE001  (any refusal of the type function)
        return False


def kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "flag"
    if action.type is None:
        return "str"
    if _accepts(action, "{}") and not _accepts(action, "abc"):
        return "json"
    if _accepts(action, "3") and not _accepts(action, "1.5"):
        return "int"
    if _accepts(action, "1.5") and not _accepts(action, "abc"):
        return "float"
    return "str"


ROOTS = {"vllm": ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py", "vllm/config",
                  "vllm/entrypoints/openai", "vllm/entrypoints"),
         "sglang": ("sglang/srt/server_args.py", "sglang/srt/arg_groups", "sglang/srt"),
         "sglang-router": ("sglang_router",), "vllm-router": ("vllm_router",)}
SKIP = {"test", "tests", "benchmark", "benchmarks", "cli", "storage"}


def where(src: Path, engine: str, flag: str, dest: str) -> str:
    """The file of the engine's argument code that names the flag literally, else declares
    its dest as a (dataclass) field: the roots in order, the first that has either."""
    lit = re.compile(re.escape(f'"{flag}"'))
    field = re.compile(rf"^\s+{re.escape(dest)}\s*:", re.M)
    for root in ROOTS[engine]:
        r = src / root
        files = [r] if r.is_file() else sorted(r.rglob("*.py"))
        texts = [(p, p.read_text(errors="replace")) for p in files
                 if not SKIP & set(p.relative_to(src).parts[1:])]
        for pattern in (lit, field):
            for p, text in texts:
                if pattern.search(text):
                    return str(p.relative_to(src))
    # built at run time (a prefix loop, a compiled extension): the parser's own module
    return PARSERS[engine][0].replace(".", "/") + ".py"


def json_fields(engine: str) -> dict[str, list[str]]:
    if engine != "vllm":
        return {}
    from vllm.config.ec_transfer import ECTransferConfig
    from vllm.config.kv_transfer import KVTransferConfig

    return {"--kv-transfer-config": [f.name for f in dataclasses.fields(KVTransferConfig)],
            "--ec-transfer-config": [f.name for f in dataclasses.fields(ECTransferConfig)]}


def connectors(engine: str) -> dict[str, list[str]]:
    if engine != "vllm":
        return {}
    from vllm.distributed.ec_transfer.ec_connector.factory import ECConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    return {"kv_connector": sorted(KVConnectorFactory._registry),
            "ec_connector": sorted(ECConnectorFactory._registry)}


def main() -> None:
    engine, version, wheel, src = sys.argv[1:5]
    out = Path(sys.argv[5])
    parser = build(engine)
    flags = {}
    for a in parser._actions:
        for opt in a.option_strings:
            if not opt.startswith("--") or opt == "--help":
                continue
            flags[opt] = {"dest": a.dest, "kind": kind(a),
                          "choices": (sorted(map(str, a.choices)) if a.choices else None),
                          "nargs": a.nargs if isinstance(a.nargs, (int, str)) else None,
                          "file": where(Path(src), engine, opt, a.dest)}
    positionals = [a.dest for a in parser._actions if not a.option_strings]
    data = {"engine": engine, "version": version,
            "source": {"wheel": os.path.basename(wheel),
                       "wheel_sha256": hashlib.sha256(Path(wheel).read_bytes()).hexdigest(),
                       "parser": ":".join(PARSERS[engine][:2])},
            "positionals": positionals, "json_fields": json_fields(engine),
            "registered": connectors(engine), "flags": dict(sorted(flags.items()))}
    out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"{engine} {version}: {len(flags)} flags -> {out}")


if __name__ == "__main__":
    main()
