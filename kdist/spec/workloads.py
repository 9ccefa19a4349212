"""What validate knows of kdist's own workloads, without importing torch.

`kdist.workloads.ddp`, `pipeline` and `fsdp` parse their flags with argparse
after torch is imported; a typo there (`kdist.workloads.dpp`, `--maxsteps`)
would surface only once the pods are scheduled. This table holds their module
names, flags and what their values must be, so validate refuses those at once with a
did-you-mean, or argparse's own words for a value (`--lr fast`, `--dtype fp8`).
tests/dist/test_workload_table.py fails when it and the real parsers
(`build_parser()`) disagree. The rules are argparse's: `--flag value`,
`--flag=value`, a unique prefix of a flag (`--max-step`), negative numbers as
values, and nothing positional.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Sequence
from typing import Any, NoReturn

PACKAGE = "kdist.workloads."

_LOOP = ("--max-steps", "--batch-size", "--lr", "--momentum", "--seed", "--log-every",
         "--checkpoint-every", "--checkpoint-dir", "--keep-checkpoints", "--step-delay",
         "--dataset-size")
_MLP = ("--features", "--classes", "--hidden", "--layers", "--dtype")
_TRANSFORMER = ("--hidden", "--layers", "--heads", "--ffn", "--seq-len", "--vocab")

#: Every runnable workload: its flags that take a value, and those that take none.
WORKLOADS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ddp": (frozenset(_LOOP + _MLP + ("--bucket-cap-mb", "--grad-compression")),
            frozenset({"-h", "--help", "--no-memory-copy"})),
    "pipeline": (frozenset(_LOOP + _MLP + ("--schedule", "--microbatches", "--stages")),
                 frozenset({"-h", "--help"})),
    "fsdp": (frozenset(_LOOP + _TRANSFORMER + ("--tp", "--dtype", "--weight-decay")),
             frozenset({"-h", "--help", "--activation-checkpointing"})),
}

# What each flag's value must be (argparse's `type` or `choices`; str where not listed), and
# the least value the workloads' own checks (`check_args`) accept.
_INTS = ("--max-steps", "--batch-size", "--seed", "--log-every", "--checkpoint-every",
         "--keep-checkpoints", "--dataset-size", "--features", "--classes", "--hidden",
         "--layers", "--microbatches", "--stages", "--heads", "--ffn", "--seq-len", "--vocab",
         "--tp")
_FLOATS = ("--lr", "--momentum", "--step-delay", "--bucket-cap-mb", "--weight-decay")
VALUES: dict[str, type | tuple[str, ...]] = {
    **dict.fromkeys(_INTS, int), **dict.fromkeys(_FLOATS, float),
    "--dtype": ("bf16", "fp32"), "--grad-compression": ("bf16", "fp16", "none"),
    "--schedule": ("1f1b", "gpipe"),
}
AT_LEAST: dict[str, float] = {
    **dict.fromkeys(("--max-steps", "--log-every", "--batch-size", "--dataset-size",
                     "--features", "--classes", "--hidden", "--layers", "--vocab",
                     "--seq-len", "--heads"), 1),
    "--checkpoint-every": 0, "--ffn": 0, "--step-delay": 0,
}

# argparse's test for a token that is a value although it starts with "-".
_NEGATIVE = re.compile(r"-\d+$|-\d*\.\d+$")


def workload_name(module: str | None) -> str | None:
    """The workload's short name when `module` is under kdist.workloads., else None."""
    return module[len(PACKAGE):] if module and module.startswith(PACKAGE) else None


