"""A user's plain PyTorch loop, knowing nothing of fsdp-observe (the injector's unit tests run it).

It logs what it computed itself to ``--record`` (JSON): each optimizer step's sum of the losses it
passed to ``backward()``, what ``clip_grad_norm_`` returned, and torch.compile's counters.
"""

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader

VOCAB, SEQ, BATCH, MASKED = 64, 16, 4, 5


class Pair(torch.optim.Optimizer):
    """A container optimizer that is itself an Optimizer (as torchtitan's OptimizersContainer)."""

    def __init__(self, first, second):
        self.inner = [first, second]
        super().__init__([p for o in self.inner for g in o.param_groups for p in g["params"]], {})

    def step(self, closure=None):
        for o in self.inner:
            o.step()

    def zero_grad(self, set_to_none=True):
        for o in self.inner:
            o.zero_grad(set_to_none=set_to_none)


def data(n):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    labels = ids.clone()
    labels[:, :MASKED] = -100
    return [{"input_ids": i, "labels": lab} for i, lab in zip(ids, labels, strict=True)]


def validate(model, under):
    """The loop's own validation: a separate DataLoader, drawn with gradients off."""
    model.eval()
    with torch.inference_mode() if under == "inference_mode" else torch.no_grad():
        for batch in DataLoader(data(2 * BATCH), batch_size=BATCH):
            model(batch["input_ids"])
    model.train()


def main(rank=0, world=1, args=None):
    if world > 1:  # started by mp.spawn: no LOCAL_RANK in the environment
        torch.distributed.init_process_group("gloo", init_method=f"file://{args.store}", rank=rank, world_size=world)
    elif args.init_group:  # a rank of a world of one, as torchrun --nproc-per-node 1 runs it
        torch.distributed.init_process_group("gloo", init_method=f"file://{args.store}", rank=0, world_size=1)
    time.sleep(args.load_seconds)  # loading weights, compiling
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
    forward = torch.compile(model, backend="eager") if args.compile else model
    params = list(model.parameters())
    if args.optimizers == "one":
        opt = torch.optim.AdamW(params, lr=1e-3)
    else:
        first, second = torch.optim.AdamW(params[:2], lr=1e-3), torch.optim.SGD(params[2:], lr=1e-2)
        opt = Pair(first, second) if args.optimizers == "container" else None
    loader = DataLoader(
        data(args.steps * args.accum * BATCH),
        batch_size=BATCH,
        num_workers=args.workers,
        multiprocessing_context=args.mp_context if args.workers else None,
    )
    record = {"step_loss": [], "clip": []}
    step_loss = 0.0
    for i, batch in enumerate(loader):
        logits = forward(batch["input_ids"])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten()) / args.accum
        loss.backward()
        step_loss += loss.item()
        if (i + 1) % args.accum:
            continue
        if not args.no_clip:
            record["clip"].append(torch.nn.utils.clip_grad_norm_(params, 1.0).item())
        if opt is None:
            for o in (first, second):
                o.step()
                o.zero_grad()
        else:
            opt.step()
            opt.zero_grad()
        record["step_loss"].append(step_loss)
        step_loss = 0.0
        if args.val_every and len(record["step_loss"]) % args.val_every == 0:
            validate(model, args.val_under)
    if args.compile:
        from torch._dynamo.utils import counters

        record["recompiles"] = sum(counters["recompiles"].values())
        record["graph_breaks"] = sum(counters["graph_break"].values())
        record["frames"] = dict(counters["frames"])
    if rank == 0:
        with open(args.record, "w") as fh:
            json.dump(record, fh)
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--optimizers", choices=("one", "two", "container"), default="one")
    ap.add_argument("--no-clip", action="store_true")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--mp-context", default="fork")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--spawn-ranks", type=int, default=0)
    ap.add_argument("--store", default="")
    ap.add_argument("--val-every", type=int, default=0, help="validate every N optimizer steps")
    ap.add_argument("--val-under", choices=("no_grad", "inference_mode"), default="no_grad")
    ap.add_argument("--init-group", action="store_true", help="join a gloo group of one (needs --store)")
    ap.add_argument("--load-seconds", type=float, default=0.0, help="time spent loading before the loop")
    ap.add_argument("--record", required=True)
    ns = ap.parse_args()
    if ns.spawn_ranks:
        torch.multiprocessing.spawn(main, args=(ns.spawn_ranks, ns), nprocs=ns.spawn_ranks)
    else:
        main(0, 1, ns)
    print("user script done", os.getpid(), flush=True)
