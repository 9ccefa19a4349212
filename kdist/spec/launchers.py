"""A launcher (torchrun, accelerate, deepspeed) inside spec.workload: refused at validate.

kdist is the launcher: it starts nodes x procsPerNode processes and gives each
its rank. A torchrun in `command` would start a world of its own in every one
of them, each with a localhost master: N separate models that all "succeed".
So validate refuses the line and says what to write instead, the script and
its arguments taken from the launcher's own line. Torch-free and pure: only
the spec's text is read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

# Programs that are launchers, by their file name (a path before them is allowed).
_PROGRAMS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "accelerate-launch":
             "accelerate launch"}
# Modules that are launchers (`python -m X`, or spec.workload.module).
_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
            "accelerate.commands.launch": "accelerate launch",
            "deepspeed.launcher.runner": "deepspeed"}
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_SHELLS = {"sh", "bash", "dash", "zsh"}
# torchrun's options that take no value; every other --option takes one.
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path",
                   "-m", "--module", "--no-ident"}
_SEPARATORS = {"&&", "||", ";", "|", "&"}


def _base(program: str) -> str:
    return program.rsplit("/", 1)[-1]


def launcher_problem(module: str | None, command: Sequence[str] | None, args: Sequence[str],
                     nodes: int, procs: int | str) -> str | None:
    """`field: why; write instead` when the workload starts a launcher, else None."""
    if module in _MODULES:
        return _advice("spec.workload.module", f"{module} ({_MODULES[module]})",
                       _MODULES[module], list(args), nodes, procs)
    found = _find(list(command or []) + list(args), 0)
    if found is None:
        return None
    index, name, kind, rest = found
    field = (f"spec.workload.command[{index}]" if index < len(command or [])
             else "spec.workload.command")
    return _advice(field, name, kind, rest, nodes, procs)


def _find(line: list[str], start: int) -> tuple[int, str, str, list[str]] | None:
    """(index of the launcher in `line`, how it was written, which launcher, its arguments),
    through env, exec, sh -c and python -m; None when the line starts no launcher."""
    if not line:
        return None
    i, program = 0, _base(line[0])
    if program == "env":  # env [-i] [-u NAME] [NAME=value]... PROGRAM
        i = 1
        while i < len(line) and (line[i].startswith("-") or "=" in line[i]):
            i += 2 if line[i] in ("-u", "--unset") else 1
        return _find(line[i:], start + i)
    if program in ("exec", "nohup"):
        return _find(line[1:], start + 1)
    if program in _PROGRAMS:
        return start, _PROGRAMS[program], _PROGRAMS[program], line[1:]
    if program == "accelerate" and line[1:2] == ["launch"]:
        return start, "accelerate launch", "accelerate launch", line[2:]
    if _PYTHON.fullmatch(program):
        j = 1
        while j < len(line) and line[j].startswith("-") and line[j] != "-c":
            token = line[j]
            if token == "-m" or (token.startswith("-m") and len(token) > 2):
                mod = token[2:] or (line[j + 1] if j + 1 < len(line) else "")
                name = _MODULES.get(mod)
                if name is None:
                    return None
                skip = j + (2 if token == "-m" else 1)
                return start, f"{program} -m {mod} ({name})", name, line[skip:]
            j += 2 if token in ("-X", "-W") else 1
        return None  # python SCRIPT ... or python -c: the script is the program
    if program in _SHELLS and "-c" in line[1:-1]:
        script = line[line.index("-c", 1) + 1]
        try:
            lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:
            return None
        segments: list[list[str]] = [[]]
        for w in words:
            if w in _SEPARATORS:
                segments.append([])
            else:
                segments[-1].append(w)
        for seg in segments:
            found = _find(seg, start)
            if found is not None:
                return start, f"{found[1]} (in {_base(line[0])} -c)", found[2], found[3]
    return None


def _advice(field: str, what: str, kind: str, rest: list[str], nodes: int,
            procs: int | str) -> str:
    """The refusal: why, and the spec lines that say the same to kdist."""
    script, script_args, opts = _split(rest, kind)
    launched = nodes * procs if isinstance(procs, int) else None
    if launched == 1:
        worlds = ("a world of its own inside kdist's one process, its workers unseen by "
                  "kdist's restarts, logs and GPU placement")
    elif launched:
        worlds = (f"{launched} separate worlds (one per process kdist starts), so "
                  f"{launched} separate models")
    else:
        worlds = "a separate world in every process kdist starts"
    nproc = opts.get("--nproc-per-node") or opts.get("--nproc_per_node") \
        or opts.get("--num_gpus") or opts.get("--num-gpus")
    want_procs: int | str = procs
    if nproc is not None:
        want_procs = int(nproc) if nproc.isdigit() else "auto"
    nnodes = opts.get("--nnodes") or opts.get("--num_nodes") or opts.get("--num-nodes") \
        or opts.get("--num_machines")
    want_nodes = int(nnodes) if nnodes is not None and nnodes.isdigit() else nodes
    if script is None:
        run = "command: [python, YOUR_SCRIPT.py, ...]"
    elif "-m" in opts or "--module" in opts:
        run = f"module: {script}" + (f", args: {_flow(script_args)}" if script_args else "")
    elif "--no-python" in opts or "--no_python" in opts:
        run = f"command: {_flow([script, *script_args])}"
    else:
        run = f"command: {_flow(['python', script, *script_args])}"
    return (f"{field}: {what} would start {worlds}; kdist is the launcher here: write "
            f"spec.workload: {{{run}}}, spec.nodes: {want_nodes}, "
            f"spec.procsPerNode: {want_procs}")


def _split(rest: list[str], kind: str) -> tuple[str | None, list[str], dict[str, str]]:
    """(script, its args, the launcher's options) from a launcher's arguments."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            i += 1
            break
        if not token.startswith("-"):
            break
        name, eq, value = token.partition("=")
        takes_value = (name not in _TORCHRUN_FLAGS if kind == "torchrun"
                       # accelerate and deepspeed have many bare flags: a value is
                       # what does not look like an option or a script.
                       else i + 1 < len(rest) and not rest[i + 1].startswith("-")
                       and not rest[i + 1].endswith(".py"))
        if eq:
            opts[name] = value
        elif takes_value and i + 1 < len(rest):
            opts[name] = rest[i + 1]
            i += 1
        else:
            opts[name] = ""
        i += 1
    if i >= len(rest):
        return None, [], opts
    return rest[i], rest[i + 1:], opts


def _flow(items: Sequence[str]) -> str:
    """A YAML flow list, each item quoted only where YAML would misread it."""
    plain = re.compile(r"[A-Za-z_./][\w./+-]*|--?[A-Za-z][\w.-]*")
    return "[" + ", ".join(s if plain.fullmatch(s) and s not in ("true", "false", "null")
                           else shlex.quote(s) if "'" not in s else f'"{s}"'
                           for s in items) + "]"
