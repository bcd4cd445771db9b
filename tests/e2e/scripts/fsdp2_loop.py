"""A user's hand-written FSDP2 loop (torchrun, gloo): fully_shard per decoder layer and the root,
AdamW, gradient accumulation, clip_grad_norm_, a DistributedSampler DataLoader and, with
``--val-every``, its own validation under ``torch.no_grad()`` from a separate DataLoader. It knows
nothing of fsdp-observe and logs its own per-step loss (the sum of what it passed to backward()).
"""

import argparse

import tiny_llama
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--accum", type=int, default=2)
ap.add_argument("--batch-size", type=int, default=2)
ap.add_argument("--val-every", type=int, default=0, help="validate every N optimizer steps")
ap.add_argument("--record", required=True)
args = ap.parse_args()

dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
model = tiny_llama.model()
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = tiny_llama.sequences(args.steps * args.accum * args.batch_size * world)
loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data, shuffle=False))
held_out = tiny_llama.sequences(4 * world, seed=1)
val_loader = DataLoader(held_out, batch_size=args.batch_size, sampler=DistributedSampler(held_out, shuffle=False))

losses, val_losses, step_loss = [], [], 0.0
for i, batch in enumerate(loader):
    loss = model(**batch).loss / args.accum
    loss.backward()
    step_loss += loss.item()
    if (i + 1) % args.accum:
        continue
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    losses.append(step_loss)
    step_loss = 0.0
    if args.val_every and len(losses) % args.val_every == 0:
        model.eval()
        with torch.no_grad():
            val_losses.append(sum(model(**b).loss.item() for b in val_loader))
        model.train()
tiny_llama.write_json(args.record, {"step_loss": losses, "val_loss": val_losses})
dist.barrier()
dist.destroy_process_group()
