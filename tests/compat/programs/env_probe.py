"""Print the environment this worker sees, as one JSON line, for the env-parity tests.

With --die-once MARKER, global rank 1 SIGKILLs itself (after printing) the first time it
runs, leaving MARKER behind, so that its launcher (torchrun or kdist) restarts the workers.
No process group: the tests compare what the launchers set, nothing else.
"""

import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--die-once", metavar="MARKER")
args = parser.parse_args()
# write_through: stdout is unbuffered (python -u or PYTHONUNBUFFERED)
# One write per line: under torchrun both ranks share one pipe, and print's separate
# write of the newline let two probe lines run together.
sys.stdout.write("ENV " + json.dumps({"env": dict(os.environ),
                                      "unbuffered": sys.stdout.write_through}) + "\n")
sys.stdout.flush()
if args.die_once and os.environ.get("RANK") == "0":
    open(args.die_once + ".rank0-printed", "w").close()
if args.die_once and os.environ.get("RANK") == "1" and not os.path.exists(args.die_once):
    # Rank 0 prints first: under load it may start later, and the launcher stops it when
    # rank 1 dies (the first attempt would then have one probe line, not two).
    deadline = time.monotonic() + 60
    while not os.path.exists(args.die_once + ".rank0-printed") and time.monotonic() < deadline:
        time.sleep(0.05)
    open(args.die_once, "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
