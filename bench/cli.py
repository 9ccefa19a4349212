"""The CLI's cost: a cold `kdist render` against a bare import of its three libraries.

- `kdist render examples/ddp-cpu.yaml` (the console script; `python -m kdist`
  when it is not on PATH) vs `python -c "import click, jinja2, yaml"`, each a
  fresh process, interleaved; the ratio of wall times. kdist's own floor is
  the second command plus pydantic (the spec model) and the template work.
- whether that render imported torch (`python -X importtime`): it must not.
- kdist's own modules are compiled to .pyc first, as `pip install` does: the bare
  imports load theirs from site-packages' .pyc (`compile_kdist`).
- 1,000 distinct specs parsed, validated, rendered and dumped in one process.
"""

from __future__ import annotations

from pathlib import Path

from bench.harness import (
    PYTHON,
    REPO,
    BenchError,
    Ctx,
    Measured,
    Spec,
    clean_env,
    interleave,
    median,
    parse_records,
    ratios,
    run_cmd,
)

EXAMPLE = "examples/ddp-cpu.yaml"
BARE = [PYTHON, "-c", "import click, jinja2, yaml"]


def _kdist() -> list[str]:
    """The console script next to this interpreter (not a pyenv shim: its bash would be
    counted against kdist); `python -m kdist` when there is none."""
    script = Path(PYTHON).parent / "kdist"
    return [str(script)] if script.is_file() else [PYTHON, "-m", "kdist"]


FIGURES = [
    Spec("cli.render_vs_bare_imports", "cold `kdist render` / bare `import click, jinja2, yaml`",
         "x", f"kdist render {EXAMPLE} (fresh process)",
         'python -c "import click, jinja2, yaml" (fresh process)', "<= 2.0", 2.0,
         higher_is_better=False),
    Spec("cli.render_s", "cold `kdist render`, wall", "s", f"kdist render {EXAMPLE}",
         "(absolute)"),
    Spec("cli.render_imports_torch", "modules named torch* imported by `kdist render`", "modules",
         f"python -X importtime -m kdist render {EXAMPLE}", "(must be 0)", "== 0", 0,
         higher_is_better=False),
    Spec("cli.render_specs_per_s", "specs rendered per second, one process", "specs/s",
         "python -m bench.render_many 1000 (parse + validate + render + YAML dump)",
         "(absolute)"),
]


def compile_kdist() -> None:
    """Write kdist's .pyc files, as `pip install` does for an installed package.

    An editable checkout writes them on its first run, unless PYTHONDONTWRITEBYTECODE
    is set (as on some CI and sandbox machines): then every measured run compiles
    kdist's ~40 modules from source (~25 ms of CPU here) while the libraries it is
    compared with load their .pyc from site-packages.
    """
    env = clean_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # check=False: a module being edited elsewhere in the tree must not stop the bench.
    run_cmd([PYTHON, "-m", "compileall", "-q", str(REPO / "kdist")], env=env, timeout=300,
            check=False)


def _wall(cmd: list[str]) -> float:
    return run_cmd(cmd, env=clean_env(), timeout=60).wall


def _torch_modules() -> int:
    # -X importtime writes its table on stderr (stdout is the rendered YAML).
    err = run_cmd([PYTHON, "-X", "importtime", "-m", "kdist", "render", EXAMPLE],
                  env=clean_env(), timeout=60).err
    names = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines()
             if line.startswith("import time:")}
    if not names:  # else a table read from the wrong stream would count 0 torch modules
        raise BenchError(f"-X importtime printed no table on stderr:\n{err[-2000:]}")
    return sum(1 for n in names if n == "torch" or n.startswith("torch."))


def _render_many(n: int) -> float:
    out = run_cmd([PYTHON, "-m", "bench.render_many", str(n)], env=clean_env(), timeout=300).out
    recs = [r for r in parse_records(out) if r["event"] == "render"]
    if not recs:
        raise BenchError(f"bench.render_many printed no result:\n{out[-2000:]}")
    return recs[0]["specs"] / recs[0]["seconds"]


def run(ctx: Ctx) -> dict[str, Measured]:
    kdist = [*_kdist(), "render", str(REPO / EXAMPLE)]
    compile_kdist()
    _wall(kdist)  # warm the page cache once, unmeasured
    _wall(BARE)
    pairs = 5 if ctx.quick else 7
    v = interleave({"kdist render": lambda: _wall(kdist), "bare imports": lambda: _wall(BARE)},
                   pairs, ctx.say)
    n = 300 if ctx.quick else 1000
    rates = [_render_many(n) for _ in range(3)]
    r = ratios(v["kdist render"], v["bare imports"])
    note = f"{pairs} interleaved pairs; bare imports median {median(v['bare imports']):.3f} s"
    return {
        "cli.render_vs_bare_imports": Measured(median(r), r, note),
        "cli.render_s": Measured(median(v["kdist render"]), v["kdist render"]),
        "cli.render_imports_torch": Measured(float(_torch_modules()), []),
        "cli.render_specs_per_s": Measured(median(rates), rates, f"{n} specs per run, 3 runs"),
    }
