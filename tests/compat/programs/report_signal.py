"""Waits, and says which signal arrived before dying of it as Python's default would."""

import os
import signal
import time

rank = os.environ.get("RANK", "0")


def report(sig, frame):
    print(f"rank {rank} received {signal.Signals(sig).name}", flush=True)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, report)
print(f"rank {rank} ready", flush=True)
while True:
    time.sleep(1)
