"""The `kdist` command line: a thin shell over `kdist.api` (parse, call, print).

- ``main``: the group, error -> exit code mapping, and the verbs that need no
  cluster (validate, render, init, run --local).
- ``cluster_verbs``: submit, status, logs, list, delete.
- ``options``: flags shared by several verbs; ``progress``: what is printed.
"""

from kdist.cli.cluster_verbs import COMMANDS
from kdist.cli.main import main

for _command in COMMANDS:
    main.add_command(_command)

__all__ = ["main"]
