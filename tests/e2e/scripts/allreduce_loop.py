"""A user's two-rank gloo loop that knows nothing of fsdp-observe: an all-reduce every 50 ms,
printing its step, until --seconds pass (no signal handling of its own)."""

import argparse
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=120)
args = ap.parse_args()
dist.init_process_group("gloo")
x = torch.ones(4)
end = time.monotonic() + args.seconds
step = 0
while time.monotonic() < end:
    dist.all_reduce(x)
    step += 1
    print(f"rank {dist.get_rank()} step {step}", flush=True)
    time.sleep(0.05)
dist.destroy_process_group()
