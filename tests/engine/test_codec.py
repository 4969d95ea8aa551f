"""The Decision codec round-trips every field (note included), and on 2 real gloo ranks: rank 0's Decision,
note and all, reaches rank 1 (its spread width sets the next window's multipliers on every rank); a double
gradient all-reduce through DDP is warned about."""

import math
import warnings

import pytest
import torch

from hdet_ray import HDETOneCycleLR
from hdet_ray.core.controller import Decision
from hdet_ray.engine.codec import NOTE_BYTES, DecisionCodec
from tests.engine.conftest import run_ranks

NAMES = ["lr", "wd"]


@pytest.mark.parametrize(
    "decision",
    [
        Decision(
            offsets={"lr": 0.25, "wd": -1.5},
            weights=(0.5, 0.0, 0.25, 0.25),
            acted=True,
            signal={"lr": 0.1},
            velocity={"lr": 0.05, "wd": -0.2},
            note="moved: slope 0.31 ≥ noise",
            widths={"lr": 0.0},
        ),
        Decision(offsets={"lr": math.log(0.5), "wd": 0.0}, weights=(), rollback=True, note="rollback"),
        Decision(offsets={"lr": 0.0, "wd": 0.0}, weights=(0.25,) * 4, diverged=True, note=""),
    ],
)
def test_codec_round_trips_a_decision(decision):
    codec = DecisionCodec(NAMES, 4)
    buf = codec.encode(decision)
    assert buf.dtype == torch.float64 and buf.shape == (codec.size,)
    assert codec.decode(buf) == decision


def test_codec_cuts_a_long_note_at_a_character_boundary():
    codec = DecisionCodec(["lr"], 2)
    note = "é" * NOTE_BYTES  # 2 bytes each: the cut falls inside a character
    out = codec.decode(codec.encode(Decision(offsets={"lr": 0.0}, weights=(0.5, 0.5), note=note)))
    assert out.note == "é" * (NOTE_BYTES // 2)


def test_codec_refuses_weights_of_the_wrong_length():
    with pytest.raises(ValueError, match="expected 4"):
        DecisionCodec(["lr"], 4).encode(Decision(offsets={"lr": 0.0}, weights=(1.0,)))


def two_ranks(rank, world):
    torch.manual_seed(0)
    out = {}
    # rank 0 decides (as the Ray layer's actor does) and every rank records the broadcast Decision
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def decide(window, record):  # given on every rank, called on rank 0 only
        assert rank == 0
        return Decision(
            offsets={"lr": 0.125},
            weights=(0.75, 0.25),
            acted=True,
            signal={"lr": 0.5},
            note=f"from rank 0 at window {window.window}",
            widths={"lr": 0.0},
        )

    s = HDETOneCycleLR(
        opt, max_lr=0.1, total_steps=10, sync_every=5, fanout="local", model=model, decide=decide
    )
    for _ in range(10):
        opt.step()
        s.step(loss=torch.tensor(1.0 + rank))
    out["record"] = s.records[0].to_dict()
    out["multipliers"] = [r.to_dict()["params"]["lr"]["multipliers"] for r in s.records]
    out["offsets"] = s.offsets

    # DDP averages the gradients; a scheduler that is not told so would average them again
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, fanout="shared_grad")  # model= not given
        ddp(torch.randn(4, 3)).sum().backward()
        opt.step()
        opt.step()
    out["double"] = [str(w.message) for w in seen if "DistributedDataParallel" in str(w.message)]
    ddp2 = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
    opt2 = torch.optim.SGD(ddp2.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        HDETOneCycleLR(opt2, max_lr=0.1, total_steps=10, fanout="shared_grad", model=ddp2)
        ddp2(torch.randn(4, 3) + rank).sum().backward()  # each rank's own data, as replicas have
        opt2.step()
        HDETOneCycleLR(
            torch.optim.SGD(ddp2.parameters(), lr=0.1), max_lr=0.1, total_steps=10, fanout="local", model=ddp2
        )
    out["told"] = [str(w.message) for w in seen if "DDP" in str(w.message) or "Distributed" in str(w.message)]
    return out


def test_decision_note_reaches_every_rank_and_double_all_reduce_is_warned():
    outs = run_ranks(two_ranks, 2)
    for o in outs:
        rec = o["record"]
        assert rec["note"] == "from rank 0 at window 0"
        assert rec["weights"] == [0.75, 0.25] and rec["acted"] is True
        assert rec["params"]["lr"]["new_offset"] == 0.125 and rec["params"]["lr"]["signal"] == 0.5
        assert o["offsets"] == {"lr": 0.125}
        # the Decision's width for the next window reached every rank: the spread, then none
        assert o["multipliers"][0][0] != o["multipliers"][0][1] and o["multipliers"][1] == [1.0, 1.0]
        assert len(o["double"]) == 1 and "Pass model=<the DDP-wrapped module>" in o["double"][0]
        # told about DDP (either fan-out): the scheduler holds DDP's all-reduce off, nothing to warn about
        assert o["told"] == []
