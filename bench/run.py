"""Run the benchmarks: ``python -m bench.run [--only NAME[,NAME]] [--quick] [--list]``.

Each benchmark prints its progress on stderr; the figures go to
bench/results.json (merged: a run of some benchmarks keeps the others'
last figures) and the table between the markers in bench/README.md is
regenerated from that file. A benchmark that cannot run here (no cluster,
no kubectl, no GPU) records why, in one line, instead of figures. A
benchmark that fails (a command exits non-zero, its output is not what was
expected, a bug) keeps its last figures; the others still run, and the run
then exits 1, naming each failed benchmark, its figures and the error's last
lines.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from bench.harness import BENCH, BenchError, Ctx, Measured, Skip, machine_info, record, tail

# name -> module; the order is the order they run in (cheap first).
BENCHMARKS = {
    "cli": "bench.cli",
    "ddp": "bench.ddp",
    "pipeline": "bench.pipeline",
    "fsdp": "bench.fsdp",
    "cluster": "bench.cluster",
    "restart": "bench.restart",
    "nodeloss": "bench.nodeloss",
    "warm": "bench.warm",
    "elastic": "bench.elastic",
    "workdir": "bench.workdir",
    "runtime": "bench.runtime",
    "watch": "bench.watch",
    "gpu": "bench.gpu",
    "scale": "bench.scale",
    "scalekube": "bench.scalekube",
}
RESULTS = BENCH / "results.json"
README = BENCH / "README.md"
BEGIN, END = "<!-- bench:table:begin -->", "<!-- bench:table:end -->"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help=f"run only these benchmarks (of {', '.join(BENCHMARKS)})")
    p.add_argument("--quick", action="store_true",
                   help="fewer steps and smaller sizes (still 3 interleaved rounds)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and their figures")
    p.add_argument("--table", action="store_true",
                   help="only rewrite README.md's table from results.json (run nothing)")
    args = p.parse_args(argv)
    names = list(BENCHMARKS)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            p.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    if args.rounds < 3:
        p.error("--rounds must be >= 3 (a median needs them)")
    args.names = names
    return args


@dataclass
class Outcome:
    """One benchmark's run: its results.json entries, and why it failed ("" if it did not).

    A failed benchmark has no entries: results.json keeps its last figures."""

    figures: dict[str, dict[str, Any]]
    failed: str = ""


def run_one(name: str, ctx: Ctx) -> Outcome:
    """Run one benchmark: its figures, or one `skipped: why` for each, or its failure."""
    module = importlib.import_module(BENCHMARKS[name])
    started = time.monotonic()
    ctx.say(f"== {name}")
    machine = machine_info()
    try:
        measured = module.run(ctx)
    except Skip as e:  # this machine cannot run it: not a failure
        ctx.say(f"   skipped: {e}")
        measured = {}
        reason = f"skipped: {e}"
    except BenchError as e:
        ctx.say(f"   FAILED: {e}")
        return Outcome({}, str(e))
    except Exception:  # a bug in the benchmark: fail, but let the other benchmarks run
        ctx.say(traceback.format_exc())
        return Outcome({}, f"benchmark error:\n{tail(traceback.format_exc())}")
    else:
        reason = "not measured"
    machine = {**machine, "load1_end": machine_info()["load1"],
               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "seconds": round(time.monotonic() - started, 1)}
    out = {}
    for spec in module.FIGURES:
        m = measured.get(spec.name) or Measured(None, skipped=reason)
        out[spec.name] = record(spec, m, machine=machine)
        shown = "-" if m.value is None else f"{m.value:,.4g} {spec.unit}"
        ctx.say(f"   {spec.name}: {shown} {m.skipped}".rstrip())
    ctx.say(f"   ({out[module.FIGURES[0].name]['seconds']} s)")
    return Outcome(out)


def failures_report(failed: dict[str, str]) -> str:
    """The run's last words when benchmarks failed: each one, its figures, the error's tail."""
    lines = [f"== FAILED: {len(failed)} benchmark(s): {', '.join(failed)} "
             "(their figures in results.json are the last ones measured)"]
    for name, why in failed.items():
        figures = ", ".join(spec.name for spec in importlib.import_module(BENCHMARKS[name]).FIGURES)
        lines += [f"-- {name} ({figures}):", why]  # already bounded: tails of the output
    return "\n".join(lines)


def load_results() -> dict[str, Any]:
    try:
        return json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        return {}


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if abs(value) >= 100 or float(value).is_integer():
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}" if unit in ("samples/s", "specs/s", "s", "MiB") else \
        f"{text}{'x' if unit == 'x' else ''}"


def table(results: dict[str, Any]) -> str:
    """The README table: one row per figure, in benchmark order."""
    rows = ["| figure | value | goal | met | samples: min – max (n) | measured on |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, fig in results.items():
        met = {True: "yes", False: "**no**", None: ""}[fig.get("met")]
        if fig.get("value") is None:
            value, met = fig.get("skipped") or "–", ""
        else:
            value = _fmt(fig["value"], fig["unit"])
        when = f"{fig.get('cores', '?')} cores, load {fig.get('load1', '?')}"
        samples = fig.get("samples") or []
        spread = (f"{_fmt(min(samples), '')} – {_fmt(max(samples), '')} ({len(samples)})"
                  if len(samples) > 1 else "")
        rows.append(f"| `{name}`: {fig['title']} | {value} | {fig.get('goal') or ''} | {met} "
                    f"| {spread} | {when} |")
    return "\n".join(rows)


def write_readme(results: dict[str, Any]) -> None:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{README}: the table markers {BEGIN} / {END} are missing")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{table(results)}\n{END}{tail}")


def ordered(results: dict[str, Any]) -> dict[str, Any]:
    """Figures in benchmark, then declaration order; unknown (stale) names dropped."""
    out = {}
    for module in BENCHMARKS.values():
        for spec in importlib.import_module(module).FIGURES:
            if spec.name in results:
                out[spec.name] = results[spec.name]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, module in BENCHMARKS.items():
            print(name)
            for spec in importlib.import_module(module).FIGURES:
                print(f"  {spec.name}: {spec.title} [{spec.unit}] {spec.goal}")
        return 0
    if args.table:
        write_readme(ordered(load_results()))
        return 0
    ctx = Ctx(quick=args.quick, rounds=args.rounds)
    started = time.monotonic()
    results = load_results()
    failed: dict[str, str] = {}
    for name in args.names:
        outcome = run_one(name, ctx)
        if outcome.failed:
            failed[name] = outcome.failed
        results.update(outcome.figures)
        results = ordered(results)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")  # after each: a crash keeps them
        write_readme(results)
    ctx.say(f"== done in {time.monotonic() - started:.0f} s: {RESULTS} and the table in {README}")
    if failed:
        ctx.say(failures_report(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
