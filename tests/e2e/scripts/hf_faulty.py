"""A user's Hugging Face Trainer script (DDP on CPU) whose data collator hangs on one rank at one
batch (a stuck tokenizer or data source). It knows nothing of fsdp-observe; it prints
``FAULT hang rank <r> step <k> at <unix time>`` when its collator stops.
"""

import argparse
import os
import time

import tiny_llama
from transformers import LlamaForCausalLM, Trainer, TrainingArguments, default_data_collator

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--culprit", type=int, default=1)
ap.add_argument("--at", type=int, default=6, help="the collator call (batch) that hangs")
ap.add_argument("--model-dir", required=True)
ap.add_argument("--out", required=True)
args = ap.parse_args()

rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
calls = 0


def collate(features):
    global calls
    calls += 1
    if rank == args.culprit and calls == args.at:
        print(f"FAULT hang rank {rank} step {calls} at {time.time():.3f}", flush=True)
        time.sleep(10**6)
    return default_data_collator(features)


trainer = Trainer(
    model=LlamaForCausalLM.from_pretrained(args.model_dir),
    args=TrainingArguments(
        output_dir=args.out,
        max_steps=args.steps,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_steps=2,
        report_to="none",
        use_cpu=True,
        dataloader_drop_last=True,
        save_strategy="no",
        seed=0,
    ),
    train_dataset=tiny_llama.sequences(args.steps * 2 * world),
    data_collator=collate,
)
trainer.train()
