"""Sums an Nsight Compute kernel-time log by kernel: time, share and launches, the largest first.

The log is what `ncu --metrics gpu__time_duration.sum --csv` prints (other lines are skipped), for example
of `DOCQA_PROFILE_MODEL=llama-3.2-1b DOCQA_PROFILE_TOKENS=32767 gpu-check` under
`ncu --profile-from-start off`. Kernels are grouped by name without their argument list.

Usage: python3 bench/ncu_summary.py NCU_CSV_LOG
"""

import csv
import re
import sys
from collections import defaultdict

MICROSECONDS_PER_UNIT = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def kernel_times(path):
    """(kernel name, microseconds) for each profiled launch in the log."""
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        yield re.sub(r"\(.*", "", row["Kernel Name"]), value * MICROSECONDS_PER_UNIT[row.get("Metric Unit", "ns")]


def main(path):
    launches = list(kernel_times(path))
    total = sum(us for _, us in launches)
    by_kernel = defaultdict(lambda: [0, 0.0])
    for name, us in launches:
        by_kernel[name][0] += 1
        by_kernel[name][1] += us
    print(f"{len(launches)} kernels, {total / 1e3:.3f} ms in all")
    for name, (count, us) in sorted(by_kernel.items(), key=lambda item: -item[1][1]):
        print(f"{us / 1e3:10.3f} ms {100 * us / total:5.1f} %  {count:5d}x  {name[:90]}")


if __name__ == "__main__":
    main(sys.argv[1])
