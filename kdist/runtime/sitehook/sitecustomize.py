"""kdist's worker hook: ``collectiveTimeoutSeconds`` becomes torch's default timeout.

Python's ``site`` imports this in every kdist worker (its directory is first
on ``PYTHONPATH``: ``kdist.runtime.worker_exec``), before the script runs.
torch has no variable for the default process-group timeout (30 minutes for
gloo, 10 for NCCL); a script that passes none to ``init_process_group`` or
``new_group`` (most do) would wait that long on a silent peer. So when
``torch.distributed.constants`` is first imported (by ``import torch``), its
``default_pg_timeout`` and ``default_pg_nccl_timeout`` are set to
``KDIST_PG_TIMEOUT`` seconds; ``distributed_c10d`` and libraries (Lightning
reads the constant) take them from there. A timeout the script passes itself
still wins.

In rank 0's worker it also serves the job's store, the one torchrun's agent
would host (``TORCHELASTIC_USE_AGENT_STORE=True``): the launcher, which does not
import torch, binds the master port and hands the listening socket down
(``KDIST_STORE_FD``); right after ``torch.distributed.constants`` loads, a
TCPStore server takes it over, so ``init_process_group`` (every rank a client of
``MASTER_ADDR:MASTER_PORT``) finds it, however the script was started. The
variable is removed from the environment: a process this worker starts does not
serve it again.

It also lets the launcher ask for every thread's Python stack at a hang
(``kdist.runtime.stacks``): ``faulthandler`` prints them to stderr on
``DUMP_SIGNAL``, a real-time signal nothing else uses. And once
``torch.distributed`` loads, a thread keeps the count of collectives this rank
started (its default group's sequence number, which DDP's all-reduce from C++
inside ``backward()`` counts too) in ``KDIST_COLLECTIVE_COUNTS``: at a hang a
rank that waits in a collective has started one more than the rank that never
reached it, whatever their Python frames show (``count_collectives``).

And it ends a process group the script left alive when the worker exits
(``end_group_at_exit``). Most scripts never call ``destroy_process_group``; then
gloo's worker threads can still hold a finished collective's tensors when the
interpreter finalizes, and the thread that drops them needs the GIL that
finalization no longer hands out: ``terminate called without an active
exception``, SIGABRT, a rank whose work succeeded counted as failed. Destroyed
from an ``atexit`` handler registered here, before the script's own (so it runs
after them), the group's threads are joined while Python is whole; the exit
code and the rest of finalization stay Python's. (Python 3.12 lets no atexit
handler start the thread that bounds the destroy: there the threads only get a
moment, with the GIL free, to drop what they hold.)

Last, it notes that the script ended (``note_end_at_exit``): once every other ``atexit``
handler ran, one line in ``<TORCHELASTIC_ERROR_FILE>.ended`` (this pid, and ``ok`` unless
an uncaught exception or a non-zero ``sys.exit`` was seen). A worker that then dies of
SIGABRT or SIGSEGV died in the interpreter's or a library's teardown (torch's C++ at
exit), after its work was done: the launcher counts it as succeeded, and says so
(``kdist.runtime.workers``).

A standby worker (``_kdist_standby``, spec.distributed.warmWorkers) runs this module before
it has a rank: the timeout is set as in any worker, and once it is handed a rank,
``became_worker`` does with the rank's own variables (the store's socket, the counts, the
error file) what ``install`` and ``note_end_at_exit`` do with them at a cold start.

This module shadows any other ``sitecustomize`` (an image may ship one), so
it runs that one too, afterwards. Standard library only; never fails the
worker: a problem is one line on stderr.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from datetime import timedelta
from typing import Any

TARGET = "torch.distributed.constants"
RENDEZVOUS = "torch.distributed.rendezvous"
HOOK_MODULE = "kdist_sitehook"  # this module's name in sys.modules once chain() ran
PG_TIMEOUT = "KDIST_PG_TIMEOUT"  # kdist.shared.env.PG_TIMEOUT; this file imports nothing of kdist
STORE_FD = "KDIST_STORE_FD"  # kdist.runtime.workers.STORE_FD
COUNTS = "KDIST_COLLECTIVE_COUNTS"  # kdist.shared.env.COLLECTIVE_COUNTS
STANDBY_FD = "KDIST_STANDBY_FD"  # _kdist_standby.FD: this process is a standby worker
COUNT_EVERY_S = 0.5  # well within the shortest progressTimeoutSeconds
DUMP_SIGNAL_OFFSET = 5  # kdist.runtime.stacks.DUMP_SIGNAL = SIGRTMIN + 5
DEFAULT_STORE_TIMEOUT_S = 300
# At exit: how long destroying a leftover gloo group may take before the worker ends
# anyway (``_end_group``); then how long the threads of a group the script still
# holds (a DDP model in a global: destroy cannot free it) get to drop their last
# tensors while Python is whole.
END_GROUP_S = 10
END_GROUP_GRACE_S = 0.1
_PID = os.getpid()
_served: list[Any] = []  # the store server, alive as long as this process


def patch(module: Any, timeout: timedelta) -> None:
    """Set both default timeouts of a loaded ``torch.distributed.constants``."""
    module.default_pg_timeout = timeout
    if isinstance(getattr(module, "default_pg_nccl_timeout", None), timedelta):
        module.default_pg_nccl_timeout = timeout


def serve_store(fd: int, environ: Any) -> None:
    """Serve torch's TCPStore on the listening socket ``fd`` (rank 0's worker)."""
    from torch._C._distributed_c10d import TCPStore

    seconds = int((environ.get(PG_TIMEOUT) or "").strip() or DEFAULT_STORE_TIMEOUT_S)
    _served.append(TCPStore(
        environ.get("MASTER_ADDR", "127.0.0.1"), int(environ.get("MASTER_PORT", "0")), None,
        True, timedelta(seconds=seconds), wait_for_workers=False, multi_tenant=True,
        master_listen_fd=fd,
        # torch's own switch, as its env:// rendezvous reads it: a torch built without
        # libuv (Debian's) refuses the libuv server its default asks for.
        use_libuv=environ.get("USE_LIBUV", "1") == "1"))
    # Only this process may hold the listening socket: a program it starts (exec)
    # or forks (DataLoader workers) would keep the port bound after this worker
    # died, and the next attempt could not listen on it.
    os.set_inheritable(fd, False)
    port = int(environ.get("MASTER_PORT", "0"))
    os.register_at_fork(after_in_child=lambda: _close_listener(fd, port))


def _close_listener(fd: int, port: int) -> None:
    """Close ``fd`` in a forked child if it still is the socket on the master port (the
    number is not closed blindly: had the store let go of it, it could be another file)."""
    import socket

    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        if sock.getsockname()[1] == port:
            sock.close()
            return
    except (OSError, IndexError, TypeError):
        pass
    sock.detach()


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then ``after``; anything else is the real loader's."""

    def __init__(self, loader: Any, after: Any) -> None:
        self._loader, self._after = loader, after

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:  # get_source (tracebacks), is_package, ...
        return getattr(self._loader, name)


