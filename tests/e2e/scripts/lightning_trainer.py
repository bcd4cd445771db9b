"""A user's Lightning Trainer script with ``ModelParallelStrategy`` (FSDP2 through ``fully_shard``
in ``configure_model``), started by torchrun. It knows nothing of fsdp-observe (unless
``--with-callback`` adds its one line); it logs its loss every step with ``self.log`` to a
CSVLogger, and a ``val_loss``.
"""

import argparse

import lightning as L
import tiny_llama
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.llama = tiny_llama.model()

    def configure_model(self):
        mesh = self.device_mesh["data_parallel"]
        for layer in self.llama.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(self.llama, mesh=mesh)

    def training_step(self, batch, batch_idx):
        loss = self.llama(**batch).loss
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.llama(**batch).loss)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--batch-size", type=int, default=2)
ap.add_argument("--accum", type=int, default=2)
ap.add_argument("--val-every", type=int, default=10)
ap.add_argument("--out", required=True)
ap.add_argument("--with-callback", action="store_true", help="the one-line variant: fsdp-observe's callback")
args = ap.parse_args()
callbacks = []
if args.with_callback:
    from observe.training.lightning import FsdpObserveCallback

    callbacks.append(FsdpObserveCallback())

world = 2
train = DataLoader(tiny_llama.sequences(args.steps * args.accum * args.batch_size * world), batch_size=args.batch_size)
val = DataLoader(tiny_llama.sequences(2 * args.batch_size * world, seed=1), batch_size=args.batch_size)
trainer = L.Trainer(
    accelerator="cpu",
    devices=world,
    strategy=ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1),
    max_steps=args.steps,
    accumulate_grad_batches=args.accum,
    log_every_n_steps=1,
    logger=CSVLogger(args.out, name="run"),
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    val_check_interval=args.val_every,
    num_sanity_val_steps=0,
    callbacks=callbacks,
)
trainer.fit(Module(), train, val)
