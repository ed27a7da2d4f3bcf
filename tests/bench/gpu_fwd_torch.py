#!/usr/bin/env python3
"""PyTorch's nn.EmbeddingBag on the shapes of suite gpu_fwd, for the side-by-side table.

Reads the shapes (JSON lines from `embedding_gpu_bench --print_fwd_shapes`) on stdin or from a
file, times each forward the way the C++ benchmark does (CUDA events around the call, 10
warm-ups, 100 timed calls over 4 rotating id batches, median and p90) and prints one JSON object
per shape. Tables of one width are one EmbeddingBag over the concatenated rows (ids shifted by
t*E), so PyTorch also does every table in one launch; shapes with mixed widths use one
EmbeddingBag per table, called in a loop. Weights are random in [-1, 1); outputs are in the
weights' dtype (PyTorch's choice), where libshardrec writes fp32.

Usage: gpu_fwd_torch.py [SHAPES_FILE] [--quick]
"""
import json
import sys

WARMUPS, TIMED, BATCHES = 10, 100, 4


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    src = open(args[0]) if args else sys.stdin
    shapes = [json.loads(line) for line in src if line.strip()]
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": "no torch: %s" % e}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 0
    dev = torch.device("cuda", 0)
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    gen = torch.Generator(device=dev)
    gen.manual_seed(42)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}),
          flush=True)
    for s in shapes:
        if quick and not s["quick"]:
            continue
        try:
            print(json.dumps(run_shape(torch, dev, dtypes[s["dtype"]], gen, s)), flush=True)
        except Exception as e:  # report and go on: one shape must not hide the others
            print(json.dumps({"id": s["id"], "error": str(e)}), flush=True)
        torch.cuda.empty_cache()
    return 0


def run_shape(torch, dev, dtype, gen, s):
    T, E, B, L, dims = s["T"], s["E"], s["B"], s["L"], s["dims"]
    uniform = len(set(dims)) == 1
    nn = torch.nn
    if uniform:
        D = dims[0]
        bags = [nn.EmbeddingBag(T * E, D, mode="sum", dtype=dtype, device=dev)]
        with torch.no_grad():
            bags[0].weight.uniform_(-1.0, 1.0, generator=gen)
    else:
        bags = []
        for t in range(T):
            b = nn.EmbeddingBag(E, dims[t % len(dims)], mode="sum", dtype=dtype, device=dev)
            with torch.no_grad():
                b.weight.uniform_(-1.0, 1.0, generator=gen)
            bags.append(b)
    batches = []
    for _ in range(BATCHES):
        ids = torch.randint(0, E, (T, B * L), device=dev, generator=gen)
        w = (torch.rand((T, B * L), device=dev, generator=gen).to(dtype)
             if s["weighted"] else None)
        if uniform:
            shift = (torch.arange(T, device=dev) * E).unsqueeze(1)
            flat = (ids + shift).reshape(-1)
            offsets = torch.arange(0, T * B * L, L, device=dev)
            batches.append([(flat, offsets, None if w is None else w.reshape(-1))])
        else:
            offsets = torch.arange(0, B * L, L, device=dev)
            batches.append([(ids[t], offsets, None if w is None else w[t]) for t in range(T)])
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        for i in range(WARMUPS + TIMED):
            calls = batches[i % BATCHES]
            start.record()
            for k, (ids, offsets, w) in enumerate(calls):
                bags[k](ids, offsets, per_sample_weights=w)
            end.record()
            end.synchronize()
            if i >= WARMUPS:
                times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return {"id": s["id"], "median_us": times[len(times) // 2],
            "p90_us": times[len(times) * 9 // 10], "calls": len(batches[0])}


if __name__ == "__main__":
    sys.exit(main())
