"""Parse every engine command of exported launch scripts with the engine's real parser.

tests/export checks emitted flags against hastune/export/flags_*.json; this goes one step
further where the engine's sources are at hand (the same environment as
scripts/dump_engine_flags.py: the wheel unpacked on PYTHONPATH, its parser's light imports):

    python scripts/check_exports_with_engines.py vllm 'DIR/*/*.sh'

`program` is vllm, sglang, sglang-router or vllm-router; shell variables take placeholder
values ($MODEL: m, $HOST and $NODE_ADDR_k: 127.0.0.1). Exits 1 on the first command the
parser refuses.
"""

from __future__ import annotations

import argparse
import glob
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.export.conftest import script_commands  # noqa: E402


def parser(prog: str) -> argparse.ArgumentParser:
    if prog == "vllm":
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        return make_arg_parser(FlexibleArgumentParser())
    p = argparse.ArgumentParser()
    if prog == "sglang":
        from sglang.srt.server_args import ServerArgs

        ServerArgs.add_cli_args(p)
    elif prog == "sglang-router":
        from sglang_router.router_args import RouterArgs

        RouterArgs.add_cli_args(p)
    else:
        from vllm_router.router_args import RouterArgs

        RouterArgs.add_cli_args(p)
    return p


def main() -> None:
    prog, pattern = sys.argv[1:3]
    p = parser(prog)
    n = 0
    for sh in sorted(glob.glob(pattern)):
        for pr, words in script_commands(Path(sh).read_text()):
            if pr != prog:
                continue
            cut = next((i for i, w in enumerate(words) if w.startswith(">")), len(words))
            words = [re.sub(r"\$NODE_ADDR_\d+", "127.0.0.1",
                            w.replace("$MODEL", "m").replace("$HOST", "127.0.0.1"))
                     for w in words[:cut] if not w.startswith("${EXTRA")]
            try:
                p.parse_args(words)
            except SystemExit:
                print(f"refused: {sh}: {' '.join(words)}")
                sys.exit(1)
            n += 1
    print(f"{prog}: the real parser accepted {n} commands")


if __name__ == "__main__":
    main()
