"""The `kdist` command line: a thin shell over `kdist.api` (parse, call, print).

- ``main``: the group, error -> exit code mapping, and the verbs that need no
  cluster (validate, render, init, run --local).
- ``cluster_verbs``: submit, status, wait, delete; ``listing``: list; ``logs``: logs;
  ``check``: check.
- ``options``: flags shared by several verbs; ``progress``: what is printed.
- ``startup``: what the command sets up before pydantic is imported.
"""

from kdist.cli.startup import skip_pydantic_plugins

skip_pydantic_plugins()  # before the spec models are built (kdist.cli.startup says why)

# The cluster verbs' modules load when one runs (kdist.cli.main.LAZY_VERBS).
from kdist.cli.main import main  # noqa: E402

__all__ = ["main"]
