"""CLI options shared by several verbs, declared once."""

from __future__ import annotations

from typing import Any

import click

from kdist.api.types import ClusterOptions
from kdist.shared.args import MAX_SECONDS, seconds_problem

__all__ = ["MAX_SECONDS", "ClusterOptions", "Seconds", "backend_option", "global_options",
           "job_file_argument", "output_option", "workdir_option"]


class Seconds(click.ParamType):
    """A positive, finite number of seconds, at most a week (nan, inf and 1e300 are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        problem = seconds_problem(value)
        if problem:
            self.fail(problem, param, ctx)
        return float(value)


def global_options(f):
    """--kubeconfig, --context, -n/--namespace, --request-timeout, as kubectl spells them."""
    f = click.option(
        "--request-timeout", type=Seconds(), metavar="SECONDS", envvar="KDIST_REQUEST_TIMEOUT",
        help="How long one API request may take before the server counts as dead "
             "(default 15; $KDIST_REQUEST_TIMEOUT).",
    )(f)
    f = click.option(
        "-n", "--namespace", metavar="NS",
        help="Namespace (default: the job's metadata.namespace, else the context's).",
    )(f)
    f = click.option("--context", metavar="NAME", help="Kubeconfig context to use.")(f)
    f = click.option(
        "--kubeconfig", metavar="PATH", envvar="KUBECONFIG",
        help="Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).",
    )(f)
    return f


def job_file_argument(f):
    return click.argument("file", type=click.Path(dir_okay=False, path_type=str))(f)


backend_option = click.option(
    "--backend",
    type=click.Choice(["indexed-job", "pytorchjob"]),
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
