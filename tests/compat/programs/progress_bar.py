"""A tqdm progress bar per rank (tqdm redraws it in place with "\r"), then one plain line."""

import os
import time

from tqdm import tqdm

rank = os.environ.get("RANK", "0")
for _ in tqdm(range(40), desc=f"rank {rank} bar", mininterval=0, ascii=True):
    time.sleep(0.05)
print(f"rank {rank} done")
