"""Benchmarks of hdet-ray: one command per benchmark, each writing JSON results and a Markdown table.

    python -m benchmarks.quality [--quick]   # final validation metric vs an oracle grid, fixed OneCycle, PBT
    python -m benchmarks.speed [--quick]     # steps/s and bytes per step: DDP vs HDET shared_grad / local
    python -m benchmarks.scale [--quick]     # decision time at N = 8..1024, projected traffic at 1,000 GPUs
    python -m benchmarks.gpu_check           # one CUDA GPU: step overhead and no host sync (never in CI)
    python -m benchmarks.all --quick         # all of the above (but the GPU check), then docs/benchmarks.md

Results go to `benchmarks/results/<mode>/` (`full` or `quick`); see docs/benchmarks.md.
"""
