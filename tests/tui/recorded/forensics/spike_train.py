import os, sys, time, re
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
dist.init_process_group("gloo")
rank = dist.get_rank(); world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
for l in m: fully_shard(l, mesh=mesh)
fully_shard(m, mesh=mesh)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
mode = os.environ.get("SPIKE_MODE", "")
steps = int(os.environ.get("STEPS", "30"))
for step in range(1, steps + 1):
    if rank == 1 and step == 7 and mode == "hang":
        print("hanging", flush=True); time.sleep(10**6)
    if rank == 1 and step == 7 and mode == "extra":
        dist.all_reduce(torch.ones(3))
    if rank == 1 and step == 7 and mode == "gil":
        print("gil", flush=True); re.match(r"(a+)+$", "a" * 40 + "b")
    if rank == 1 and mode == "straggle":
        time.sleep(0.3)
    loss = m(torch.randn(8, 256)).pow(2).mean(); loss.backward(); opt.step(); opt.zero_grad()
print("done", rank, flush=True)
dist.barrier(); dist.destroy_process_group()
