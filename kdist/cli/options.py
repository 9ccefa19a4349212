"""CLI options shared by several verbs, declared once."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import click

from kdist.api.choices import BACKEND_NAMES
from kdist.shared.args import MAX_SECONDS, seconds_problem
from kdist.shared.target import ClusterOptions

__all__ = ["MAX_SECONDS", "ClusterOptions", "Command", "GlobalOption", "Seconds",
           "backend_option", "cluster_options", "global_options", "job_file_argument",
           "output_option", "workdir_option"]


class Seconds(click.ParamType):
    """A positive, finite number of seconds, at most a week (nan, inf and 1e300 are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        problem = seconds_problem(value)
        if problem:
            self.fail(problem, param, ctx)
        return float(value)


class GlobalOption(click.Option):
    """One of kubectl's global flags: listed apart in every verb's --help."""


#: kubectl's global flags: (declarations, help, the variable the group reads).
_GLOBALS: list[tuple[tuple[str, ...], dict[str, Any], str | None]] = [
    (("--kubeconfig",), {"metavar": "PATH",
                         "help": "Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)."},
     "KUBECONFIG"),
    (("--context",), {"metavar": "NAME", "help": "Kubeconfig context to use."}, None),
    (("-n", "--namespace"), {"metavar": "NS", "help": "Namespace (default: the job's "
                                                       "metadata.namespace, else the context's)."},
     None),
    (("--request-timeout",), {"type": Seconds(), "metavar": "SECONDS",
                              "help": "How long one API request may take before the server "
                                      "counts as dead (default 15; $KDIST_REQUEST_TIMEOUT)."},
     "KDIST_REQUEST_TIMEOUT"),
]
_NAMES = ("kubeconfig", "context", "namespace", "request_timeout")


def global_options(f):
    """--kubeconfig, --context, -n/--namespace, --request-timeout, as kubectl spells them
    (the group's: before the verb, with their environment variables)."""
    for decls, kwargs, envvar in reversed(_GLOBALS):
        f = click.option(*decls, cls=GlobalOption, envvar=envvar, **kwargs)(f)
    return f


def cluster_options(f):
    """The global flags after the verb too, as kubectl takes them (`kdist status x -n a`);
    the command gets them merged with the group's as its first argument, a ClusterOptions.

    Given before and after the verb, the one after wins: the last one given, as with
    kubectl. No environment variable here: the group read those, and a variable must not
    outrank a flag given before the verb.
    """

    @functools.wraps(f)
    def merged(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _NAMES}
        ctx = click.get_current_context()
        base = ctx.find_object(ClusterOptions) or ClusterOptions()
        later = {name: value for name, value in given.items() if value is not None}
        return f(dataclasses.replace(base, **later), *args, **kwargs)

    for decls, kwargs, _ in reversed(_GLOBALS):
        merged = click.option(*decls, cls=GlobalOption, **kwargs)(merged)
    return merged


class Command(click.Command):
    """A verb whose --help lists the global flags apart, then ends with Examples.

    `examples`: command lines (a line starting with "#" says what the next one does).
    `cluster`: whether the verb uses the global flags (else --help says it ignores them).
    """

    def __init__(self, *args: Any, examples: Sequence[str] = (), cluster: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.examples = list(examples)
        self.cluster = cluster

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        own: list[tuple[str, str]] = []
        shared: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            # Arguments are in the usage line (click 8.2 would list them as options too).
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                (shared if isinstance(param, GlobalOption) else own).append(record)
        if own:
            with formatter.section("Options"):
                formatter.write_dl(own)
        if shared:
            title = ("Global options (before or after the verb; the one after wins)"
                     if self.cluster else "Global options (accepted as kubectl does; this "
                                          "verb needs no cluster and ignores them)")
            with formatter.section(title):
                formatter.write_dl(shared)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        if self.examples:
            with formatter.section("Examples"):
                for line in self.examples:  # as written: command lines are not rewrapped
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


def job_file_argument(f):
    return click.argument("file", type=click.Path(dir_okay=False, path_type=str))(f)


backend_option = click.option(
    "--backend",
    type=click.Choice(list(BACKEND_NAMES)),
    help="Override spec.backend.",
)

output_option = click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
    help="Output format.",
)

workdir_option = click.option(
    "--workdir", metavar="DIR",
    help="Ship this directory with the job (relative to the current directory; overrides "
         "spec.workdir): unpacked in /workspace, the workers' directory and first "
         "PYTHONPATH entry.",
)
