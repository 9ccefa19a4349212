"""A standby worker: a Python that has imported torch, waiting to become one rank's worker.

kdist's launcher (``kdist.runtime.standby``) starts one per local rank, with the
launcher's environment (this directory first on ``PYTHONPATH``, so kdist's
``sitecustomize`` ran first and set the process-group timeout before torch loaded).
On the socket ``KDIST_STANDBY_FD`` it says ``ready`` once torch is imported, then
reads one line: the rank's order (JSON: ``argv``, ``env``, ``cwd``, ``pipe``). It
answers ``ok`` and becomes the worker exactly as ``argv`` would start cold: the
environment replaced, the working directory, stdout and stderr into the rank's pipe,
``sys.path``, ``sys.argv`` and a fresh ``__main__``, then the script, module or code run
as Python runs it, so exit codes, signals and tracebacks are Python's own. It answers
``cold WHY`` and exits where it cannot be that worker (a command Python runs with
other options, a variable read at interpreter start that differs); the launcher then
starts the rank cold. Before the order, a launcher gone (the socket closed, or the
launcher's death: ``PR_SET_PDEATHSIG``) ends it. Standard library only.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import signal
import socket
import sys
import types
from typing import Any

FD = "KDIST_STANDBY_FD"
#: The file the standby's own output goes to until it is a worker (replayed into its pipe).
EARLY = "KDIST_STANDBY_EARLY"
#: Room the launcher leaves in the standby's environment block (``/proc/PID/environ``) for
#: the worker's larger one; its command line has room for the worker's (``argv_room``).
ROOM = "KDIST_STANDBY_ROOM"
#: How the launcher starts a standby: ``ARGV + [argv_room(worker's argv)]``.
ARGV = ["-u", "-c", "import _kdist_standby; _kdist_standby.main()"]
#: What a standby imports while it waits: what every kdist worker and most scripts
#: import first, and what takes the time. torch._dynamo: DDP's constructor imports it
#: (about as long again as torch itself).
PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo")
#: What the launcher asks a standby to import instead (comma-separated): a first start
#: unasked imports torch alone, as the script will (``kdist.runtime.warmstart``).
PRELOAD_ENV = "KDIST_STANDBY_PRELOAD"
#: Read by the interpreter or by torch while they start: a worker whose value differs
#: from this standby's starts cold.
STARTUP = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "KDIST_PG_TIMEOUT", "USE_LIBUV",
           "LD_PRELOAD", "LD_LIBRARY_PATH", "TORCH_CPP_LOG_LEVEL", "CUDA_VISIBLE_DEVICES")
#: Its name (``/proc/PID/comm``, what ``ps -o comm`` and ``top`` show) while it waits, ready;
#: as a worker it takes the name a cold worker has (its executable's).
NAME = "kdist-standby"
_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15


def command(argv: list[str], executable: str = sys.executable) -> tuple[str, str, list[str]] | None:
    """What a worker's command line runs, when a standby can run it: ("module", name,
    args), ("code", text, args) or ("path", script, args); None otherwise (another
    program, or Python with options besides ``-u``)."""
    if len(argv) < 3 or argv[0] != executable or argv[1] != "-u":
        return None
    if argv[2] in ("-m", "-c"):
        if len(argv) < 4:
            return None
        return ("module" if argv[2] == "-m" else "code"), argv[3], argv[4:]
    if argv[2].startswith("-"):
        return None
    return "path", argv[2], argv[3:]


def _prctl(option: int, arg: Any) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _pdeathsig(sig: int) -> None:
    _prctl(_PR_SET_PDEATHSIG, sig)


def _name(name: str) -> None:
    _prctl(_PR_SET_NAME, name.encode()[:15])


def argv_room(worker: list[str], executable: str = sys.executable) -> str:
    """The last argument of a standby's command line, sized so that its command line
    (``/proc/PID/cmdline``) takes the worker's exactly where it can (``retitle``)."""
    need = sum(len(os.fsencode(a)) + 1 for a in worker)
    have = sum(len(os.fsencode(a)) + 1 for a in [executable, *ARGV]) + 1
    return "-" * max(0, need - have)