def clients_follow_use_libuv(module: Any) -> None:
    """``USE_LIBUV=0``: the store clients torch's env:// rendezvous makes follow it too.

    Under an agent's store (``TORCHELASTIC_USE_AGENT_STORE``) torch's
    ``_create_c10d_store`` opens its client with TCPStore's default, libuv, whatever
    ``USE_LIBUV`` says; a torch built without libuv (Debian's) then refuses every
    ``init_process_group()``. The module's ``TCPStore`` is wrapped to default to
    the switch; a ``use_libuv`` given explicitly still wins.
    """
    real = module.TCPStore

    def tcp_store(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("use_libuv", False)
        return real(*args, **kwargs)

    module.TCPStore = tcp_store


class PgTimeoutFinder:
    """A meta-path finder that answers only for its modules (``after``: name -> what to
    run once it is loaded), once each."""

    def __init__(self, after: Any) -> None:
        self.after = after if isinstance(after, dict) else {TARGET: after}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.after:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        after = self.after.pop(name)
        if not self.after and self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, after)
        return spec


def _serve(fd: str, environ: Any) -> None:
    """Rank 0 serves torch's store on the launcher's master-port socket (fd), if given."""
    if not fd:
        return
    try:
        serve_store(int(fd), environ)
    except Exception as e:  # the script fails in init_process_group, not here
        print(f"kdist: sitecustomize: cannot serve the store on the master port: "
              f"{type(e).__name__}: {e}", file=sys.stderr)


def install(environ: Any = os.environ) -> None:
    seconds = (environ.get(PG_TIMEOUT) or "").strip()
    timeout = timedelta(seconds=int(seconds)) if seconds else None
    fd = (environ.pop(STORE_FD, None) or "").strip()
    counts = environ.pop(COUNTS, None)  # this rank's, not a process it starts

    def after(module: Any) -> None:
        if counts:
            count_collectives(counts)
        if timeout is not None:
            patch(module, timeout)
        _serve(fd, environ)

    hooks: dict[str, Any] = {}
    if timeout is not None or fd or counts:
        hooks[TARGET] = after
    if environ.get("USE_LIBUV", "1") != "1":
        hooks[RENDEZVOUS] = clients_follow_use_libuv
    for name, hook in list(hooks.items()):
        loaded = sys.modules.get(name)
        if loaded is not None:  # too late for distributed_c10d's copy, not for later readers
            hooks.pop(name)
            hook(loaded)
    if hooks:
        sys.meta_path.insert(0, PgTimeoutFinder(hooks))


