"""A DDP loop in which global rank 1 stops once outside any collective, for hang drills.

Every rank runs forward and backward through DistributedDataParallel each step and prints
a line. At --hang-at, the first time (no --marker file yet), rank 1 leaves the marker,
says so and sleeps forever (in time.sleep, no collective); rank 0 then waits in the
all-reduce DDP's reducer starts from C++ inside loss.backward(), so its Python stack shows
only this script's backward() line, as a rank stuck computing would.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--hang-at", type=int, default=5)
parser.add_argument("--marker", default="hang.marker")
parser.add_argument("--step-delay", type=float, default=0.2)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
for step in range(args.steps):
    if rank == 1 and step == args.hang_at and not os.path.exists(args.marker):
        open(args.marker, "w").close()
        print(f"rank 1 hangs at step {step}", flush=True)
        while True:
            time.sleep(3600)
    loss = model(torch.ones(2, 4)).sum()
    loss.backward()
    print(f"rank {rank} step {step} world {dist.get_world_size()}", flush=True)
    time.sleep(args.step_delay)
dist.destroy_process_group()
