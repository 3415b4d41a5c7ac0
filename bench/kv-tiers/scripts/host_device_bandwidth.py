"""Host-device copy bandwidth on a GPU machine, the ceiling of the tiered KV cache's reloads: pinned and
pageable host memory, one 1 GiB copy and 512 copies of 2 MiB (one 8B-model KV block each), host memcpy,
and a file read from the page cache. Run with PyTorch: `python3 host_device_bandwidth.py`."""
import torch, time
def t(f, n=5):
    f(); torch.cuda.synchronize()
    ts=[]
    for _ in range(n):
        s=time.perf_counter(); f(); torch.cuda.synchronize(); ts.append(time.perf_counter()-s)
    ts.sort(); return ts[len(ts)//2]
G=1<<30
s=time.perf_counter(); pin=torch.empty(G,dtype=torch.uint8,pin_memory=True); print("pin alloc 1GiB s",time.perf_counter()-s)
s=time.perf_counter(); pin.fill_(1); print("pin touch s",time.perf_counter()-s)
page=torch.ones(G,dtype=torch.uint8)
dev=torch.empty(G,dtype=torch.uint8,device="cuda")
for name,src in [("pinned",pin),("pageable",page)]:
    x=t(lambda: dev.copy_(src,non_blocking=True)); print(name,"H2D 1 copy GB/s",G/x/1e9, "s",x)
    x=t(lambda: src.copy_(dev,non_blocking=True)); print(name,"D2H 1 copy GB/s",G/x/1e9)
B=2<<20
def many():
    for i in range(G//B): dev[i*B:(i+1)*B].copy_(pin[i*B:(i+1)*B],non_blocking=True)
x=t(many); print("pinned H2D 512x2MiB GB/s",G/x/1e9,"s",x)
B=32<<10
def many2():
    for i in range(G//B//8): dev[i*B:(i+1)*B].copy_(pin[i*B:(i+1)*B],non_blocking=True)
x=t(many2); print("pinned H2D 4096x32KiB GB/s",G/8/x/1e9,"s",x)
# host memcpy bandwidth
torch.set_num_threads(16)
page2=torch.empty(G,dtype=torch.uint8); page2.fill_(0)
x=t(lambda: page2.copy_(page)); print("host memcpy torch GB/s",G/x/1e9)
x=t(lambda: pin.copy_(page)); print("host memcpy into pinned GB/s",G/x/1e9)
import os; print("cpus",os.cpu_count())
# disk read bandwidth
p="/tmp/f.bin"; page.numpy().tofile(p); os.sync()
s=time.perf_counter(); 
with open(p,"rb") as f: f.readinto(memoryview(page2.numpy()))
print("file read (page cache) GB/s", G/(time.perf_counter()-s)/1e9)
os.system("df -h /tmp; mount | grep ' / '; free -g")
