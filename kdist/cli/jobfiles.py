"""Every verb that names a job takes the job file instead, as kubectl's `-f FILE`.

`kdist delete -f job.yaml` deletes the job that file makes: its metadata.name, in
its metadata.namespace when it sets one (a different -n is refused, as `submit`
refuses it). The file is validated as `submit` would: a file that would not make
a job names none. `-` is standard input. (`logs` spells it `--filename` only: its
`-f` is `--follow`, as kubectl's.)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import click

from kdist.cli.options import ClusterOptions
from kdist.shared.errors import UsageError

_HELP = ("Take the job's name (and namespace, when it sets one) from this job file, as "
         "kubectl's -f ('-': standard input).")


def job_from_file(opts: ClusterOptions, file: str) -> tuple[ClusterOptions, str]:
    """`opts` with the namespace the job file names, and the job's name."""
    from kdist import api

    job = api.load_file(file, opts.namespace, warn=lambda line: None)  # advice: for submit
    ns = job.metadata.namespace or opts.namespace
    return dataclasses.replace(opts, namespace=ns), job.metadata.name


def name_or_file(*, short: bool = True):
    """NAME, or -f/--filename FILE instead (the command gets `name` either way).

    Below `cluster_options` (applied first): it gets the merged options and passes
    them on with the file's namespace. `short=False`: only --filename (logs' -f follows).
    """
    decls = ("-f", "--filename") if short else ("--filename",)

    def decorate(f):
        @functools.wraps(f)
        def resolved(opts: ClusterOptions, *args: Any, name: str | None,
                     filename: str | None, **kwargs: Any) -> Any:
            if (name is None) == (filename is None):
                raise UsageError("give the job's NAME or -f FILE (one of them)")
            if filename is not None:
                opts, name = job_from_file(opts, filename)
            return f(opts, *args, name=name, **kwargs)

        resolved = click.option(*decls, "filename", metavar="FILE", help=_HELP,
                                type=click.Path(dir_okay=False))(resolved)
        return click.argument("name", required=False)(resolved)

    return decorate


def names_or_files(f):
    """NAMEs, or one or more -f/--filename FILE instead (`wait`): every file's job, in one
    namespace (the files may not name two)."""

    @functools.wraps(f)
    def resolved(opts: ClusterOptions, *args: Any, names: tuple[str, ...],
                 filename: tuple[str, ...], **kwargs: Any) -> Any:
        if names and filename:
            raise UsageError("give job NAMEs or -f FILEs, not both")
        if filename.count("-") > 1:
            raise UsageError("'-' (standard input) can be read once: give it one time")
        found = [job_from_file(opts, file) for file in filename]
        spaces = {o.namespace for o, _ in found}
        if len(spaces) > 1:
            raise UsageError(f"-f: the files name jobs in several namespaces "
                             f"({', '.join(sorted(str(s) for s in spaces))}); wait for "
                             "each namespace's apart")
        if found:
            opts, names = found[0][0], tuple(name for _, name in found)
        return f(opts, *args, names=names, **kwargs)

    resolved = click.option("-f", "--filename", "filename", metavar="FILE", multiple=True,
                            type=click.Path(dir_okay=False), help=_HELP)(resolved)
    return click.argument("names", nargs=-1)(resolved)
