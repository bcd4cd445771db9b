"""A user's Lightning Fabric loop with ``ModelParallelStrategy`` (FSDP2 through ``fully_shard``),
started by torchrun. It knows nothing of fsdp-observe and logs its own per-step loss.
"""

import argparse

import lightning as L
import tiny_llama
import torch
from lightning.fabric.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader


def parallelize(model, mesh):
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["data_parallel"])
    fully_shard(model, mesh=mesh["data_parallel"])
    return model


ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--batch-size", type=int, default=2)
ap.add_argument("--record", required=True)
args = ap.parse_args()

world = 2
fabric = L.Fabric(
    accelerator="cpu",
    devices=world,
    strategy=ModelParallelStrategy(parallelize_fn=parallelize, data_parallel_size=world, tensor_parallel_size=1),
)
fabric.launch()
model = fabric.setup(tiny_llama.model())
opt = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-3))
loader = fabric.setup_dataloaders(
    DataLoader(tiny_llama.sequences(args.steps * args.batch_size * world), batch_size=args.batch_size)
)
losses = []
for batch in loader:
    loss = model(**batch).loss
    fabric.backward(loss)
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
tiny_llama.write_json(args.record, {"step_loss": losses})