def count_collectives(path: str) -> None:
    """Keep this rank's count of collectives started in `path`, as it changes (see the
    module's doc); a daemon thread, so it never holds the worker's exit."""
    import threading
    import time

    def keep() -> None:
        last = None
        while True:
            time.sleep(COUNT_EVERY_S)
            dist = sys.modules.get("torch.distributed")
            try:
                if dist is None or not dist.is_initialized():
                    continue
                count = dist.distributed_c10d._get_default_group() \
                    ._get_sequence_number_for_group()
                if count != last:
                    with open(path + ".new", "w") as f:
                        f.write(str(count))
                    os.replace(path + ".new", path)
                    last = count
            except Exception:  # a group gone, a torch without it: no count, stacks alone
                continue

    threading.Thread(target=keep, name="kdist-collectives", daemon=True).start()


def dump_stacks_on_signal() -> None:
    import faulthandler
    import signal

    faulthandler.register(signal.SIGRTMIN + DUMP_SIGNAL_OFFSET, file=sys.stderr,
                          all_threads=True, chain=False)


def end_group_at_exit() -> None:
    atexit.register(_end_group)


ENDED_SUFFIX = ".ended"  # kdist.runtime.workers.ENDED_SUFFIX
_ended: dict[str, Any] = {"failed": False, "path": ""}


def note_end_at_exit() -> None:
    """Registered before `_end_group`, so it runs after every other atexit handler. In a
    standby (``STANDBY_FD``) too: its file is known once it is a worker (`became_worker`)."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not error_file and not os.environ.get(STANDBY_FD):
        return
    _ended["path"] = error_file + ENDED_SUFFIX if error_file else ""
    real_exit, real_hook = sys.exit, sys.excepthook

    def exit(status: Any = None) -> None:  # noqa: A001 (sys.exit's stand-in)
        _ended["failed"] = status not in (None, 0)
        real_exit(status)

    def excepthook(*args: Any) -> None:
        _ended["failed"] = True
        real_hook(*args)

    sys.exit, sys.excepthook = exit, excepthook  # type: ignore[assignment]
    atexit.register(_note_end)


def _note_end() -> None:
    path = _ended["path"]
    if os.getpid() != _PID or not path:  # a forked child's exit is not the worker's
        return
    try:
        with open(path, "w") as f:
            f.write(f"{_PID} {'failed' if _ended['failed'] else 'ok'}\n")
    except OSError:
        pass


def became_worker(environ: Any) -> None:
    """A standby (``_kdist_standby``) is now a rank's worker, ``environ`` its environment:
    what ``install`` and ``note_end_at_exit`` do with a rank's own variables, which the
    standby did not have when this module ran."""
    error_file = environ.get("TORCHELASTIC_ERROR_FILE", "")
    _ended["path"] = error_file + ENDED_SUFFIX if error_file else ""
    fd = (environ.pop(STORE_FD, None) or "").strip()
    counts = environ.pop(COUNTS, None)
    if counts:
        count_collectives(counts)
    _serve(fd, environ)


def _end_group() -> None:
    """Destroy the default process group if the script left it (see the module's doc)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or os.getpid() != _PID:  # a forked child: the group's threads are not here
        return
    try:
        # gloo's only: NCCL's teardown is the script's and NCCL's own (in some NCCL
        # versions destroying a communicator waits for every rank).
        if not (dist.is_available() and dist.is_initialized()) or dist.get_backend() != "gloo":
            return
    except Exception:
        return
    import threading
    import time

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    # In a thread, so that a destroy that waits (a collective still queued for a peer
    # that never joins it) cannot hold the exit, or its code, hostage.
    helper = threading.Thread(target=_destroy, args=(dist,), name="kdist-end-group",
                              daemon=True)
    try:
        helper.start()
    except RuntimeError:  # Python 3.12 starts no thread at exit: the grace alone
        pass
    else:
        helper.join(END_GROUP_S)
        if helper.is_alive():
            print(f"kdist: sitecustomize: destroy_process_group did not return within "
                  f"{END_GROUP_S}s at exit (a collective still waits for a peer); "
                  f"exiting without it", file=sys.stderr, flush=True)
            return
    time.sleep(END_GROUP_GRACE_S)  # the GIL is free: gloo threads drop what they hold


def _destroy(dist: Any) -> None:
    import gc

    try:
        gc.collect()  # a group held only by reference cycles (DDP's) is freed with it
        dist.destroy_process_group()
    except Exception as e:
        print(f"kdist: sitecustomize: destroy_process_group at exit: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)


def chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` (the image's), which this one shadows.

    That one takes the name ``sitecustomize`` in ``sys.modules``; this one stays there
    as ``kdist_sitehook`` (Debian's Python ships a sitecustomize of its own)."""
    this = sys.modules.get(__name__)
    if this is not None:
        sys.modules[HOOK_MODULE] = this
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


for _step in (install, dump_stacks_on_signal, note_end_at_exit, end_group_at_exit, chain):
    try:
        _step()
    except Exception as _e:  # a worker must start whatever happens here
        print(f"kdist: sitecustomize: {_step.__name__}: {type(_e).__name__}: {_e}",
              file=sys.stderr)
