# measures cuDNN workspace allocations of the SDXL UNet / VAE convolutions through PyTorch's
# caching allocator trace: forward (output + workspace) and backward (dX, ws, dW, ws, db)
import json, os, sys, time, torch
import torch.nn.functional as F
torch.backends.cudnn.benchmark = False
dev = "cuda"
out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
       "gpu": torch.cuda.get_device_name(0), "convs": []}
def unet_convs(L):
    bo=[320,640,1280]; d=set()
    d.add((4,320,3,1,L)); out_=320; s=L
    for i in range(3):
        inp=out_; out_=bo[i]
        for j in range(2):
            cin = inp if j==0 else out_
            d.add((cin,out_,3,1,s)); d.add((out_,out_,3,1,s))
            if cin!=out_: d.add((cin,out_,1,1,s))
        if i<2: d.add((out_,out_,3,2,s)); s//=2
    d.add((1280,1280,3,1,s))
    rev=[1280,640,320]; prev=1280
    for i in range(3):
        o=rev[i]; inp=rev[min(i+1,2)]
        for j in range(3):
            skip= inp if j==2 else o
            rin = prev if j==0 else o
            cin=rin+skip
            d.add((cin,o,3,1,s)); d.add((o,o,3,1,s))
            if cin!=o: d.add((cin,o,1,1,s))
        if i<2: s*=2; d.add((o,o,3,1,s))
        prev=o
    d.add((320,4,3,1,L))
    return sorted(d)
def vae_convs(R):
    bo=[128,256,512,512]; d=set(); s=R
    d.add((3,128,3,1,s,1)); o=128
    for i in range(4):
        inp=o; o=bo[i]
        d.add((inp,o,3,1,s,1)); d.add((o,o,3,1,s,1))
        if inp!=o: d.add((inp,o,1,1,s,1))
        if i<3: d.add((o,o,3,2,s+1,0)); s//=2
    d.add((512,8,3,1,s,1)); d.add((8,8,1,1,s,0))
    return sorted(d)
def events(fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    fn(); torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    tr = snap["device_traces"][0]
    return [(e["action"], e["size"], e["addr"]) for e in tr if e["action"] in ("alloc", "free_requested")]
def measure(cin, cout, k, stride, h, n, dt, pad, grad=True):
    x = torch.randn(n, cin, h, h, device=dev, dtype=dt, requires_grad=grad)
    w = torch.randn(cout, cin, k, k, device=dev, dtype=dt, requires_grad=grad)
    b = torch.randn(cout, device=dev, dtype=dt, requires_grad=grad)
    # warm up (plans, handles)
    y = F.conv2d(x, w, b, stride=stride, padding=pad)
    if grad: y.backward(torch.ones_like(y))
    del y; x.grad = w.grad = b.grad = None
    res = {}
    ys = []
    def f():
        ys.append(F.conv2d(x, w, b, stride=stride, padding=pad))
    res["fwd"] = events(f)
    if grad:
        y = ys.pop(); gy = torch.ones_like(y)
        def g():
            y.backward(gy)
        res["bwd"] = events(g)
    return res
T0 = time.time()
for dtn in ("bf16",):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtn]
    for L in (64, 96, 128):
        for n in (1, 2):
            for (cin, cout, k, s, h) in unet_convs(L):
                r = measure(cin, cout, k, s, h, n, dt, k // 2)
                out["convs"].append({"kind": "unet", "cin": cin, "cout": cout, "k": k, "stride": s, "h": h, "n": n, "dtype": dtn, **r})
    print(dtn, "unet done", time.time() - T0, flush=True)
for dtn in ("fp32", "bf16", "fp16"):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtn]
    for R in (512, 768, 1024):
        for n in (1, 2, 4):
            for (cin, cout, k, s, h, pad) in vae_convs(R):
                with torch.no_grad():
                    r = measure(cin, cout, k, s, h, n, dt, pad, grad=False)
                out["convs"].append({"kind": "vae", "cin": cin, "cout": cout, "k": k, "stride": s, "h": h, "n": n, "dtype": dtn, "pad": pad, **r})
                torch.cuda.empty_cache()
    print(dtn, "vae done", time.time() - T0, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "conv_ws.json"), "w"))
print("done", time.time() - T0)
