"""`kdist logs`: each pod's log lines, prefixed with what the pod is.

"rank" is torch's RANK: where a pod runs one process its index is that rank
(`[rank N]`); with procsPerNode > 1 a pod is a node holding several ranks, and
its log all of their lines (`[node N]`, `--node N`). `--rank` is kept where it
means what it says, and refused, pointing at the right `--node`, where not.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from kdist.cli.cluster_verbs import _name, _opts, _watching
from kdist.cli.jobfiles import name_or_file
from kdist.cli.options import ClusterOptions, Command, cluster_options
from kdist.cli.say import say
from kdist.shared.errors import ClusterError, UsageError
from kdist.shared.terminal import log_for


@click.command(cls=Command, examples=[
    "kdist logs demo",
    "kdist logs demo -f -n team-a          # follow to the end, across restarts",
    "kdist logs demo --node 1 --tail 100   # pod 1 (with procsPerNode 2: ranks 2-3)",
    "kdist logs --filename job.yaml -f     # the job job.yaml makes (-f here is --follow)"])
@click.option("--node", type=click.IntRange(min=0, max=100_000),
              help="Only this node's log (pod N of the job; with procsPerNode > 1 it holds "
                   "the lines of all its ranks).")
@click.option("--rank", type=click.IntRange(min=0, max=100_000),
              help="Only this rank (torch's RANK): where each pod runs one process; with "
                   "more, refused in favour of --node.")
@click.option("-f", "--follow", is_flag=True,
              help="Wait through Pending, follow every node across restarts, end with the job "
                   "(exit 1 if it failed).")
@click.option("--all-nodes", is_flag=True,
              help="With -f: follow every node, not only nodes 0-31 (a connection each).")
@click.option("--tail", type=click.IntRange(min=0, max=10_000_000),
              help="Start from the last N lines of each log.")
@cluster_options
@name_or_file(short=False)
def logs(opts: ClusterOptions, name: str, node: int | None, rank: int | None, follow: bool,
         all_nodes: bool, tail: int | None) -> None:
    """Print the logs of job NAME, each pod's lines prefixed with `[rank N] `.

    "rank" is torch's RANK: with procsPerNode > 1 a pod (a node) runs several
    ranks and its log holds all of their lines, so they are prefixed `[node N] `
    instead (N the pod's index; it holds ranks N x procsPerNode and up).
    On a terminal a line keeps its colours; any other escape sequence in it is
    shown as text (^[), not obeyed. Piped or redirected, lines pass as the pods
    wrote them, as `kubectl logs` passes them.

    A rank whose log the API server refuses (a 5xx, 404 or 400: its node gone, its
    container not started) or does not answer is skipped with one stderr line naming it,
    its pod and the answer (lines it printed before a cut stay); the other ranks follow,
    and the command then exits 3 saying how many logs could not be read. A 401 or 403,
    a missing job, or a server not reached at all still end it at once.
    """
    from kdist import api
    from kdist.api.ranklogs import rank_log_streams
    from kdist.api.types import Connection, target

    _name(name)
    if node is not None and rank is not None:
        raise UsageError("give --node or --rank, not both")
    chosen = node if node is not None else rank
    with _rank_words(rank):
        if follow:
            from kdist.cli.progress import LogDisplay

            # Before any log is read: --rank refused where a pod runs several ranks.
            display = LogDisplay(on_start=lambda s: check_rank_asked(name, rank,
                                                                      s.procs_per_node))
            with _watching(name, api.namespace(**_opts(opts))):
                api.wait(name, logs=True, tail=tail, rank=chosen, observer=display,
                         all_nodes=all_nodes, **_opts(opts))
            return
        # Streamed, not `api.rank_logs`' lists: a log of any size, as kubectl prints it.
        entries = rank_log_streams(Connection(target(**_opts(opts))), name, rank=chosen,
                                   tail=tail)
    if entries:
        check_rank_asked(name, rank, entries[0][0].procs_per_node)
    unit = "rank" if entries and entries[0][0].procs_per_node == 1 else "node"
    unread = 0
    for entry, lines in entries:
        if entry.note:
            say(f"[{unit} {entry.rank}] ({entry.note})", err=True)
        for line in lines:
            # color=True: click would strip colours when piped; kdist passes them on
            # (log_for decides what a terminal gets).
            click.echo(f"[{unit} {entry.rank}] {log_for(sys.stdout, line)}", color=True)
        if lines.note:  # refused or cut off (`ranklogs.rank_own`): the next ranks follow
            unread += 1
            say(f"[{unit} {entry.rank}] ({lines.note}; {'the rest ' * bool(lines.count)}"
                "skipped)", err=True)
    if unread:
        raise ClusterError(f"the logs of {unread} of {len(entries)} {unit}s could not be "
                           "read whole (each said above)")


@contextmanager
def _rank_words(rank: int | None) -> Iterator[None]:
    """The API counts pods (node ranks): a --rank it finds out of range is said as --rank,
    with where to go when the pods run several ranks each."""
    try:
        yield
    except UsageError as e:
        if rank is None or not str(e).startswith(f"node {rank}:"):
            raise
        raise UsageError(f"--rank {rank}: {e}; where a pod runs several ranks, choose its "
                         "pod with --node") from None


def check_rank_asked(name: str, rank: int | None, procs_per_node: int | None) -> None:
    """UsageError when --rank cannot mean torch's RANK: the pods run several ranks each
    (or "auto", one per GPU), and a pod's log is all of its node's ranks together."""
    if rank is None or procs_per_node == 1:
        return
    if procs_per_node is None:
        raise UsageError(f"--rank {rank}: job {name} runs procsPerNode \"auto\" (or does not "
                         "say): a pod's log holds all of its node's ranks; use --node N (pod N)")
    node = rank // procs_per_node
    first = node * procs_per_node
    raise UsageError(f"--rank {rank}: job {name} runs {procs_per_node} ranks per node and a "
                     f"pod's log holds all of them: use --node {node} (ranks "
                     f"{first}-{first + procs_per_node - 1})")
