"""A user's Hugging Face Trainer script: DDP by default, or native FSDP2 with ``--fsdp``
(``from_pretrained(dir, distributed_config=DistributedConfig(fsdp_size=2))``, the FSDP path of
transformers that runs on CPU). It knows nothing of fsdp-observe (unless ``--with-callback`` adds
its one line); it writes the Trainer's own ``log_history`` at the end.
"""

import argparse
import json
import os

import tiny_llama
from transformers import LlamaForCausalLM, Trainer, TrainingArguments

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--accum", type=int, default=2)
ap.add_argument("--batch-size", type=int, default=2)
ap.add_argument("--fsdp", action="store_true")
ap.add_argument("--eval-and-save-at", type=int, default=0)
ap.add_argument("--model-dir", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--with-callback", action="store_true", help="the one-line variant: fsdp-observe's callback")
ap.add_argument("--count-input-tokens", action="store_true", help="include_num_input_tokens_seen")
args = ap.parse_args()

world = int(os.environ.get("WORLD_SIZE", "1"))
if args.fsdp:
    from transformers.distributed import DistributedConfig

    model = LlamaForCausalLM.from_pretrained(args.model_dir, distributed_config=DistributedConfig(fsdp_size=world))
else:
    model = LlamaForCausalLM.from_pretrained(args.model_dir)
every = args.eval_and_save_at or None
training_args = TrainingArguments(
    output_dir=args.out,
    max_steps=args.steps,
    per_device_train_batch_size=args.batch_size,
    gradient_accumulation_steps=args.accum,
    learning_rate=1e-3,
    logging_steps=5,
    max_grad_norm=1.0,
    report_to="none",
    use_cpu=True,
    dataloader_drop_last=True,
    seed=0,
    eval_strategy="steps" if every else "no",
    eval_steps=every,
    per_device_eval_batch_size=args.batch_size,
    save_strategy="steps" if every else "no",
    save_steps=every,
    save_only_model=True,
    include_num_input_tokens_seen="all" if args.count_input_tokens else "no",
)
callbacks = []
if args.with_callback:
    from observe.training.hf import FsdpObserveCallback

    callbacks.append(FsdpObserveCallback())
# exactly one epoch per rank: every batch fetched is trained on
train = tiny_llama.sequences(args.steps * args.accum * args.batch_size * world)
trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=train,
    callbacks=callbacks,
    eval_dataset=tiny_llama.sequences(4 * world, seed=1) if every else None,
)
trainer.train()
if trainer.is_world_process_zero():
    with open(os.path.join(args.out, "log_history.json"), "w") as fh:
        json.dump(trainer.state.log_history, fh)
