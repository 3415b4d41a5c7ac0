# How fast this machine's disk takes 2 MiB files written durably (write, fsync, rename), from 1 to 16
# threads, and without the fsync: the anchor for the KV disk tier's writer. Usage: python3 disk_writes_per_file.py DIR
import os, time, sys
from concurrent.futures import ThreadPoolExecutor
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
buf = os.urandom(2 << 20)
def write(i, sync):
    p = f"{d}/{i}.tmp"; q = f"{d}/{i}.kv"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, buf)
    if sync: os.fsync(fd)
    os.close(fd); os.rename(p, q)
def run(n, threads, sync, tag):
    for f in os.listdir(d): os.unlink(os.path.join(d, f))
    os.sync()
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda i: write(i, sync), range(n)))
    dt = time.perf_counter() - t
    print(f"{tag}: {n} files of 2 MiB, {threads} threads, fsync={sync}: {dt:.3f} s, {n*2/1024/dt:.2f} GiB/s", flush=True)
for th in (1, 2, 4, 8, 16):
    run(2048, th, True, "w")
run(2048, 1, False, "w")
run(2048, 8, False, "w")
