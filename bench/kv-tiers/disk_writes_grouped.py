# The same disk with grouped flushes (many files written, one flush, then the renames) and with
# fdatasync from 4 to 32 threads. Usage: python3 disk_writes_grouped.py DIR
import os, time, sys
from concurrent.futures import ThreadPoolExecutor
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
buf = os.urandom(2 << 20)
def write(i):
    p = f"{d}/{i}.tmp"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, buf); os.close(fd); return fd
def group(n, threads, batch):
    for f in os.listdir(d): os.unlink(os.path.join(d, f))
    os.sync()
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        for s in range(0, n, batch):
            ids = range(s, min(n, s + batch))
            list(ex.map(write, ids))
            # one flush for the batch: fsync of the directory's filesystem
            dfd = os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd)
            os.sync()
            for i in ids: os.rename(f"{d}/{i}.tmp", f"{d}/{i}.kv")
    dt = time.perf_counter() - t
    print(f"group: {n} files, {threads} threads, batch {batch}: {dt:.3f} s, {n*2/1024/dt:.2f} GiB/s", flush=True)
def fdatasync_par(n, threads):
    for f in os.listdir(d): os.unlink(os.path.join(d, f))
    os.sync()
    def w(i):
        p = f"{d}/{i}.tmp"
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, buf); os.fdatasync(fd); os.close(fd); os.rename(p, f"{d}/{i}.kv")
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex: list(ex.map(w, range(n)))
    dt = time.perf_counter() - t
    print(f"fdatasync: {n} files, {threads} threads: {dt:.3f} s, {n*2/1024/dt:.2f} GiB/s", flush=True)
for b in (16, 64, 256, 2048):
    group(2048, 8, b)
for th in (4, 16, 32):
    fdatasync_par(2048, th)
group(4096, 8, 256)
