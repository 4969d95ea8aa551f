"""`benchmarks.common.machine`: the line stated beside every benchmark figure."""

import torch

from benchmarks import common


def test_the_machine_line_names_the_processor_and_the_kernels_torch_uses():
    # two machines with one platform string rounded the same runs differently (docs/benchmarks.md, "A stored
    # run is one machine's draw"): the line must tell them apart
    m = common.machine()
    assert m["cpu"].endswith(torch.backends.cpu.get_cpu_capability())
    line = common.machine_line(m)
    assert m["cpu"] in line and m["platform"] in line
    older = {k: v for k, v in m.items() if k != "cpu"}  # a summary stored before the field
    assert common.machine_line(older).startswith(f"{m['cpus']} CPUs ({m['platform']})")
