"""Shell scripts for a list of commands: one per role (encode.sh, prefill.sh, decode.sh,
replica.sh, router.sh) and launch.sh, which starts them in order, waits for each server's
/health, starts the router last and stops everything on Ctrl-C, TERM or exit.

Every script runs under `set -euo pipefail`; ports bind on $HOST (unless set: 127.0.0.1 on
one node, 0.0.0.0 where the deployment spans nodes, so the other nodes reach it), the
model is $MODEL (the target's, unless set), $EXTRA_ARGS is appended to every server, and on a
deployment over several nodes each script starts only the instances of $NODE_RANK and reaches
the others at $NODE_ADDR_<k>.

Nothing from the recipe, config or model reaches the shell unquoted: a value is a literal
(`literal`: single quotes, or $'…' where it holds a newline or another unprintable character),
a comment is one line (`one_line`), and the only expansions in a command's words are
hastune's own variables (`quote`: $MODEL, $HOST, $LOG_DIR, $NODE_RANK, $DEPLOY_DIR,
$NODE_ADDR_<k>, as whole names), never a command substitution.
"""

from __future__ import annotations

import re
import shlex

from hastune.export.flags import Command

FRONTS = ("router", "proxy", "gateway")  # what launch.sh starts last, behind the servers
ROLE_FILES = {"E": "encode", "P": "prefill", "D": "decode", "R": "replica", "I": "replica"}
_NAMES = r"MODEL|HOST|LOG_DIR|NODE_RANK|DEPLOY_DIR|NODE_ADDR_[0-9]+"
VARIABLE = re.compile(rf"\$(?:\{{({_NAMES})\}}|({_NAMES})(?![A-Za-z0-9_]))")


