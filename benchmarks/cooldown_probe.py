"""Would a loss read after a short cooldown tell a rate too low from a good one, where the window's signals
do not? A probe of the short-horizon bias, outside the engine.

    python -m benchmarks.cooldown_probe    # the families that do not climb from 10x too low, 3 starts
    python -m benchmarks.cooldown_probe --workloads regression --starts low

From 10x too low, HDET climbs on most workloads of `benchmarks.unseen`, but not on those whose window
signals (the hypergradient's sign and the replicas' loss ranks) say "lower" at every rate: a rate's noise
costs the loss now, while what a higher rate gains shows only later. A cooldown (WSD schedules' lesson) takes
the noise's share out of the loss: if the higher rate has made more progress underneath, the loss read
after a few steps at a small rate should show it.

The probe: one process trains the workload in the issue's setting (500 steps, 25-step windows, torch's
`OneCycleLR` shape at the start's peak, without the momentum cycle; each step's gradient averages 4 ranks'
batches, as 4-process DDP does) from a start `offset` grid steps from its oracle's rate (the stored grid of
`benchmarks.unseen`). At windows 2, 4, ..., 12 it branches: from the same state, a copy trains the next
window at 0.8x and another at 1.25x the schedule (the same batches for both), read five ways:

- **window**: its mean training loss over the window (what the controller's rank signal reads);
- **end**: its loss at the window's end on a fixed sample of 16 training batches;
- **cool**: that loss again after 10 more steps whose rate falls linearly from a tenth of the window's last
  to zero (a cooldown, the same batches for both);
- **line**: the fixed sample's loss at the window's start plus 0.8x and 1.25x the step of a copy trained
  through the window at the schedule itself: where replicas that share one gradient (`shared_grad`, the
  default fan-out) would end the window, read on a common sample rather than each replica's own batches;
- **line_cool**: that loss after the same cooldown from each of those two points.

Each reading votes +1 where the higher rate's loss is lower, -1 otherwise; `--repeats` branches a window
(each on other batches) give a vote between -repeats and +repeats. A signal that could climb from 10x too
low says + at `low` where it says - or 0 at `oracle`.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from collections.abc import Iterator
from typing import Any

import torch

from benchmarks import common, unseen, workloads

NO_CLIMB = ("regression", "small_targets", "weight_norm", "spectral", "mixup", "ema")
"""`benchmarks.unseen` families on which HDET does not climb from 10x too low (the page's summary)."""
STARTS = {"low": -2, "oracle": 0, "high": 2}
STEPS, WINDOW, RANKS = 500, 25, 4
BRANCH_AT = (2, 4, 6, 8, 10, 12)
MULTIPLIERS = (0.8, 1.25)
COOLDOWN = 10
READINGS = ("window", "end", "cool", "line", "line_cool")


def schedule(peak: float) -> list[float]:
    """torch's `OneCycleLR` rates at each step (its defaults), then zeros for the cooldowns past the end."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=peak)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=peak, total_steps=STEPS, cycle_momentum=False)
    rates = []
    for _ in range(STEPS):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates + [0.0] * (WINDOW + COOLDOWN)


def stream(task, seed: int) -> Iterator[list[Any]]:
    """Each step's batches, one from each of `RANKS` ranks' shards."""
    shards = [iter(task.batches(r, RANKS, seed)) for r in range(RANKS)]
    while True:
        yield [next(s) for s in shards]


def step(task, model, opt, batches, lr: float) -> float:
    for group in opt.param_groups:
        group["lr"] = lr
    loss = sum(task.loss(model, b) for b in batches) / len(batches)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def sample_loss(task, model, sample) -> float:
    with torch.no_grad():
        return sum(float(task.loss(model, b)) for bs in sample for b in bs) / sum(len(bs) for bs in sample)


def copied(task, kind, model, opt, rates):
    """A copy of the model and its optimizer's state (deep-copied: `load_state_dict` would share the tensors,
    and the copy would train the run's own state)."""
    net = copy.deepcopy(model)
    o = workloads.make_optimizer(kind, net.parameters(), rates[0], base=kind)
    o.load_state_dict(copy.deepcopy(opt.state_dict()))
    return net, o


def train_window(task, net, o, rates, w: int, m: float, seed: int) -> list[float]:
    """Train `net` through window `w` at `m` x the schedule on the batches of `seed` (its global draws, a
    dropout's and the like's, alike for every multiplier: `isolated`); its losses."""
    torch.manual_seed(seed)
    data = stream(task, 1000 + seed)
    return [step(task, net, o, next(data), m * rates[s]) for s in range(w * WINDOW, (w + 1) * WINDOW)]


def cool_down(task, net, o, sample, last: float) -> float:
    """The sample's loss after `COOLDOWN` steps whose rate falls linearly from a tenth of `last` to zero
    (the same batches for every copy)."""
    cool = stream(task, 4242)
    for s in range(COOLDOWN):
        step(task, net, o, next(cool), 0.1 * last * (1 - s / COOLDOWN))
    return sample_loss(task, net, sample)


def branch(task, kind, model, opt, rates, sample, w: int, m: float, seed: int) -> tuple[float, ...]:
    """(window, end, cool) of a copy trained through window `w` at `m` x the schedule."""
    net, o = copied(task, kind, model, opt, rates)
    losses = train_window(task, net, o, rates, w, m, seed)
    end = sample_loss(task, net, sample)
    return sum(losses) / len(losses), end, cool_down(task, net, o, sample, m * rates[(w + 1) * WINDOW - 1])


def line(task, kind, model, opt, rates, sample, w: int, seed: int) -> tuple[tuple[float, float], ...]:
    """((line, line_cool) at 0.8x, the same at 1.25x): the fixed sample's loss at the window's start plus
    `MULTIPLIERS` x the window's step (that of a copy trained through window `w` at the schedule), where
    replicas that share one gradient end the window; then after the cooldown from there."""
    net, o = copied(task, kind, model, opt, rates)
    train_window(task, net, o, rates, w, 1.0, seed)
    start = [p.detach().clone() for p in model.parameters()]
    moved = [p.detach().clone() for p in net.parameters()]
    out = []
    for m in MULTIPLIERS:
        at_m, o_m = copied(task, kind, net, o, rates)
        with torch.no_grad():
            for p, a, b in zip(at_m.parameters(), start, moved, strict=True):
                p.copy_(a + m * (b - a))
        at = sample_loss(task, at_m, sample)
        out.append((at, cool_down(task, at_m, o_m, sample, m * rates[(w + 1) * WINDOW - 1])))
    return out[0], out[1]


def isolated(fn, *args):
    """`fn(*args)` with the global RNG restored after it: the main run's draws do not depend on branches."""
    with torch.random.fork_rng(devices=[]):
        return fn(*args)


def probe(name: str, offset: int, repeats: int) -> dict[str, Any]:
    task, kind = workloads.build(name)
    k = unseen.oracle_index("full", name, common.results_dir("full") / "unseen_runs.jsonl") + offset
    peak = unseen.rate(name, k)
    rates = schedule(peak)
    sample = list(itertools.islice(stream(task, 999), 4))
    torch.manual_seed(0)
    model = task.model(0)
    opt = workloads.make_optimizer(kind, model.parameters(), rates[0], base=kind)
    data = stream(task, 1)
    votes = {}
    for w in range(STEPS // WINDOW):
        if w in BRANCH_AT:
            tally = [0] * len(READINGS)
            for r in range(repeats):
                seed = 7 * r + w
                low, high = (
                    isolated(branch, task, kind, model, opt, rates, sample, w, m, seed) for m in MULTIPLIERS
                )
                shared = isolated(line, task, kind, model, opt, rates, sample, w, seed)
                low, high = (*low, *shared[0]), (*high, *shared[1])
                for i in range(len(READINGS)):
                    tally[i] += 1 if high[i] < low[i] else -1
            votes[w] = tally
        for s in range(w * WINDOW, (w + 1) * WINDOW):
            step(task, model, opt, next(data), rates[s])
    return {"rate": peak, "votes": votes, "metric": task.evaluate(model)[task.metric]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="*", default=list(NO_CLIMB), choices=sorted(unseen.CENTRE))
    parser.add_argument("--starts", nargs="*", default=list(STARTS), choices=list(STARTS))
    parser.add_argument("--repeats", type=int, default=6, help="branches per window (votes of each reading)")
    parser.add_argument("--out", default="cooldown_probe.md", help="file in benchmarks/results/full")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    torch.set_num_threads(1)
    machine = common.machine()
    rows = []
    for name in args.workloads:
        for start in args.starts:
            out = probe(name, STARTS[start], args.repeats)
            cells = [" / ".join(f"{v:+d}" for v in out["votes"][w]) for w in BRANCH_AT]
            rows.append([name, start, f"{out['rate']:.3g}", *cells, f"{out['metric']:.4g}"])
            print(f"[cooldown_probe] {name} {start}: {cells} metric {out['metric']:.4g}", flush=True)
    headers = ["workload", "start", "peak rate", *(f"window {w}" for w in BRANCH_AT), "final metric"]
    text = (
        f"Command: `{common.command_line()}`. Machine: {common.machine_line(machine)}. Votes of "
        f"{args.repeats} branches for the higher rate (x1.25 against x0.8 of the schedule), each cell "
        f"window / end / cool / line / line_cool (the module docstring); + says a higher rate did better.\n\n"
        + common.table(headers, rows)
    )
    path = common.results_dir("full") / args.out
    path.write_text(text + "\n")
    print(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
