"""Render N distinct job specs in one process: ``python -m bench.render_many [N]``.

Each spec is YAML text (a different name, node count, backend and arguments
each time, so nothing is cached between them) taken through what `kdist
render` does: parse + validate (`kdist.spec.parse_job`), render
(`kdist.rendering.render`, which parses its own output back and checks it)
and dump (`to_yaml`). Prints ``{"event": "render", "specs": N, "seconds": S,
"torch_imported": false}``; the first spec is rendered before the clock
starts (template loading is a one-off).
"""

from __future__ import annotations

import json
import sys
import time

TEMPLATE = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata:
  name: bench-{i}
  labels: {{team: bench}}
spec:
  backend: {backend}
  image: kdist-train:dev-cpu
  nodes: {nodes}
  procsPerNode: 1
  workload:
    module: kdist.workloads.ddp
    args: ["--max-steps", "{steps}", "--batch-size", "64"]
  distributed: {{backend: gloo, port: 29500}}
  resources: {{cpu: "1", memory: 2Gi, shm: 256Mi}}
  env: {{RUN: "r{i}"}}
  checkpoint: {{path: /checkpoints, volume: {{emptyDir: {{}}}}}}
"""


def spec_text(i: int) -> str:
    return TEMPLATE.format(i=i, nodes=1 + i % 8, steps=10 + i,
                           backend="pytorchjob" if i % 4 == 3 else "indexed-job")


def main() -> int:
    from kdist.rendering import render, to_yaml
    from kdist.spec import parse_job

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    texts = [spec_text(i) for i in range(n + 1)]
    to_yaml(render(parse_job(texts[0])))
    started = time.perf_counter()
    size = 0
    for text in texts[1:]:
        size += len(to_yaml(render(parse_job(text))))
    seconds = time.perf_counter() - started
    print(json.dumps({"event": "render", "specs": n, "seconds": seconds, "bytes": size,
                      "torch_imported": "torch" in sys.modules}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