def _regions() -> tuple[int, int, int, int] | None:
    """Where this process's command line and environment block are (what the kernel shows
    as ``/proc/PID/cmdline`` and ``environ``): arg_start, arg_end, env_start, env_end."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end, env_start, env_end = (int(x) for x in fields[45:49])  # 48-51 of proc(5)
    except (OSError, ValueError):
        return None
    found = (start, end, env_start, env_end)
    return found if all(found) else None


def _blocks(order: dict[str, Any]) -> tuple[bytes, bytes]:
    args = b"".join(os.fsencode(a) + b"\0" for a in order["argv"])
    env = b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0"
                   for k, v in order["env"].items())
    return args, env


def no_room(order: dict[str, Any]) -> str:
    """Why the worker's command line or environment cannot show in this process's ("" when
    they can, or where the kernel does not say where they are)."""
    where = _regions()
    if where is None:
        return ""
    args, env = _blocks(order)
    if len(args) > where[1] - where[0]:
        return "its command line is longer than the standby's"
    if len(env) > where[3] - where[2]:
        return "its environment is larger than the room the standby has for it"
    return ""


def retitle(order: dict[str, Any]) -> None:
    """Show the worker's command line and environment as this process's, as a cold worker
    shows them (``ps``, ``pgrep -f``, ``/proc/PID/environ``): written over the standby's
    own, which nothing reads any more (Python keeps copies; the C environment was emptied
    first, ``_clear_c_environ``). What is left of either block is zeros."""
    import ctypes

    where = _regions()
    if where is None:
        return
    for block, start, end in zip(_blocks(order), where[0::2], where[1::2], strict=True):
        ctypes.memmove(start, block.ljust(end - start, b"\0"), end - start)


def _clear_c_environ() -> None:
    """The C library's environment emptied (its array pointed into the block ``retitle``
    overwrites); ``os.environ``'s next assignments fill it anew."""
    try:
        import ctypes

        ctypes.CDLL(None).clearenv()
    except (OSError, AttributeError):
        pass


def _read_line(sock: socket.socket) -> bytes:
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            return b""
        data += chunk
    return bytes(data)


def _path_entries(env: dict[str, str]) -> list[str]:
    """``PYTHONPATH`` as the interpreter puts it on ``sys.path`` (against the cwd)."""
    value = env.get("PYTHONPATH", "")
    return [os.path.abspath(p) for p in value.split(os.pathsep)] if value else []


def refuse(order: dict[str, Any], started: dict[str, str], path: list[str]) -> str:
    """Why this standby cannot be the worker ``order`` asks for ("" if it can)."""
    env = order["env"]
    if command(order["argv"]) is None:
        return "not a Python command a standby runs"
    for key in sorted({*env, *started}):
        if (key.startswith("PYTHON") and key != "PYTHONPATH" or key in STARTUP) \
                and env.get(key) != started.get(key):
            return f"{key} differs from the standby's"
    entries = _path_entries(started)
    if path[1:1 + len(entries)] != entries:
        return "sys.path does not start as PYTHONPATH said"
    return ""


def _take_output(pipe: str, early: str) -> None:
    """stdout and stderr into the rank's pipe, after what the standby wrote so far
    (an import's warning: a cold worker would have written it there too)."""
    fd = os.open(pipe, os.O_WRONLY)
    try:
        with open(early, "rb") as f:
            said = f.read()
        if said:
            os.write(fd, said)
    except OSError:
        pass
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def become(order: dict[str, Any], started: dict[str, str], early: str) -> None:
    """Take on the worker's process state (the order's environment, cwd, output)."""
    _pdeathsig(0)  # a worker outlives its launcher as a cold one would
    # What exec gives a cold worker: its launcher catches these while workers run, and a
    # caught signal is SIG_DFL after exec (Python then makes SIGINT KeyboardInterrupt). A
    # standby started before that has what its launcher had then: ignored, under nohup
    # or as a shell's background job.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _name(os.path.basename(sys.executable))
    os.environ.clear()
    _clear_c_environ()
    os.environ.update(order["env"])
    retitle(order)
    os.chdir(order["cwd"])
    _take_output(order["pipe"], early)
    hook = sys.modules.get("kdist_sitehook")
    if hook is not None and hasattr(hook, "became_worker"):
        hook.became_worker(os.environ)
    old = _path_entries(started)
    sys.path[1:1 + len(old)] = _path_entries(dict(os.environ))


