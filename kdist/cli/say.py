"""Every line the CLI prints of its own: what the cluster said in it is shown, never obeyed.

Names, reasons, messages and warnings from the cluster pass through
`kdist.shared.terminal.escape` (control characters in caret notation, a newline
too: one line stays one line); escaping twice changes nothing, so words escaped
where they were read are safe here too. YAML and JSON output and pod log lines
do not come through here (`kdist.shared.terminal.log_for`).
"""

from __future__ import annotations

import click

from kdist.shared.terminal import escape


def say(line: str, err: bool = False) -> None:
    """`line` on stdout (or stderr), escaped."""
    click.echo(escape(line), err=err)
