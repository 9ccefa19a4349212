"""Every error kdist raises on purpose, and the exit code each one means.

The CLI maps them to messages and exit codes in one place (``kdist.cli.main``);
the Python API raises them as they are. Exit codes (docs/DESIGN.md, "Exit
codes"): 1 the job failed, 2 bad input, 3 cluster or API error.
"""

from __future__ import annotations

from kdist.shared.terminal import escape, escape_lines


class KdistError(Exception):
    """Base of kdist's expected errors: printed as one line, never a traceback.

    The message's control characters are escaped (``kdist.shared.terminal``) as the
    error is made, wherever its words came from (an API server's answer, a pod's
    termination message): a traceback in a user's terminal shows them too. A
    message of several lines by design keeps its newlines.
    """

    exit_code = 3

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (self._escaped(args[0]), *args[1:])
        super().__init__(*args)

    @staticmethod
    def _escaped(message: str) -> str:
        return escape_lines(message)


class SpecError(KdistError):
    """The user's input is wrong. Carries every problem found, each one line."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        # One line each, whatever the parser's message looked like, nothing a terminal obeys.
        self.problems = [escape(" ".join(str(p).split())) for p in problems]
        super().__init__("\n".join(self.problems))


class WorkdirError(SpecError):
    """The workdir cannot be shipped as it is (exit code 2); one line per problem."""


class UsageError(KdistError):
    """A flag, an argument or the kubeconfig is wrong (not the spec itself)."""

    exit_code = 2


class JobNotFound(KdistError):
    """The named job is not in the namespace: the user's input names nothing."""

    exit_code = 2


class ClusterError(KdistError):
    """The cluster or its API refused or failed something: one line, whatever the server
    put in it (a newline in its message is shown as ``^J``)."""

    exit_code = 3

    @staticmethod
    def _escaped(message: str) -> str:
        return escape(message)


class OperatorMissing(ClusterError):
    """The cluster does not serve a backend's training kind (its operator is not installed)."""


class RenderError(KdistError):
    """The rendered text did not parse back to what was meant (a kdist bug)."""

    exit_code = 3


class LaunchError(KdistError):
    """The environment or the master is not usable; the launcher exits non-zero."""

    exit_code = 2


class JobFailed(KdistError):
    """The training job ran and failed."""

    exit_code = 1


class TimedOut(JobFailed):
    """A wait's timeout passed before the job finished (the job keeps running)."""