def one_line(text: str) -> str:
    """`text` for a comment or a line of prose: every character that is not printable (a
    newline, a carriage return, U+2028, a control character) as its escape, so that a value
    can never end the line it is written on."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def literal(value: str) -> str:
    """`value` as one literal shell word: shlex.quote, or bash's $'…' with every unprintable
    character as its UTF-8 bytes (\\xHH) so that the word stays on one line."""
    if value.isprintable():
        return shlex.quote(value)
    out = []
    for c in value:
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            out += [f"\\x{b:02x}" for b in c.encode("utf-8", "surrogateescape")]
    return "$'" + "".join(out) + "'"


def quote(word: str) -> str:
    """A word for the shell: hastune's own variables in it ($MODEL, ${HOST}, $NODE_ADDR_0 …,
    whole names only) expand inside double quotes; everything else is literal."""
    parts: list[tuple[str, bool]] = []  # (text, is a variable)
    last = 0
    for m in VARIABLE.finditer(word):
        parts += [(word[last:m.start()], False), (m.group(1) or m.group(2), True)]
        last = m.end()
    if not last:
        return literal(word)
    parts.append((word[last:], False))
    if all(not any(c in '"\\`$' for c in text) and text.isprintable()
           for text, var in parts if not var):
        return '"' + word + '"'  # readable: nothing but the variables is special in it
    return "".join(f'"${{{text}}}"' if var else literal(text) for text, var in parts if text)


def command_text(cmd: Command, extra: bool) -> str:
    for k in cmd.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):  # a bug of hastune's
            raise AssertionError(f"{cmd.name}: {k!r} is not an environment variable's name")
    env = " ".join(f"{k}={quote(v)}" for k, v in cmd.env.items())
    words = [quote(w) for w in cmd.words]
    lines = [(env + " " if env else "") + " ".join(words)]
    for flag, values in cmd.flags:
        lines.append(" ".join([quote(flag), *map(quote, values)]))
    if extra:
        lines.append('"${EXTRA[@]}"')
    lines[-1] += f" > {quote(f'$LOG_DIR/{cmd.name}.log')} 2>&1 &"
    return " \\\n    ".join(lines)


def preamble(model: str, nodes: int, title: str, extra: bool = False,
             here: bool = False) -> str:
    """The lines every script starts with; `here`: it names files beside it ($DEPLOY_DIR)."""
    addrs = "".join(f'NODE_ADDR_{k}="${{NODE_ADDR_{k}:-127.0.0.1}}"\n' for k in range(nodes))
    # shellcheck takes quotes in a literal for quoting meant to act later (SC2089/SC2090)
    quiet = ("# shellcheck disable=SC2089,SC2090  # quotes in the model's name are part of it\n"
             if any(c in model for c in "'\"\\") else "")
    return (f"#!/usr/bin/env bash\n# {one_line(title)}\n# Written by `hastune export`; see "
            "README.md beside it.\n" + quiet + "set -euo pipefail\n"
            f'if [ -z "${{MODEL:-}}" ]; then MODEL={literal(model)}; fi\n'
            + f'HOST="${{HOST:-{"0.0.0.0" if nodes > 1 else "127.0.0.1"}}}"\n'
            + 'LOG_DIR="${LOG_DIR:-./logs}"\nNODE_RANK="${NODE_RANK:-0}"\n' + addrs
            + ('DEPLOY_DIR="$(cd "$(dirname "$0")" && pwd)"  # the folder of these scripts\n'
               if here else "")
            + ('read -r -a EXTRA <<< "${EXTRA_ARGS:-}"\n' if extra else "")
            + 'mkdir -p "$LOG_DIR"\n'
            "export MODEL HOST LOG_DIR NODE_RANK\n")


def role_script(role: str, cmds: list[Command], model: str, nodes: int, title: str,
                extra: bool = True, setup: str = "") -> str:
    here = any("$DEPLOY_DIR" in w for c in cmds for w in c.words)
    body = [preamble(model, nodes, title, extra, here), setup, "pids=()\n",
            "trap 'kill \"${pids[@]}\" 2>/dev/null || true' INT TERM EXIT\n"]
    for c in cmds:
        gpus = c.env.get("CUDA_VISIBLE_DEVICES")
        where = f"node {c.node}" + (f", GPUs {gpus}" if gpus else "") + f", port {c.port}"
        body.append(f"\n# {one_line(f'{c.name}: {role} ({where})')}\n")
        body.append(f'if [ "$NODE_RANK" = {int(c.node)} ]; then\n  '
                    + command_text(c, extra).replace("\n", "\n  ")
                    + '\n  pids+=("$!")\nfi\n')
    body.append('\nif [ "${#pids[@]}" -gt 0 ]; then wait; fi\n')
    return "".join(body)


def mps_setup(mps: dict[int, list[int]], pipe: str, log: str) -> str:
    """Start CUDA MPS on this node's GPUs that hold two servers (`mps`: node → GPU ids), its
    pipe in `pipe` (only those servers name it, so the others run without MPS); stopped by
    `stop_all` on exit."""
    out = ["\n# CUDA MPS for the encode GPUs that also run a prefill server (sm_split): each "
           "server's\n# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE caps its share of the GPU's SMs\n"]
    for node, gpus in sorted(mps.items()):
        out.append(f'if [ "$NODE_RANK" = {int(node)} ]; then\n'
                   f"  mkdir -p {literal(pipe)} {literal(log)}\n"
                   f"  CUDA_VISIBLE_DEVICES={literal(','.join(map(str, gpus)))} "
                   f"CUDA_MPS_PIPE_DIRECTORY={literal(pipe)} "
                   f"CUDA_MPS_LOG_DIRECTORY={literal(log)} nvidia-cuda-mps-control -d\n"
                   "  mps=1\nfi\n")
    return "".join(out)


def launch_script(order: list[tuple[str, list[Command]]], model: str, nodes: int,
                  title: str, mps: dict[int, list[int]] | None = None,
                  mps_dirs: tuple[str, str] = ("", "")) -> str:
    """Start the role scripts in order (first CUDA MPS on the GPUs of `mps`, node → GPU ids,
    where two servers share a GPU); before the router, wait for every server of this node to
    answer /health (HEALTH_TIMEOUT seconds, 1800 unless set). Everything it started stops on
    Ctrl-C, TERM or exit, MPS last."""
    pipe = literal(mps_dirs[0]) if mps else ""
    stop_mps = (f'  if [ -n "${{mps:-}}" ]; then\n    mps=\n    echo quit | '
                f"CUDA_MPS_PIPE_DIRECTORY={pipe} nvidia-cuda-mps-control || true\n  fi\n"
                ) if mps else ""
    out = [preamble(model, nodes, title),
           'cd "$(dirname "$0")"\nHEALTH_TIMEOUT="${HEALTH_TIMEOUT:-1800}"\npids=()\n'
           + ("mps=\n" if mps else "")
           + "stop_all() {\n  kill \"${pids[@]}\" 2>/dev/null || true\n"
           + ("  wait 2>/dev/null || true\n" + stop_mps if mps else "") + "}\n"
           "trap stop_all INT TERM EXIT\n"
           "wait_healthy() {  # URL\n"
           '  local deadline=$((SECONDS + HEALTH_TIMEOUT))\n'
           '  until curl -sf "$1/health" > /dev/null; do\n'
           '    if [ "$SECONDS" -ge "$deadline" ]; then\n'
           '      echo "no answer from $1/health in $HEALTH_TIMEOUT s; see $LOG_DIR" >&2\n'
           "      exit 1\n    fi\n    sleep 2\n  done\n}\n"]
    if mps:
        out.append(mps_setup(mps, *mps_dirs))
    for script, cmds in order:
        run = f"bash {literal('./' + script)} &\n"
        if script == "router.sh":
            port = int(cmds[0].port or 0)
            out.append('\nif [ "$NODE_RANK" = 0 ]; then\n')
            for _, prev in order:
                for c in prev:
                    if c.name not in FRONTS:
                        url = f"http://$NODE_ADDR_{int(c.node)}:{int(c.port or 0)}"
                        out.append(f"  wait_healthy {quote(url)}\n")
            out.append(f"  {run}  pids+=(\"$!\")\n")
            out.append(f'  wait_healthy "http://127.0.0.1:{port}"\n'
                       f'  echo "serving at http://$HOST:{port}/v1 (Ctrl-C stops)"\nfi\n')
        else:
            out.append(f"{run}pids+=(\"$!\")\n")
    out.append('wait\n')
    return "".join(out)
