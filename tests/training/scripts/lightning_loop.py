"""A user's Lightning Trainer script, knowing nothing of fsdp-observe: Lightning's defaults
(``log_every_n_steps=50``), a slow collate (a tokenizer), each step's loss logged to ``--record``."""

import argparse
import json
import time

import lightning as L
import torch
from torch.utils.data import DataLoader

VOCAB, SEQ = 64, 16


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
        self.losses = []

    def training_step(self, batch, batch_idx):
        logits = self.net(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def collate(rows):
    time.sleep(args.collate_sleep)
    return torch.stack(rows)


ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--collate-sleep", type=float, default=0.15)
ap.add_argument("--record", required=True)
args = ap.parse_args()
torch.manual_seed(0)
data = list(torch.randint(0, VOCAB, (args.steps * 4, SEQ)))
module = Module()
trainer = L.Trainer(
    accelerator="cpu",
    devices=1,
    max_steps=args.steps,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(module, DataLoader(data, batch_size=4, collate_fn=collate))
with open(args.record, "w") as f:
    json.dump({"step_loss": module.losses}, f)
