"""NCCL all-reduce through PyTorch, the anchor for docqa's tensor-parallel sums (`gpu-check` with
DOCQA_BENCH_TP prints docqa's own beside it): one process per GPU, f32 sums in place of one decode
row and of an 8,192-token pass's residual stream at a model width, 50 in a row after 5 to warm up,
wall clock, and the bus bandwidth NCCL's own tests report (2 (n - 1) / n of the bytes a second).

Usage: python3 bench/nccl_allreduce.py [--gpus N] [--hidden 4096]
NVLink multicast stays off (NCCL_NVLS_ENABLE=0 unless set).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, hidden, port, results):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    for rows in (1, 8192):
        x = torch.zeros(rows * hidden, dtype=torch.float32, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(50):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        secs = (time.perf_counter() - start) / 50
        if rank == 0:
            results.put((rows, secs))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=min(2, torch.cuda.device_count()))
    parser.add_argument("--hidden", type=int, default=4096)
    args = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.spawn(rank_main, args=(args.gpus, args.hidden, 29512, results), nprocs=args.gpus, join=True)
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    print(f"anchor: PyTorch {torch.__version__} all_reduce (NCCL {nccl}), {args.gpus} GPUs")
    for _ in range(2):
        rows, secs = results.get()
        n_bytes = rows * args.hidden * 4
        bus = 2 * (args.gpus - 1) / args.gpus * n_bytes / secs
        print(
            f"  torch all-reduce, {args.gpus} ranks, {rows:>4} rows of {args.hidden} f32"
            f"  {secs * 1e6:8.1f} us  bus {bus * 1e-9:6.1f} GB/s"
        )


if __name__ == "__main__":
    main()
