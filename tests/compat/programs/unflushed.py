"""Prints a line a second and never flushes, as most training scripts do."""

import os
import time

rank = os.environ.get("RANK", "0")
for tick in range(4):
    print(f"rank {rank} tick {tick}")
    time.sleep(1.0)
