"""A user's FSDP2 loop (torchrun, gloo) that knows nothing of fsdp-observe, with one fault of a kind a
real run meets, on one rank, at one step. It prints ``FAULT <kind> rank <r> step <k> at <unix time>``
when the fault starts, so a test can time how long the verdict took. With --go-file every rank
waits for that file before its first step, so a watcher (Prometheus) has seen every rank before
any fault.

--fault none       a healthy run
--fault hang       the culprit stops before its forward (a stuck data source, a deadlock of its own)
--fault extra      the culprit issues one all_reduce the others do not (a rank-dependent branch)
--fault gil        the culprit runs a regex that never ends: C code that holds the GIL
--fault vanish     the culprit's process dies (SIGKILL) without its connections being reset, as when its
                   node is lost: a keeper process holds its sockets open (its pid in --keeper-file), so
                   the others wait as they would for a dead host, not fail at once (gloo fails a rank
                   whose peer's sockets close)
--fault straggle   the culprit sleeps --sleep seconds before every forward (a slow host, a noisy neighbour)
--fault checkpoint rank 0 saves a checkpoint for --pause seconds (torch.save to slow storage) while the
                   others wait in a barrier, then training goes on
--fault validate   every rank runs a --pause seconds validation pass (no_grad, its own DataLoader), then
                   training goes on
"""

import argparse
import io
import os
import re
import signal
import socket
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--fault", default="none")
ap.add_argument("--culprit", type=int, default=1)
ap.add_argument("--at", type=int, default=5)
ap.add_argument("--sleep", type=float, default=0.3)
ap.add_argument("--pause", type=float, default=12.0)
ap.add_argument("--width", type=int, default=256)
ap.add_argument("--keeper-file", default="keeper.pid")
ap.add_argument("--backend", default="gloo", help="nccl on a GPU (benchmarks/gpu_check.py --hang)")
ap.add_argument("--go-file", help="every rank waits for this file before its first step (a watcher's cue)")
args = ap.parse_args()

dist.init_process_group(args.backend)
rank, world = dist.get_rank(), dist.get_world_size()
device = "cuda" if args.backend == "nccl" else "cpu"
if device == "cuda":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
mesh = init_device_mesh(device, (world,))
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(4)]).to(device)
for layer in model:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(args.steps * 4, args.width), torch.randn(args.steps * 4, args.width))
loader = DataLoader(data, batch_size=4)


def fault(kind: str) -> None:
    print(f"FAULT {kind} rank {rank} step {step} at {time.time():.3f}", flush=True)


class SlowStorage(io.BytesIO):
    """A checkpoint target whose first write takes ``seconds`` (a slow network file system)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def write(self, b) -> int:  # noqa: ANN001 - io's own signature
        time.sleep(self.seconds)
        self.seconds = 0.0
        return super().write(b)


def validation(seconds: float) -> float:
    batches = DataLoader(TensorDataset(torch.randn(64, args.width)), batch_size=4)
    total, until = torch.zeros(1), time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < until:
            for (x,) in batches:
                total += model(x.to(device)).pow(2).mean().cpu()
                time.sleep(0.2)
                if time.monotonic() >= until:
                    break
    total = total.to(device)
    dist.all_reduce(total)
    return float(total)


if args.go_file:
    while not os.path.exists(args.go_file):
        time.sleep(0.1)

step = 0
for x, y in loader:
    step += 1
    if step > args.steps:
        break
    if rank == args.culprit and step == args.at:
        if args.fault == "hang":
            fault("hang")
            time.sleep(10**6)
        elif args.fault == "extra":
            fault("extra")
            dist.all_reduce(torch.ones(3, device=device))
        elif args.fault == "gil":
            fault("gil")
            re.match(r"(a+)+$", "a" * 64 + "b")
        elif args.fault == "vanish":
            keeper = os.fork()
            if keeper == 0:  # holds the rank's connections open, and nothing else
                os.setsid()
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        sock = socket.socket(fileno=int(fd))
                    except OSError:
                        continue
                    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    sock.detach()
                    if listening:
                        os.close(int(fd))  # the rank's metrics port: a lost host answers nothing
                time.sleep(10**6)
                os._exit(0)
            with open(args.keeper_file, "w") as f:
                f.write(str(keeper))
            fault("vanish")
            os.kill(os.getpid(), signal.SIGKILL)
    if rank == args.culprit and args.fault == "straggle":
        time.sleep(args.sleep)
    if step == args.at and args.fault == "checkpoint":
        state = {k: v.full_tensor() for k, v in model.state_dict().items()}  # every rank gathers
        if rank == 0:
            fault("checkpoint")
            torch.save(state, SlowStorage(args.pause))
        dist.barrier()
        print(f"CHECKPOINTED rank {rank} at {time.time():.3f}", flush=True)
    if step == args.at and args.fault == "validate":
        fault("validate")
        validation(args.pause)
        print(f"VALIDATED rank {rank} at {time.time():.3f}", flush=True)
    x, y = x.to(device), y.to(device)
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"DONE rank {rank} step {step}", flush=True)
dist.barrier()
dist.destroy_process_group()
