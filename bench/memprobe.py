"""Peak tensor memory of a training process: ``python -m bench.memprobe MODULE [ARG...]``.

Runs ``python -m MODULE ARG...`` in this process under torch's profiler with
``profile_memory=True`` and adds up its CPU allocator events (allocations
positive, frees negative) in time order: the peak of that sum is the most
tensor memory the process held at once: parameters, gradients, optimizer
state, activations, communication buffers and the data set. Interpreter,
library and allocator overheads are left out, unlike RSS (which torch's own
~300 MB of code and caches would swamp). Prints one JSON line:
``{"event": "memory", "rank": R, "peak_bytes": N}``.
Profiling slows the run: use it for memory only, never for throughput.
"""

from __future__ import annotations

import json
import os
import runpy
import sys


def peak_bytes(events) -> int:
    live = peak = 0
    for e in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        if str(e.device_type()).endswith("CPU"):
            live += e.nbytes()
            peak = max(peak, live)
    return peak


def main() -> int:
    from torch.profiler import ProfilerActivity, profile

    if len(sys.argv) < 2:
        sys.exit("usage: python -m bench.memprobe MODULE [ARG...]")
    module, args = sys.argv[1], sys.argv[2:]
    sys.argv = [module, *args]
    code = 0
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    peak = peak_bytes(prof.profiler.kineto_results.events())
    print(json.dumps({"event": "memory", "rank": int(os.environ.get("RANK", "0")),
                      "peak_bytes": peak}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
