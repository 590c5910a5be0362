"""Shell scripts for a list of commands: one per role (encode.sh, prefill.sh, decode.sh,
replica.sh, router.sh) and launch.sh, which starts them in order, waits for each server's
/health, starts the router last and stops everything on Ctrl-C, TERM or exit.

Every script runs under `set -euo pipefail`; ports bind on $HOST (127.0.0.1 unless set), the
model is $MODEL (the target's, unless set), $EXTRA_ARGS is appended to every server, and on a
deployment over several nodes each script starts only the instances of $NODE_RANK and reaches
the others at $NODE_ADDR_<k>.
"""

from __future__ import annotations

import shlex

from hastune.export.flags import Command

ROLE_FILES = {"E": "encode", "P": "prefill", "D": "decode", "R": "replica", "I": "replica"}


def quote(word: str) -> str:
    """A word for the shell: variables stay expandable (double quotes), the rest is literal."""
    if "$" in word:
        return '"' + word.replace('"', '\\"') + '"'
    return shlex.quote(word)


def command_text(cmd: Command, extra: bool) -> str:
    env = " ".join(f"{k}={quote(v)}" for k, v in cmd.env.items())
    words = [quote(w) for w in cmd.words]
    lines = [(env + " " if env else "") + " ".join(words)]
    for flag, values in cmd.flags:
        lines.append(" ".join([flag, *map(quote, values)]))
    if extra:
        lines.append('"${EXTRA[@]}"')
    lines[-1] += f' > "$LOG_DIR/{cmd.name}.log" 2>&1 &'
    return " \\\n    ".join(lines)


def preamble(model: str, nodes: int, title: str, extra: bool = False) -> str:
    addrs = "".join(f'NODE_ADDR_{k}="${{NODE_ADDR_{k}:-127.0.0.1}}"\n' for k in range(nodes))
    return (f"#!/usr/bin/env bash\n# {title}\n# Written by `hastune export`; see README.md "
            "beside it.\nset -euo pipefail\n"
            f'MODEL="${{MODEL:-{model}}}"\nHOST="${{HOST:-127.0.0.1}}"\n'
            'LOG_DIR="${LOG_DIR:-./logs}"\nNODE_RANK="${NODE_RANK:-0}"\n' + addrs
            + ('read -r -a EXTRA <<< "${EXTRA_ARGS:-}"\n' if extra else "")
            + 'mkdir -p "$LOG_DIR"\n'
            "export MODEL HOST LOG_DIR NODE_RANK\n")


def role_script(role: str, cmds: list[Command], model: str, nodes: int, title: str,
                extra: bool = True, setup: str = "") -> str:
    body = [preamble(model, nodes, title, extra), setup, "pids=()\n",
            "trap 'kill \"${pids[@]}\" 2>/dev/null || true' INT TERM EXIT\n"]
    for c in cmds:
        gpus = c.env.get("CUDA_VISIBLE_DEVICES")
        where = f"node {c.node}" + (f", GPUs {gpus}" if gpus else "") + f", port {c.port}"
        body.append(f"\n# {c.name}: {role} ({where})\n")
        body.append(f'if [ "$NODE_RANK" = {c.node} ]; then\n  '
                    + command_text(c, extra).replace("\n", "\n  ")
                    + '\n  pids+=("$!")\nfi\n')
    body.append('\nif [ "${#pids[@]}" -gt 0 ]; then wait; fi\n')
    return "".join(body)


def launch_script(order: list[tuple[str, list[Command]]], model: str, nodes: int,
                  title: str) -> str:
    """Start the role scripts in order; before the router, wait for every server of this node
    to answer /health (HEALTH_TIMEOUT seconds, 1800 unless set)."""
    out = [preamble(model, nodes, title),
           'cd "$(dirname "$0")"\nHEALTH_TIMEOUT="${HEALTH_TIMEOUT:-1800}"\npids=()\n'
           "trap 'kill \"${pids[@]}\" 2>/dev/null || true' INT TERM EXIT\n"
           "wait_healthy() {  # URL\n"
           '  local deadline=$((SECONDS + HEALTH_TIMEOUT))\n'
           '  until curl -sf "$1/health" > /dev/null; do\n'
           '    if [ "$SECONDS" -ge "$deadline" ]; then\n'
           '      echo "no answer from $1/health in $HEALTH_TIMEOUT s; see $LOG_DIR" >&2\n'
           "      exit 1\n    fi\n    sleep 2\n  done\n}\n"]
    for script, cmds in order:
        if script == "router.sh":
            out.append('\nif [ "$NODE_RANK" = 0 ]; then\n')
            for _, prev in order:
                for c in prev:
                    if c.name != "router" and c.name != "proxy":
                        out.append(f'  wait_healthy "http://$NODE_ADDR_{c.node}:{c.port}"\n')
            out.append(f"  bash ./{script} &\n  pids+=(\"$!\")\n")
            out.append('  wait_healthy "http://127.0.0.1:' + str(cmds[0].port) + '"\n'
                       '  echo "serving at http://$HOST:' + str(cmds[0].port)
                       + '/v1 (Ctrl-C stops)"\nfi\n')
        else:
            out.append(f"bash ./{script} &\npids+=(\"$!\")\n")
    out.append('wait\n')
    return "".join(out)
