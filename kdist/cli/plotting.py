"""`kdist status NAME --plot FILE`: the step series drawn (kdist.api.drawing), one line said."""

from __future__ import annotations

import click

from kdist.api import Client


def check(file: str) -> None:
    from kdist.api.drawing import check_plot

    check_plot(file, "--plot")


def draw(client: Client, name: str, file: str) -> None:
    from kdist.api.drawing import plot_steps

    series = client.metrics(name)
    points = plot_steps(series, file, title=f"job {name}", what="--plot")
    click.echo(f"wrote {file}: {points} step(s) of {len(series)} rank(s)", err=True)
