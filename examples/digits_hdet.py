"""The same data-parallel digits script with HDETOneCycleLR: each rank trains at its own rate, replicas are
averaged every `steps // 20` steps (the default sync period; 20 at the default 400 steps), and the controller
moves the base rate.

    torchrun --nproc_per_node 4 examples/digits_hdet.py

The diff against examples/digits_onecycle.py is the import, the scheduler line, `scheduler.step(loss=loss)`
and printing the trajectory. Each window's line says whether the base rate moved and why: the default
controller moves only when the replicas' ranks beat the noise across windows, against the schedule's
short-horizon bias.
"""

import argparse
import math
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hdet_ray import HDETOneCycleLR
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
scheduler = HDETOneCycleLR(optimizer, max_lr=args.max_lr, total_steps=args.steps, model=model)

batches = task.batches(rank, world, seed=0)
for step in range(args.steps):
    loss = task.loss(model, next(batches))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step(loss=loss)
    if rank == 0 and (step + 1) % 100 == 0:
        print(f"step {step + 1}: loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.2e}")

if rank == 0:
    print("validation:", task.evaluate(model.module if distributed else model))
    for record in scheduler.records:  # the trajectory: one line per sync window
        lr = record.params["lr"]
        print(
            f"window {record.window:3d} step {record.step:4d} base lr x{math.exp(lr.new_offset):.3f} "
            f"losses {[round(x, 3) for x in record.losses]} {record.note}"
        )
if distributed:
    dist.barrier()  # every rank leaves together: no rank tears down the group under another's last op
    dist.destroy_process_group()
