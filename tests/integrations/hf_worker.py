"""Run by test_transformers.py under `torchrun --nproc_per_node 2`: a tiny GPT-2 (built from a config, no
download) trained by Hugging Face `Trainer` with HDET through `HDETCallback`; each rank writes what it saw.

    torchrun --nproc_per_node 2 tests/integrations/hf_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from hdet_ray import HDETOneCycleLR
from hdet_ray.integrations.transformers import HDETCallback

STEPS, SYNC_EVERY = 30, 10


def sequences(n: int, length: int = 16, vocab: int = 32) -> list[dict[str, torch.Tensor]]:
    """Counting sequences mod `vocab` from seeded starts: learnable in a few dozen steps."""
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, vocab, (n,), generator=g)
    ids = (starts[:, None] + torch.arange(length)) % vocab
    return [{"input_ids": x, "labels": x} for x in ids]


def main(out: Path) -> None:
    torch.set_num_threads(1)
    args = TrainingArguments(
        output_dir=str(out / "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=8,
        logging_steps=STEPS,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        ddp_backend="gloo",
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    args.device  # noqa: B018  sets up the process group (gloo) before HDET's scheduler needs it
    assert dist.is_initialized() and dist.get_world_size() == 2
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16, vocab_size=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = HDETOneCycleLR(
        optimizer,
        max_lr=3e-3,
        total_steps=STEPS,
        sync_every=SYNC_EVERY,
        model=model,
        controller="slope",  # moves on one window's evidence: a 3-window run shows a move
        controller_settings={"trust_windows": 1},
    )
    trainer = Trainer(model=model, args=args, train_dataset=sequences(256), optimizers=(optimizer, scheduler))
    callback = HDETCallback(trainer)
    trainer.add_callback(callback)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    result = {
        "records": [r.to_dict() for r in scheduler.records],
        "hdet_logs": [h for h in trainer.state.log_history if any(k.startswith("hdet/") for k in h)],
        "replicas_identical": bool(torch.equal(gathered[0], gathered[1])),
        "averaged_twice_warning": any("all-reduced twice" in str(w.message) for w in caught),
    }
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()  # leave together, and take the group down before the interpreter does
    dist.destroy_process_group()
    # and skip the interpreter's teardown, where gloo's threads can still abort a finished rank (as the
    # engine tests' fixture and the benchmarks' pool do)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
