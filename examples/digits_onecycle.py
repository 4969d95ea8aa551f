"""Data-parallel training of an MLP on scikit-learn's digits with OneCycleLR: the plain baseline.

    torchrun --nproc_per_node 4 examples/digits_onecycle.py
    python examples/digits_onecycle.py            # one process

`examples/digits_hdet.py` is this file with the scheduler swapped for HDETOneCycleLR
(`diff examples/digits_onecycle.py examples/digits_hdet.py`).
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray.tasks import Digits

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--max-lr", type=float, default=0.003)
args = parser.parse_args()

torch.set_num_threads(1)
distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")
rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

task = Digits()
model = task.model(seed=0)
if distributed:
    model = DistributedDataParallel(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.max_lr / 25)
scheduler = OneCycleLR(optimizer, max_lr=args.max_lr, total_steps=args.steps)

batches = task.batches(rank, world, seed=0)
for step in range(args.steps):
    loss = task.loss(model, next(batches))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if rank == 0 and (step + 1) % 100 == 0:
        print(f"step {step + 1}: loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.2e}")

if rank == 0:
    print("validation:", task.evaluate(model.module if distributed else model))
if distributed:
    dist.barrier()  # every rank leaves together: no rank tears down the group under another's last op
    dist.destroy_process_group()
