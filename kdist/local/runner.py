"""``kdist run --local``: a job as local process groups, one per node.

Each node is the pod's own container command (``python -m kdist.launch
...``) with the pod's environment contract and master 127.0.0.1, started in
its own session so that it and only it can be signalled as a group. Output
lines come back prefixed ``[rank N] `` (the launcher prefixes worker lines
when ``KDIST_LOG_PREFIX`` is set) or ``[node I] `` (the launcher's own lines).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from kdist.local.gpus import _gpu_env
from kdist.local.ledger import LocalLedger
from kdist.local.state import (
    counted_restarts,
    earlier_checkpoints,
    local_checkpoint_dir,
    memory_dir,
    memory_root,
    state_dir,
)
from kdist.local.stop import _kill_tree, _stop, _stop_saving
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared.errors import UsageError
from kdist.shared.processes import descendants  # noqa: F401 (tests/compat read it here)
from kdist.shared.signals import interruptible, received

LOCAL_MASTER = "127.0.0.1"
# How long the other nodes get to fail on their own once one has failed (their
# peer is gone, so gloo fails them at once), and how long a signalled launcher
# gets to stop its workers: a pod's default terminationGracePeriodSeconds (the
# launcher gives its workers kdist.runtime.agent.STOP_GRACE_S of it to save).
FAIL_GRACE_S = 10.0
STOP_GRACE_S = 60.0
# ... and, once a node failed, how long the rest get to stop: nothing is left to
# save (a peer is gone); a node whose workers finished is in the launcher's exit
# barrier, which a signal ends at once.
FAILED_STOP_GRACE_S = 10.0


def run_local(job: Any, *, stdout: IO[str] | None = None, code: Any = None,
              on_attempt: Callable[[int], None] | None = None,
              on_interrupt: Callable[[int], None] | None = None, root: Path | None = None,
              on_ledger: Callable[[dict[str, Any]], None] | None = None,
              fresh: bool = False, on_checkpoints: Callable[[Path], None] | None = None) -> int:
    """Run ``job`` as ``job.spec.nodes`` local launchers; return the job's exit code.

    The exit code is the most telling one a node exits with (a code error
    before a kill before a lost peer; 0 when all succeed), after up to
    ``spec.distributed.maxRestarts`` restarts of every node. When the spec's
    port is taken here (another local run), a free one is used, said in one
    line on stderr. `code` (a packed workdir) runs the nodes in a fresh copy of
    it (``local_workspace``). `on_interrupt(signal)`: see ``run_nodes``. `root`: where
    ``.kdist/<name>`` is (`kdist.local.state.state_root`; default the current directory).
    `on_ledger(ledger)` hears, at the end, the run's goodput ledger (``kdist.local.ledger``,
    as `kdist status -o json` has a job's) when a node restarted. `fresh`: the job's local
    checkpoints are removed first (else the run resumes from them, said in one line);
    `on_checkpoints(dir)` hears where they are, when spec.checkpoint is set."""
    from kdist.rendering import contract

    _preflight(job, root := root or Path.cwd())
    # Each node's container env as a pod's spec lists it (not yet this process's env).
    # Warm spares (spec.distributed.spares) are node groups beyond the ranks, as pods.
    pods = job.spec.nodes + job.spec.distributed.spares
    envs = [contract.pod_env(job, node_rank=i, master_addr=LOCAL_MASTER, local=True,
                             slot_addr=LOCAL_MASTER) for i in range(pods)]
    _gpu_env(job, envs)
    ckpt = local_checkpoint_dir(job, root)
    if ckpt is not None:
        earlier_checkpoints(ckpt, fresh)
        if on_checkpoints is not None:
            on_checkpoints(ckpt)
        try:
            ckpt.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{ckpt}: cannot create the local run's checkpoint directory: "
                             f"{e.strerror or e}") from None
        print(f"kdist: checkpoints of this local run go to {ckpt} "
              f"(spec.checkpoint.path is the pods' path)", file=sys.stderr, flush=True)
        for env in envs:
            env[E.CHECKPOINT_DIR] = str(ckpt)
    port = int(envs[0][E.MASTER_PORT])
    chosen = free_port(port)
    if chosen is not None and chosen != port:
        print(f"kdist: port {port} (spec.distributed.port) is in use here; this local run "
              f"uses port {chosen}", file=sys.stderr, flush=True)
        for env in envs:  # before $(KDIST_MASTER_PORT) is expanded: it is this port
            env[E.MASTER_PORT] = str(chosen)
    # $(VAR) in env values and args, as the kubelet expands them in a pod.
    envs = [contract.expanded_env(env) for env in envs]
    argvs = [[contract.expand_refs(a, env) for a in contract.launch_argv(job)] for env in envs]
    envs = [local_env(env) for env in envs]
    workspace = None if code is None else local_workspace(job, code, root)
    if workspace is not None:
        print(f"kdist: code {code.sha256[:12]} unpacked into {workspace} (the pods' "
              f"{E.DEFAULT_CODE_DIR}): the nodes run there", file=sys.stderr, flush=True)
        for env in envs:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(workspace), env.get("PYTHONPATH")) if p)
    ledger, s = LocalLedger(job.spec.distributed.max_restarts), job.spec
    counts = tempfile.TemporaryDirectory(prefix="kdist-restarts-")
    dirs = None
    d = job.spec.distributed
    if d.max_restarts and d.restart_workers and d.restart_mode != "recreate":
        # As in a pod restarting in place: the launchers restart their workers themselves.
        dirs = [Path(counts.name) / f"node-{i}" for i in range(len(envs))]
        for d in dirs:
            d.mkdir()
    with counts:
        code = run_nodes(argvs[0], envs, stdout=stdout,
                         max_restarts=job.spec.distributed.max_restarts, cwd=workspace,
                         node_argvs=argvs, on_attempt=on_attempt, on_interrupt=on_interrupt,
                         ledger=ledger, restart_dirs=dirs,
                         ranks=s.min_nodes if s.elastic else s.nodes if s.distributed.spares
                         else None)  # an elastic job: a lost node never succeeds
    summary = ledger.summary(succeeded=code == 0)
    if summary is not None and on_ledger is not None:
        on_ledger(summary)
    return code


def local_workspace(job: Any, code: Any, cwd: Path) -> Path:
    """A fresh ``.kdist/<name>/workspace`` holding the code, byte for byte what pods get.

    The same path as in a pod: the ConfigMaps' parts (as rendered) are written to
    ``.kdist/<name>/code``, then checked against the hash and unpacked by the
    launcher's own unpacker. Unpacked once for every node (they share this
    machine's directory, as the pods of one node would). Nothing of an earlier
    run survives in it.
    """
    import base64

    from kdist.rendering.code_configmaps import to_configmaps
    from kdist.runtime.workdir import UnpackError, unpack

    state = state_dir(job.metadata.name, cwd)
    parts, workspace = state / "code", state / "workspace"
    try:
        for path in (parts, workspace):
            if path.is_symlink() or path.is_file():  # the link goes, never what it points to
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)  # removes the links inside, never follows them
        parts.mkdir(parents=True)
        for cm in to_configmaps(job.metadata.name, None, code, {}):
            for key, data in cm["binaryData"].items():
                (parts / key).write_bytes(base64.b64decode(data))
        unpack([parts], code.sha256, workspace)
    except UnpackError as e:
        raise UsageError(f"{workspace}: {e}") from None
    except OSError as e:
        raise UsageError(f"{workspace}: cannot prepare the local run's code: "
                         f"{e.strerror or e}") from None
    return workspace


def _preflight(job: Any, root: Path) -> None:
    """What a local run needs, checked before any process starts (UsageError, exit 2)."""
    import importlib.util

    state_dir(job.metadata.name, root)  # first: refused with or without torch
    try:
        has_torch = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken install, or torch blocked in sys.modules
        has_torch = False
    if not has_torch:
        raise UsageError("kdist run --local needs torch, which is not installed here: "
                         "pip install 'kdist[train]' (or any torch >= 2.8)")


def local_env(contract_env: Mapping[str, str]) -> dict[str, str]:
    """The pod's contract over this process's environment, less every name the contract
    owns (``env.contract_owned``: KDIST_*, RANK, MASTER_ADDR, TORCHELASTIC_*...): a stale
    KDIST_CHECKPOINT_DIR in the shell must not change a local run as it would never change
    a pod. The CLI reads its own settings (KDIST_REQUEST_TIMEOUT...) itself; of kdist's
    variables only ``env.LOCAL_PASSTHROUGH`` (the fault drills' hook) reaches the nodes."""
    inherited = {k: v for k, v in os.environ.items()
                 if not E.contract_owned(k) or k in E.LOCAL_PASSTHROUGH}
    env = {**inherited, **contract_env, E.LOG_PREFIX: "1", "PYTHONUNBUFFERED": "1"}
    # A source checkout (not an installed kdist) must stay importable for the
    # launcher and its workers, whatever their working directory.
    root = str(Path(__file__).resolve().parent.parent)
    if "site-packages" not in root and root not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def free_port(port: int) -> int:
    """``port`` when nothing listens on it here, else a free port the system picks.

    A pod has the port to itself; two local runs on one machine (two notebooks
    calling ``train(local=True)``) would otherwise meet at the same rendezvous.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # REUSEADDR: a port in TIME_WAIT from the previous run is free to use.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
            return port
        except OSError:
            pass
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _python(argv: Sequence[str]) -> list[str]:
    argv = list(argv)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def _pump(proc: subprocess.Popen[bytes], node: int, out: IO[str], lock: threading.Lock,
          ledger: LocalLedger | None = None) -> None:
    assert proc.stdout is not None
    # Bytes as the ranks wrote them (invalid UTF-8 too) where ``out`` has a binary side.
    binary: IO[bytes] | None = getattr(out, "buffer", None)
    writable, at_start = True, True
    # Read to the end even when `out` is gone (a full pipe blocks). A long line comes
    # in pieces (not held whole), prefixed once, the lock held until it ends (the
    # launcher ends a line within a second of its rank going quiet).
    for raw in iter(lambda: proc.stdout.readline(1 << 16), b""):  # type: ignore[union-attr]
        if at_start:
            if ledger is not None:
                try:
                    ledger.line(node, raw.decode("utf-8", errors="replace").rstrip("\r\n"))
                except Exception:  # noqa: BLE001 (a line it cannot read must not stop the pipe)
                    pass
            lock.acquire()
            if not raw.startswith(b"[rank "):
                raw = b"[node %d] " % node + raw
        at_start = raw.endswith(b"\n")
        try:
            if writable:
                _emit(out, binary, raw)
        except (OSError, ValueError):  # a closed pipe or file: keep the job running
            writable = False
        except Exception:  # noqa: BLE001 (a reader of the lines that failed on one: go on)
            pass
        finally:
            if at_start:
                lock.release()
    if not at_start:
        try:
            if writable:
                _emit(out, binary, b"\n")
        except (OSError, ValueError):
            pass
        finally:
            lock.release()


def _emit(out: IO[str], binary: IO[bytes] | None, data: bytes) -> None:
    if binary is not None:
        out.flush()
        binary.write(data)
        binary.flush()
    else:
        out.write(data.decode("utf-8", errors="replace"))
        out.flush()


def run_nodes(
    argv: Sequence[str],
    envs: Sequence[Mapping[str, str]],
    *,
    stdout: IO[str] | None = None,
    max_restarts: int = 0,
    fail_grace_s: float = FAIL_GRACE_S,
    stop_grace_s: float = STOP_GRACE_S,
    cwd: Path | None = None,
    node_argvs: Sequence[Sequence[str]] | None = None,
    on_attempt: Callable[[int], None] | None = None,
    on_interrupt: Callable[[int], None] | None = None,
    ledger: LocalLedger | None = None,
    restart_dirs: Sequence[Path] | None = None,
    ranks: int | None = None,
) -> int:
    """Start one ``argv`` per env (node), stream their output, return the job's exit code.

    When a node fails, the others get ``fail_grace_s`` to fail or finish on
    their own before they are stopped. A retryable failure (``kdist.exitcodes``)
    restarts every node, up to ``max_restarts`` times, as the Job controller
    would recreate every pod; each attempt's nodes get ``KDIST_RESTART_COUNT``.
    Ctrl-C (or SIGTERM) stops every node's process group with SIGTERM, as a deleted
    pod's (then SIGKILL after ``stop_grace_s``; a second Ctrl-C kills the workers at
    once), is never retried, and exits 128 + the signal the runner got.
    ``node_argvs``: a command line per node, where they differ (``$(KDIST_NODE_RANK)``).
    ``on_attempt(restart)`` hears of each attempt before its nodes start (a live table);
    ``on_interrupt(signal)`` of a Ctrl-C / SIGTERM that ended the run (its exit code alone
    cannot tell it from a node that exited 130 on its own). ``ledger`` hears every line,
    every node's exit and each restart. ``restart_dirs``: a directory per node, as a pod
    restarting in place has (``KDIST_RESTART_DIR``): the launchers restart their workers
    themselves and count every restart there (the runner's too), bounding them.
    ``ranks``: with warm spares or elastic (``spec.minNodes``), the job succeeds once this
    many nodes have (whichever hold the ranks, as a Job succeeds on its pods), and the rest
    (free spares, a lost node) are stopped; a node that exits ``exitcodes.FENCED`` (a spare
    took its rank, or the gang went on without it) is no failure.
    """
    out = stdout if stdout is not None else sys.stdout
    argvs = list(node_argvs) if node_argvs is not None else [argv] * len(envs)
    restart = 0
    memory = memory_root()  # each node's /dev/shm (kdist.workloads.memory_file)
    try:
        while True:
            attempt = [{**env, E.RESTART_COUNT: str(restart), E.MEMORY_DIR: memory_dir(
                memory, i, None if restart_dirs else restart)} for i, env in enumerate(envs)]
            if restart_dirs is not None:  # the launchers count (from 0) in their directories
                attempt = [{**env, E.RESTART_COUNT: "0", E.RESTART_DIR: str(d)}
                           for env, d in zip(attempt, restart_dirs, strict=True)]
            if on_attempt is not None:
                on_attempt(restart)
            node, code, interrupted = _run_once(argvs, attempt, out, fail_grace_s, stop_grace_s,
                                                cwd, ledger, ranks)
            if interrupted and on_interrupt is not None:
                on_interrupt(code - 128)
            counted = counted_restarts(restart_dirs) if restart_dirs is not None else restart + 1
            if interrupted or not exitcodes.is_retryable(code) or counted > max_restarts:
                return code
            restart = counted
            if ledger is not None:
                ledger.restarting(node, code)
            print(f"kdist: node {node} exited with code {code}, {exitcodes.describe(code)}; "
                  f"restarting every node (restart {restart} of {max_restarts}), resuming "
                  "from the newest checkpoint", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(memory, ignore_errors=True)


def _run_once(
    argvs: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    out: IO[str],
    fail_grace_s: float,
    stop_grace_s: float,
    cwd: Path | None = None,
    ledger: LocalLedger | None = None,
    ranks: int | None = None,
) -> tuple[int, int, bool]:
    """One attempt of every node: (the failed node that tells most, its code, interrupted).
    ``ranks``: see ``run_nodes``."""
    lock = threading.Lock()
    exits: queue.Queue[tuple[int, int]] = queue.Queue()
    procs: list[subprocess.Popen[bytes]] = []
    threads: list[threading.Thread] = []
    failures: list[tuple[int, int]] = []  # (node, exit code) in the order they came
    interrupted = False
    with interruptible(sigterm_once=True):
        try:
            for node, (argv, env) in enumerate(zip(argvs, envs, strict=True)):
                proc = subprocess.Popen(
                    _python(argv), env=dict(env), stdin=subprocess.DEVNULL, cwd=cwd,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                )
                procs.append(proc)
                pump = threading.Thread(target=_pump, args=(proc, node, out, lock, ledger),
                                        daemon=True)
                pump.start()
                threads.append(pump)
                threading.Thread(
                    target=lambda p=proc, n=node: exits.put((n, p.wait())), daemon=True
                ).start()
            pending, succeeded = len(procs), 0
            while pending and (ranks is None or succeeded < ranks):
                timeout = fail_grace_s if failures else None
                try:
                    node, rc = exits.get(timeout=timeout)
                except queue.Empty:
                    break  # a node failed and the rest did not follow in time
                pending -= 1
                succeeded += rc == 0
                if ranks is not None and rc == exitcodes.FENCED:
                    print(f"kdist: node {node} was fenced (a spare holds its rank, or the "
                          "gang went on without it): not a failure", file=sys.stderr,
                          flush=True)
                elif rc:
                    failures.append((node, exitcodes.of_returncode(rc)))
                    if ledger is not None:
                        ledger.exited(node, exitcodes.of_returncode(rc))
            _stop(procs, signal.SIGTERM, min(stop_grace_s, FAILED_STOP_GRACE_S))
        except KeyboardInterrupt as e:
            # Ctrl-C or SIGTERM: the nodes are stopped as a deleted pod is, by SIGTERM (the
            # workers save at one step: zero loss); a second Ctrl-C cuts that short.
            sig = received(e)
            failures.append((-1, 128 + sig))
            interrupted = True
            if sig == signal.SIGINT:
                print("kdist: Ctrl-C: stopping every node as a deleted pod is (SIGTERM: the "
                      "workers may save); Ctrl-C again stops them at once", file=sys.stderr,
                      flush=True)
            _stop_saving(procs, envs, signal.SIGTERM, stop_grace_s)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    _kill_tree(proc)
            for pump in threads:
                pump.join(timeout=5)
    if not failures:
        return -1, 0, interrupted
    if interrupted:
        return failures[0][0], failures[0][1], True
    _, (node, code) = min(enumerate(failures), key=lambda f: (exitcodes.severity(f[1][1]), f[0]))
    return node, code, False
