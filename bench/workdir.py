"""What shipping a workdir costs `kdist submit`: a ~5 MiB directory against none.

Interleaved per round, in one fresh namespace, the same job file:

- with: ``kdist -n NS submit job.yaml --no-wait --workdir DIR``, a 5 MiB tree
  (4 MiB of generated Python-like source in 10 KiB files, 1 MiB of random
  bytes): pack, render, create the job and its ConfigMaps;
- without: the same command without ``--workdir``.

Each is timed from process start to exit (``--no-wait`` exits once everything
is created). The jobs' pods are never scheduled (a node selector no node has),
so no training competes with the submissions for the two cores.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import kube
from bench.harness import (
    PYTHON,
    Ctx,
    Measured,
    Spec,
    clean_env,
    interleave,
    median,
    ratios,
    run_lines,
)

SOURCE_BYTES = 4 * 2**20
BINARY_BYTES = 2**20
TREE = "5 MiB workdir (4 MiB generated source in 10 KiB files, 1 MiB random bytes)"
WITH = f"kdist -n NS submit job.yaml --no-wait --workdir DIR ({TREE})"
WITHOUT = "kdist -n NS submit job.yaml --no-wait (the same job, no workdir)"

FIGURES = [
    Spec("workdir.submit_with_vs_without", "kdist submit to created: 5 MiB workdir / none", "x",
         WITH, WITHOUT),
    Spec("workdir.submit_added_s", "kdist submit: seconds a 5 MiB workdir adds", "s", WITH,
         WITHOUT, "<= 1.0", 1.0, higher_is_better=False),
    Spec("workdir.submit_with_s", "kdist submit --workdir (5 MiB) to created, wall", "s", WITH,
         "(absolute)"),
    Spec("workdir.submit_without_s", "kdist submit without a workdir to created, wall", "s",
         WITHOUT, "(absolute)"),
    Spec("workdir.pack_s", "packing the 5 MiB workdir, in process", "s",
         "kdist.rendering.workdir.pack (walk, tar, gzip, sha256)", "(absolute)"),
]


def make_tree(root: Path) -> None:
    """A reproducible tree of source-like text (compresses ~4x) and incompressible data."""
    rng = random.Random(0)
    words = [f"ident_{i}" for i in range(2000)] + ["def", "return", "import", "self", "(",
                                                   ")", ":", "=", "\n    "]
    written, i = 0, 0
    while written < SOURCE_BYTES:
        text = " ".join(rng.choice(words) for _ in range(1400)).encode()[:10240]
        path = root / f"pkg{i // 20}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
        written, i = written + len(text), i + 1
    for j in range(4):
        (root / f"weights{j}.bin").write_bytes(rng.randbytes(BINARY_BYTES // 4))


def job_file(name: str, ns: str) -> str:
    """A small job whose pods wait unscheduled: only the submission is measured."""
    return kube.job_yaml(name, ns, nodes=2, args=["--max-steps", "1"]).replace(
        "  ttlSecondsAfterFinished: 900\n",
        "  ttlSecondsAfterFinished: 900\n"
        "  scheduling: {nodeSelector: {kdist.dev/bench: never-scheduled}}\n")


def _kdist_cli() -> list[str]:
    script = Path(PYTHON).parent / "kdist"
    return [str(script)] if script.is_file() else [PYTHON, "-m", "kdist"]


def run(ctx: Ctx) -> dict[str, Measured]:
    from kdist.rendering.code_configmaps import to_configmaps
    from kdist.rendering.workdir import pack

    api = kube.connect()
    kc = str(kube.kubeconfig())
    counter = {"with": 0, "without": 0}
    with TemporaryDirectory() as tmp, kube.namespace(api, "kdist-bench-workdir") as ns:
        ctx.say(f"    namespace {ns}")
        tree = Path(tmp) / "workdir"
        make_tree(tree)
        packs = []
        for _ in range(3):
            started = time.process_time()
            packed = pack(tree)
            packs.append(time.process_time() - started)
        parts = len(to_configmaps("x", ns, packed, {}))
        ctx.say(f"    tree: {packed.size / 2**20:.1f} MiB in {packed.files} files, packed "
                f"{len(packed.archive) / 2**20:.2f} MiB, {parts} ConfigMaps")

        def submit(variant: str) -> float:
            counter[variant] += 1
            name = f"wd-{variant}-{counter[variant]}"
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(job_file(name, ns))
            extra = ["--workdir", str(tree)] if variant == "with" else []
            _, wall = run_lines([*_kdist_cli(), "--kubeconfig", kc, "-n", ns, "submit",
                                 str(path), "--no-wait", *extra], env=clean_env(), timeout=120,
                                cwd=Path(tmp))
            return wall

        submit("without")  # warm the page cache and .pyc files once, unmeasured
        v = interleave({"with": lambda: submit("with"), "without": lambda: submit("without")},
                       ctx.rounds, ctx.say)
    r = ratios(v["with"], v["without"])
    added = [a - b for a, b in zip(v["with"], v["without"], strict=True)]
    note = (f"{ctx.rounds} interleaved pairs; archive {len(packed.archive):,} bytes in {parts} "
            f"ConfigMaps ({os.cpu_count()} cores)")
    return {
        "workdir.submit_with_vs_without": Measured(median(r), r, note),
        "workdir.submit_added_s": Measured(median(added), added, note),
        "workdir.submit_with_s": Measured(median(v["with"]), v["with"]),
        "workdir.submit_without_s": Measured(median(v["without"]), v["without"]),
        "workdir.pack_s": Measured(median(packs), packs, "CPU time, 3 runs"),
    }