def _fresh_main() -> dict[str, Any]:
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main
    return main.__dict__


def _trimmed(tb: Any) -> Any:
    """A traceback less this module's and runpy's frames in front (Python's own run of
    a script shows none of them)."""
    import runpy

    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__)}
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in ours:
        tb = tb.tb_next
    return tb


def run(argv: list[str]) -> None:
    """Run the worker's command as ``python -u ...`` would, in this process."""
    found = command(argv)
    assert found is not None  # refuse() said so
    kind, what, args = found
    sys.orig_argv[:] = argv
    safe = getattr(sys.flags, "safe_path", False)
    try:
        if kind == "module":
            import runpy

            sys.argv[:] = ["-m", *args]
            if not safe:
                sys.path[0] = os.getcwd()
            _fresh_main()
            runpy._run_module_as_main(what, alter_argv=True)  # type: ignore[attr-defined]
            return
        if kind == "code":
            sys.argv[:] = ["-c", *args]
            if not safe:
                sys.path[0] = ""
            main = _fresh_main()
            main["__loader__"] = importlib.machinery.BuiltinImporter
            code = compile(what, "<string>", "exec")
        else:
            sys.argv[:] = [what, *args]
            full = os.path.abspath(what)
            try:
                with open(full, "rb") as f:
                    source = f.read()
            except OSError as e:
                print(f"{argv[0]}: can't open file {full!r}: [Errno {e.errno}] {e.strerror}",
                      file=sys.stderr, flush=True)
                os._exit(2)
            if not safe:
                sys.path[0] = os.path.dirname(os.path.realpath(full))
            main = _fresh_main()
            main.update(__file__=full, __cached__=None,
                        __loader__=importlib.machinery.SourceFileLoader("__main__", full))
            code = compile(source, full, "exec")
        exec(code, main)
    except SystemExit:
        raise
    except BaseException as e:  # as the interpreter ends on an uncaught exception
        tb = _trimmed(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):  # Python exits by SIGINT then
            _exit_by_sigint()
        sys.exit(1)


def _exit_by_sigint() -> None:
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def main() -> None:
    sock = socket.socket(fileno=int(os.environ.pop(FD)))
    early = os.environ.pop(EARLY, os.devnull)
    os.environ.pop(ROOM, None)
    preload = [m for m in os.environ.pop(PRELOAD_ENV, "").split(",") if m] or PRELOAD
    launcher = os.getppid()
    _pdeathsig(signal.SIGKILL)
    if os.getppid() != launcher:  # it died before the line above
        os._exit(0)
    started = dict(os.environ)
    path = list(sys.path)
    for name in preload:
        importlib.import_module(name)
    sock.sendall(b"ready\n")
    _name(NAME)  # once ready: what a drill or an operator may wait for
    line = _read_line(sock)
    if not line:  # the launcher closed it: not needed
        os._exit(0)
    order = json.loads(line)
    why = refuse(order, started, path) or no_room(order)
    if why:
        sock.sendall(f"cold {why}\n".encode())
        os._exit(0)
    try:
        become(order, started, early)
    except Exception as e:  # nothing of the script ran: the launcher starts it cold
        sock.sendall(f"cold {type(e).__name__}: {e}\n".encode())
        os._exit(0)
    sock.sendall(b"ok\n")
    sock.close()
    run(order["argv"])
