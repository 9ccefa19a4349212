"""Writes to stdout and stderr in turn, as a script mixing print() and logging/warnings does."""

import os
import sys

rank = os.environ.get("RANK", "0")
for i in range(10):
    stream = sys.stdout if i % 2 == 0 else sys.stderr
    print(f"rank {rank} line {i}", file=stream)
