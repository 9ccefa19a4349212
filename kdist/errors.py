"""Every error kdist raises on purpose; the CLI maps them to exit codes."""

from __future__ import annotations


class KdistError(Exception):
    """Base of kdist's expected errors: printed as one line, never a traceback."""

    exit_code = 3


class SpecError(KdistError):
    """The user's input is wrong. Carries every problem found, each one line."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        # One line each, whatever the parser's message looked like.
        self.problems = [" ".join(str(p).split()) for p in problems]
        super().__init__("\n".join(self.problems))


class UsageError(KdistError):
    """A flag or argument is wrong (not the spec itself)."""

    exit_code = 2


class ClusterError(KdistError):
    """The cluster or its API refused or failed something."""

    exit_code = 3


class JobFailed(KdistError):
    """The training job ran and failed."""

    exit_code = 1
