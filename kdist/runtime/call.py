"""`Client.train(fn)`'s worker: call the function on this rank, hand back what it gave.

    python -m kdist.runtime.call CALL

CALL is base64 of a JSON object the client wrote: where the function lives
(``file`` relative to the shipped workdir and the module name it had, or an
installed ``module``, or its ``source`` when it had no file, as in a notebook),
its ``qualname``, and its JSON ``args``/``kwargs``. Each rank runs with the
env contract (RANK, WORLD_SIZE, MASTER_ADDR...): the function starts its
process group itself, as under torchrun.

Rank 0 prints the return value as JSON in framed lines (``kdist.shared.frames``)
as its last output; a value JSON cannot carry (a tensor, bytes, a dict with
int keys...) is an error naming where it sits in the value. A function that
raises (or returns such a value) prints one framed error line, then the
traceback, and the rank exits 1: a code error, which fails the job at once
(a lost peer's error still reads as one: the traceback comes last).

Runtime side: standard library and ``kdist.shared`` only, torch if the
function imports it.
"""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from kdist.shared import frames
from kdist.shared.tracebacks import user_frame

#: The module name a function from a script run as __main__ is loaded under (running it
#: as __main__ again would run the script's own `if __name__ == "__main__"` part).
MAIN_ALIAS = "__kdist_main__"


def load(call: dict[str, Any]) -> Any:
    """The function `call` names."""
    source, file, module = call.get("source"), call.get("file"), call.get("module") or ""
    if source is not None:
        mod = types.ModuleType(MAIN_ALIAS)
        sys.modules[MAIN_ALIAS] = mod
        # At its own file and line (the client sends where it sat): tracebacks name
        # `fit.py:12`; the shipped file itself when it is here, so they show the line too.
        where = call.get("source_file") or "<kdist.train source>"
        if os.path.isfile(where):
            where = os.path.abspath(where)
        padded = "\n" * (int(call.get("line") or 1) - 1) + source
        exec(compile(padded, where, "exec"), mod.__dict__)
    elif file is not None:
        name = MAIN_ALIAS if module == "__main__" else module
        spec = importlib.util.spec_from_file_location(name, Path(file).resolve())
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {file}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(module)
    target: Any = mod
    for part in call["qualname"].split("."):
        target = getattr(target, part)
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kdist.runtime.call CALL", file=sys.stderr)
        return 2
    call = json.loads(base64.b64decode(argv[0]))
    rank = int(os.environ.get("RANK", "0"))
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)  # the workdir: the function's siblings import as at home
    try:
        fn = load(call)
        value = fn(*call.get("args", []), **call.get("kwargs", {}))
        if rank == 0:
            try:
                lines = frames.result_lines(value)
            except ValueError as e:  # not JSON (the message names the part), or too big
                raise RuntimeError(f"the return value of {call['qualname']} cannot come back: "
                                   f"{e}") from None
            sys.stdout.flush()
            sys.stderr.flush()
            print("\n".join(lines), flush=True)
        return 0
    except Exception as e:  # SystemExit, KeyboardInterrupt: the process ends as they say
        lines = traceback.format_exception(type(e), e, e.__traceback__)
        text = "".join(lines).rstrip("\n").splitlines()
        sys.stdout.flush()
        where = user_frame(text, here)
        print(frames.error_line(rank, type(e).__name__, str(e), text, where), flush=True)
        print("\n".join(text), file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
