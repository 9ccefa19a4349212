"""The `kdist` command group, error mapping, and the verbs that need no cluster.

Exit codes (docs/DESIGN.md): 0 success, 1 the job failed, 2 bad input, 3 cluster or
API error; 130 on Ctrl-C. Every KdistError becomes its one-line message here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kdist.cli.options import (
    ClusterOptions,
    Command,
    backend_option,
    cluster_options,
    global_options,
    job_file_argument,
    output_option,
    workdir_option,
)
from kdist.cli.say import say
from kdist.shared.errors import KdistError, UsageError

if TYPE_CHECKING:  # the spec model imports pydantic: not for `kdist --help`
    from kdist.api.files import Packed, TrainingJob

STARTER = Path(__file__).with_name("starter.yaml")


#: The verbs whose modules are imported when one of them runs (or --help lists them), so
#: `kdist render` and `validate` do not load the others: name -> (module, command).
LAZY_VERBS = {
    **{verb: ("kdist.cli.cluster_verbs", verb) for verb in ("submit", "status", "wait",
                                                             "delete")},
    "list": ("kdist.cli.listing", "list_"),
    "logs": ("kdist.cli.logs", "logs"),
    "check": ("kdist.cli.check", "check"),
    "explain": ("kdist.cli.explain", "explain"),  # needs no cluster; its own module
}


class _Group(click.Group):
    """Turns every KdistError into its one-line message(s) and exit code; loads the
    cluster verbs on first use (LAZY_VERBS)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY_VERBS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_VERBS:
            import importlib

            module, name = LAZY_VERBS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        from kdist.shared.spelling import flags

        try:
            with flags():  # messages name --kubeconfig, not Python's kubeconfig=
                return super().invoke(ctx)
        except KdistError as e:
            # Escaped as the error was made (KdistError); say() again, whatever an
            # error's own __init__ did: nothing in it is obeyed by the terminal.
            for line in str(e).splitlines() or [type(e).__name__]:
                say(f"error: {line}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@global_options
@click.version_option(package_name="kdist")
@click.pass_context
def main(ctx: click.Context, kubeconfig: str | None, context: str | None,
         namespace: str | None, request_timeout: float | None) -> None:
    """Distributed PyTorch training on Kubernetes from one job.yaml.

    The global options (--kubeconfig, --context, -n, --request-timeout) go before
    or after the verb, as with kubectl; given in both places, the one after the
    verb wins. `kdist VERB --help` lists them with the verb's own, and examples.

    \b
    Shell completion (bash; zsh/fish likewise):
      eval "$(_KDIST_COMPLETE=bash_source kdist)"
    """
    ctx.obj = ClusterOptions(kubeconfig=kubeconfig, context=context, namespace=namespace,
                             request_timeout=request_timeout)


def _warn(line: str) -> None:
    say(f"warning: {line}", err=True)


def load(file: str, namespace: str | None = None, backend: str | None = None, *,
         local: bool = False) -> TrainingJob:
    """The validated job, with -n and --backend applied (refused when they contradict it);
    what is valid but probably not meant is warned about (not for a local run)."""
    from kdist import api

    return api.load_file(file, namespace, backend, local=local, warn=_warn)


def pack_code(job: TrainingJob, workdir: str | None) -> Packed | None:
    """The job's code (--workdir, else spec.workdir), packed once for this command.

    What was skipped (links leaving the tree, special files) is said on stderr;
    what cannot be shipped raises WorkdirError (exit 2) before anything is sent.
    """
    from kdist import api

    return api.pack_code(job, workdir, warn=_warn)


def say_pod_security(file: str, objects: list[dict[str, Any]]) -> None:
    """One stderr line when the pods need more than Pod Security "restricted"; loud for
    "privileged", which most namespaces refuse."""
    from kdist import api

    note = api.security_note(file, *api.pod_security(objects))
    if note:
        click.echo(note, err=True)


@main.command(cls=Command, cluster=False, examples=[
    "kdist validate job.yaml",
    "kdist validate jobs/*.yaml      # every problem of every file, exit 2 if any"])
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@cluster_options
def validate(opts: ClusterOptions, files: tuple[str, ...]) -> None:
    """Check job files ('-': standard input); print every problem with its field path."""
    from kdist import api
    from kdist.shared.errors import SpecError

    problems: list[str] = []
    for file in files:
        try:
            checked = api.validate_file(file, warn=_warn)
        except SpecError as e:
            problems.extend(e.problems)
            continue
        if checked.security_note:
            click.echo(checked.security_note, err=True)
        click.echo(checked.summary)
    if problems:
        raise SpecError(problems)


@main.command(cls=Command, examples=[
    "kdist render job.yaml",
    "kdist render job.yaml -n team-a -o json",
    "kdist render - < job.yaml              # '-': the job from standard input",
    "kdist render job.yaml --backend pytorchjob | kubectl apply --dry-run=server -f -"])
@job_file_argument
@output_option
@backend_option
@workdir_option
@cluster_options
def render(opts: ClusterOptions, file: str, output: str, backend: str | None,
           workdir: str | None) -> None:
    """Print the Kubernetes objects for FILE ('-': standard input; no cluster needed).

    With a workdir, its ConfigMaps come after the job, without owner references
    (`kdist delete` finds them by label).
    """
    from kdist import api

    job = load(file, opts.namespace, backend)
    objects = api.render_objects(job, pack_code(job, workdir))
    say_pod_security(file, objects)
    click.echo(api.to_yaml(objects) if output == "yaml" else api.to_json(objects), nl=False)


@main.command(cls=Command, cluster=False, examples=[
    "kdist init                      # writes ./job.yaml",
    "kdist init train.yaml --force",
    "kdist init - | less"])
@click.argument("file", default="job.yaml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@cluster_options
def init(opts: ClusterOptions, file: str, force: bool) -> None:
    """Write a commented starter job file (default ./job.yaml); '-' prints it.

    Its first line points editors (yaml-language-server) at ./job.schema.json beside
    it: `kdist schema > job.schema.json` writes that file.
    """
    from kdist.api.explain import SCHEMA_MODELINE

    text = SCHEMA_MODELINE + STARTER.read_text()
    if file == "-":
        click.echo(text, nl=False)
        return
    _write_new(Path(file), text, force)
    click.echo(f"wrote {file}: edit spec.image, then `kdist run --local {file}` or "
               f"`kdist submit {file}` (editors check it once `kdist schema > "
               f"{Path(file).parent / 'job.schema.json'}` is there)")


@main.command(cls=Command, cluster=False, examples=[
    "kdist schema > job.schema.json     # beside job.yaml, where its first line points",
    "kdist schema | jq '.definitions.Resources'"])
@cluster_options
def schema(opts: ClusterOptions) -> None:
    """Print job.yaml's JSON Schema (draft-07), the rules `kdist validate` applies.

    Editors that speak the YAML language server (VS Code's YAML extension, yamlls,
    JetBrains) complete and check a job file whose first line is
    `# yaml-language-server: $schema=./job.schema.json` (`kdist init` writes it).
    """
    from kdist.api.explain import schema_text

    click.echo(schema_text(), nl=False)


def _write_new(path: Path, text: str, force: bool) -> None:
    """Write `path` whole (temp file + rename), never through a symlink."""
    import contextlib
    import os
    import tempfile

    if path.is_symlink():
        raise UsageError(f"{path}: is a symbolic link; kdist init will not write through it")
    if path.exists() and (not force or not path.is_file()):
        what = "already exists (use --force to overwrite)" if path.is_file() else \
            "exists and is not a regular file"
        raise UsageError(f"{path}: {what}")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{path}: directory {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # nothing half-written left behind
        raise UsageError(f"{path}: cannot write: {e.strerror or e}") from None


@main.command(cls=Command, cluster=False, examples=[
    "kdist run --local               # the built-in 2-rank DDP starter job",
    "kdist run --local job.yaml",
    "kdist run --local job.yaml --fresh   # not from the last run's checkpoints",
    "kdist run --local job.yaml --raw | tee run.log"])
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--local", "local", is_flag=True, help="Run on this machine as local processes.")
@click.option("--raw", is_flag=True,
              help="Only the prefixed lines, no live table (what a pipe or a file gets).")
@click.option("--fresh", is_flag=True,
              help="Start over: remove the job's local checkpoints (.kdist/NAME/checkpoints) "
                   "first, instead of resuming from them.")
@workdir_option
@cluster_options
def run(opts: ClusterOptions, file: str | None, local: bool, raw: bool, fresh: bool,
        workdir: str | None) -> None:
    """Run FILE (default: the built-in starter job) as local process groups.

    Same container command and env contract as the pods get, master 127.0.0.1;
    every line is prefixed with its rank. On a terminal, the live per-rank table of
    `kdist submit` stays below the lines (--raw: the lines alone, as when piped).
    The last line says how it ended, how long it took, rank 0's steps and loss
    (stdout when it succeeded, stderr otherwise), the nodes' exit code when it
    failed, and the checkpoint it resumed from when an earlier run left one.

    \b
    Exit codes: 0 the job succeeded; 1 it failed, whatever code its workers exited
    with (the last line says it); 2 kdist refused the run (bad spec or flags, no
    torch) before anything started; 130 Ctrl-C, 143 SIGTERM ("interrupted").

    Ctrl-C and SIGTERM both stop every node as a deleted pod is stopped: the workers
    get SIGTERM and kdist's workloads save at one step (zero loss; your script may do
    the same, kdist.preemption_requested()). A repeated SIGTERM waits for that save; a
    second Ctrl-C cuts it short. When the spec's port is taken here (another local
    run), a free one is used and said. A local run's state is .kdist/NAME beside FILE
    (the current directory for the starter job): checkpoints, when spec.checkpoint is
    set (a later run resumes from them, as a resubmitted job would; --fresh starts
    over), and with a workdir (--workdir, spec.workdir) .kdist/NAME/workspace, where
    the nodes run, a fresh copy unpacked from the archive the pods would get.
    """
    if not local:
        raise UsageError("kdist run needs --local (use `kdist submit FILE` for a cluster)")
    import functools

    from kdist import api
    from kdist.cli.progress import make_local_display
    from kdist.cli.running import RunSummary, Sniffing, Tee, exit_status

    job = load(file or str(STARTER), local=True)
    code = pack_code(job, workdir)
    summary, stopped = RunSummary(job.metadata.name), list[int]()
    display = make_local_display(raw)
    # State (.kdist/NAME) beside FILE; the built-in starter's in the current directory.
    local_run = functools.partial(api.run_local, job, code=code, job_file=file, fresh=fresh,
                                  on_interrupt=stopped.append, on_ledger=summary.kept,
                                  on_checkpoints=summary.checkpoints_in)
    if display is None:
        exit_code = local_run(stdout=Tee(summary))  # type: ignore[arg-type]
    else:
        exit_code = local_run(observer=Sniffing(display, summary))
    summary.say(exit_code, stopped[0] if stopped else None)
    sys.exit(exit_status(exit_code, stopped[0] if stopped else None))

