"""Cost of the allocator poison (checks.poison_allocator) per trial on a GPU, for a few task sizes.

Measures, per (inputs + output) size: the current call (one big block of 2x(in+out)+64 MiB plus up to 16 copies
of each exact input/output size) against the big block alone (copies=0), wall time after a device synchronise,
and the peak reserved memory each leaves behind. Prints a table; meant for the device machine.
"""

from __future__ import annotations

import statistics
import time

import torch

from htam_graph.kernels_runtime.worker import checks


def _one(nbytes: int, sizes: list[int], copies: int) -> tuple[float, float]:
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    checks.poison_allocator(dev, nbytes, sizes=sizes, copies=copies)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, torch.cuda.max_memory_reserved() / 2**30


def main() -> None:
    print(
        f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; wall s of one poison_allocator call"
    )
    print("| in+out GB | copies | median s | max s | peak reserved GiB |")
    print("|---|---|---|---|---|")
    for gb in (0.1, 1.0, 3.2, 6.4):
        half = int(gb * 1e9 / 2)
        sizes = [half, half]
        nbytes = 2 * sum(sizes) + (64 << 20)
        for copies in (16, 0):
            runs = [_one(nbytes, sizes, copies) for _ in range(4)]
            ts = [r[0] for r in runs[1:]]
            print(
                f"| {gb} | {copies} | {statistics.median(ts):.3f} | {max(ts):.3f} | {max(r[1] for r in runs):.1f} |"
            )
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
