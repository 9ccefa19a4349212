"""A plain-torch loop in which global rank 1 stops answering once, for hang drills.

Every rank all-reduces a tensor each step and prints a line. At --hang-at, the first time
(no --marker file yet), rank 1 leaves the marker and sleeps forever; rank 0 then waits
inside all_reduce for a peer that is alive but silent. Nothing fails and nothing prints:
only a progress watchdog or a collective timeout can end it. init_process_group gets no
timeout, as in most scripts (torch's default is 30 minutes).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--hang-at", type=int, default=5)
parser.add_argument("--marker", default="hang.marker")
parser.add_argument("--step-delay", type=float, default=0.2)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(args.steps):
    if rank == 1 and step == args.hang_at and not os.path.exists(args.marker):
        open(args.marker, "w").close()
        print(f"rank 1 hangs at step {step}")
        while True:
            time.sleep(3600)
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {rank} step {step} world {int(total.item())}")
    time.sleep(args.step_delay)
dist.destroy_process_group()