def module_problem(module: str | None) -> str | None:
    """Why `module` under kdist.workloads. is none of kdist's workloads (None: it is one,
    or it is not under kdist.workloads.)."""
    name = workload_name(module)
    if name is None or name in WORKLOADS:
        return None
    known = [PACKAGE + n for n in sorted(WORKLOADS)]
    close = difflib.get_close_matches(str(module), known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"kdist's workloads: {', '.join(known)}"
    return f"{module!r} is not one of kdist's workloads ({hint})"


def args_problems(module: str | None, args: Sequence[str]) -> list[tuple[int, str]]:
    """(index into `args`, why) for each argument kdist's workload `module` would refuse."""
    name = workload_name(module)
    if name not in WORKLOADS:
        return []
    valued, flags = WORKLOADS[name]
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            out.append((i, "'--' ends the options: argparse takes no positional argument here"))
            break
        if not token.startswith("-") or _NEGATIVE.fullmatch(token):
            out.append((i, f"unexpected argument {token!r}: {module} takes only --flags"))
            i += 1
            continue
        flag, eq, _ = token.partition("=")
        full, why = _resolve(flag, valued | flags, module)
        if full is None:
            out.append((i, why))
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                i += 1  # its value, most likely: one problem, not two
        elif full in valued and not eq:
            value = args[i + 1] if i + 1 < len(args) else None
            if value is None or (value.startswith("-") and not _NEGATIVE.fullmatch(value)):
                out.append((i, f"{token} needs a value"))
            else:
                i += 1
                bad = value_problem(full, value)
                if bad:
                    out.append((i, bad))
        elif full in valued and (bad := value_problem(full, token.partition("=")[2])):
            out.append((i, bad))
        elif full in flags and eq:
            out.append((i, f"{full} takes no value"))
        i += 1
    return out


class _Refused(Exception):
    pass


def _parser() -> Any:
    import argparse  # here: render's cold start does not pay for it (validate's path does)

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:  # argparse's words, no usage block, no exit
            raise _Refused(message)

    return Parser(add_help=False)


def value_problem(flag: str, value: str) -> str | None:
    """What kdist's workloads would say of `value` for `flag` (a full flag name): argparse's
    words for a wrong type or choice, the workload's own for a value below its least."""
    if "$(" in value:
        return None  # the kubelet expands it in the pod: not known here
    kind = VALUES.get(flag, str)
    parser = _parser()
    if isinstance(kind, tuple):
        parser.add_argument(flag, choices=kind)
    else:
        parser.add_argument(flag, type=kind)
    try:
        parsed = getattr(parser.parse_args([f"{flag}={value}"]), flag[2:].replace("-", "_"))
    except _Refused as e:
        return str(e)
    if flag == "--step-delay" and not 0 <= parsed <= 3600:
        return "--step-delay must be between 0 and 3600 seconds"
    least = AT_LEAST.get(flag)
    if least is not None and parsed < least:
        return f"{flag} must be >= {least}"
    return None


def _resolve(flag: str, known: frozenset[str], module: str | None) -> tuple[str | None, str]:
    """The flag `flag` names (exact, or a unique prefix as argparse allows), or why none."""
    if flag in known:
        return flag, ""
    if flag.startswith("--"):
        prefixed = sorted(k for k in known if k.startswith(flag) and k.startswith("--"))
        if len(prefixed) == 1:
            return prefixed[0], ""
        if prefixed:
            return None, f"{flag} is ambiguous: it could be {', '.join(prefixed)}"
    close = difflib.get_close_matches(flag, sorted(known - {"-h", "--help"}), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return None, f"unknown argument {flag!r} of {module}{hint}"


def checkpoint_every_ignored(module: str | None, args: Sequence[str],
                             has_checkpoint: bool) -> int | None:
    """The index of --checkpoint-every when kdist's workload will write no checkpoint: no
    spec.checkpoint and no --checkpoint-dir (the workloads write none without a directory)."""
    name = workload_name(module)
    if name not in WORKLOADS or has_checkpoint:
        return None
    valued, flags = WORKLOADS[name]
    named = {i: _resolve(a.partition("=")[0], valued | flags, module)[0]
             for i, a in enumerate(args) if a.startswith("--")}
    if "--checkpoint-dir" in named.values():
        return None
    at = next((i for i, full in named.items() if full == "--checkpoint-every"), None)
    if at is None:
        return None
    # `--checkpoint-every 0` turns checkpoints off: nothing to warn about.
    flag = args[at]
    value = flag.partition("=")[2] if "=" in flag else (args[at + 1] if at + 1 < len(args) else "")
    return None if value.strip() == "0" else at


_SCRIPT = re.compile(r"[^-].*\.(py|sh)|\.\.?/.+")


def script_of(command: Sequence[str] | None, args: Sequence[str]) -> tuple[str, int] | None:
    """("command" or "args", index) of the relative script the workload runs, if any."""
    if command is None:
        return None
    index = relative_script(command)
    if index is not None:
        return "command", index
    index = relative_script(args)
    return None if index is None else ("args", index)


def script_not_shipped(token: str, names: frozenset[str]) -> str | None:
    """Why `token` (a relative script path the workers open in the shipped workdir) is not
    among the packed `names`, or None: it is there, or it is not a path kdist can judge
    (`run.sh` may come from PATH, `../x.py` from outside the workdir)."""
    if not (token.endswith(".py") or token.startswith("./")):
        return None
    path = posixpath.normpath(token)
    if path.startswith("../") or path in names:
        return None
    close = difflib.get_close_matches(path, sorted(names), n=1)
    return f"did you mean {close[0]!r}?" if close else "it would not be found in the pods"


def relative_script(command: Sequence[str] | None) -> int | None:
    """The index in `command` of a script named by a relative path (train.py, ./run.sh,
    src/train.py), None when there is none."""
    for i, token in enumerate(command or []):
        if i and command and command[i - 1] == "-m":
            return None  # python -m pkg.mod: a module, found on the path
        if not token.startswith("/") and _SCRIPT.fullmatch(token):
            return i
    return None
