#!/usr/bin/env python3
"""libshardrec's serving lookups against FBGEMM's fastest CPU lookups and a gather roof (issue 63).

Opt-in (not part of ctest). Needs the Python of fbgemm_inference_side_by_side.py (torch 2.14.0,
fbgemm-gpu-cpu 1.9.0, numpy), a C compiler for gather_roof.c, and a Release build of libshardrec
(build/capi/libshardrec.so, or SHARDREC_LIB).

  fbgemm_spmdm_side_by_side.py [--trials N] [--seconds S] [--formats fp32,fp16,int8,int4]
                               [--dims 64,128] [--temps hot,cold] [--batches 512,2048]
                               [--threads 1,2]

One process, the same ids on every side. Each side runs on 1 or 2 Python threads (--threads),
each calling it in a loop (torch.set_num_threads(1): one torch op runs on its calling thread;
torch and ctypes release the GIL inside the calls); with 2, the figures are the two threads'
samples together per CPU-second of both and per wall-second:

- FBGEMM's EmbeddingSpMDM JIT kernels as torch exposes them on CPU, one call per table:
  torch.nn.functional.embedding_bag (fp32, and fp16 weights: fp16 output), and
  torch.ops.quantized.embedding_bag_byte_rowwise_offsets / embedding_bag_4bit_rowwise_offsets
  (int8 / int4 rows prepacked by torch.ops.quantized.embedding_bag_{byte,4bit}_prepack: codes, then
  fp32 (int8) or fp16 (int4) scale and bias). Each table's [B, D] output is left where torch puts
  it (no concatenation: that copy is not charged to FBGEMM). This is the fastest FBGEMM CPU path;
  fbgemm_inference_side_by_side.py measures the table-batched IntNBit TBE, which is several times
  slower on this CPU.
- libshardrec: shardrec_inference_lookup through ctypes, all tables in one call, output
  [B, tables x D] fp32; tables stored as the format (opened from a checkpoint of the same fp32 rows).
- the roof: gather_roof.c over FBGEMM's stored rows (the same bytes per row as libshardrec's,
  except int4: FBGEMM's fp16 header is 4 bytes shorter), prefetching 12 ids ahead, four
  accumulators, no decode.

Huge pages for every side: libshardrec advises its table buffers MADV_HUGEPAGE; numpy (the fp32
rows FBGEMM reads in place) does the same for large arrays, and THP_MEM_ALLOC_ENABLE=1 (set here
unless already set) makes torch's CPU allocator do it for the fp16 and prepacked int8/int4 tables.
With 4 KiB pages a cold random-row lookup pays a page walk per row on either side.

Tables: dim 64: 8 tables, dim 128: 4 tables; hot: 4096 rows each (cache-resident), cold: 1M rows
each (fp32 2 GiB in all; the quantized tables are 4x / 7x smaller: say which exceed the LLC).
Requests: bags of exactly 20 ids per sample and table, uniform ids or Zipf(1.05) over a random
permutation of the rows; 4 requests per configuration, cycled. Figures are samples per CPU-second
of the calling thread (time.thread_time; a loaded machine steals wall time, not thread CPU time)
and per wall-second; trials interleave the three sides, the order rotating. Before timing, one
request's outputs are compared with an fp64 reference of the fp32 rows and with each other, and
each side's minor page faults per call are printed (0 when its output buffer is reused warm: ours
through the buffers above, FBGEMM's through the allocator).
"""
import argparse
import ctypes as C
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch is imported (see above)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardrec_ctypes as sr  # noqa: E402

BAG = 20
HOT_ROWS, COLD_ROWS = 4096, 1 << 20
PREFETCH = 12


def build_roof(workdir):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gather_roof.c")
    so = os.path.join(workdir, "gather_roof.so")
    subprocess.check_call([os.environ.get("CC", "cc"), "-O3", "-mavx2", "-shared", "-fPIC", src,
                           "-o", so])
    f = C.CDLL(so).gather_roof
    f.argtypes = [C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p, C.c_int64, C.c_int64, C.c_void_p]
    f.restype = None
    return f


def aligned_empty(n, dtype, align=64):
    """n items on an `align`-byte boundary. numpy aligns to 16 bytes only, so a 64-byte vector
    store into its buffer can straddle two cache lines (each store a split one); torch's CPU
    allocator aligns to 64, and the sides get the same alignment."""
    size = np.dtype(dtype).itemsize
    buf = np.empty(n + align // size, dtype=dtype)
    skip = (-buf.ctypes.data % align) // size
    return buf[skip:skip + n]


def make_requests(tables, rows, batch, zipf, count, seed, torch):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(rows)
    reqs = []
    for _ in range(count):
        n = tables * batch * BAG
        if zipf:
            ids = perm[(rng.zipf(1.05, size=n) - 1) % rows]
        else:
            ids = rng.integers(0, rows, size=n)
        ids = ids.astype(np.int64)
        lengths = np.full(tables * batch, BAG, dtype=np.int32)
        req = {"B": batch, "F": tables, "lengths": lengths, "values": ids}
        req["view"] = sr.Inference.view(req)
        offsets = np.arange(0, batch * BAG + 1, BAG, dtype=np.int64)
        req["offsets"] = offsets
        req["t_offsets"] = torch.from_numpy(offsets)
        per = batch * BAG
        req["t_ids"] = [torch.from_numpy(ids[t * per:(t + 1) * per]) for t in range(tables)]
        req["roof_out"] = np.empty(batch * 32, dtype=np.uint8)
        reqs.append(req)
    return reqs


class Spmdm:
    """FBGEMM's EmbeddingSpMDM through torch, one prepacked weight per table."""

    def __init__(self, torch, weights, fmt):
        self.torch = torch
        self.fmt = fmt
        F = torch.nn.functional
        q = torch.ops.quantized
        if fmt == "fp32":
            self.w = [torch.from_numpy(w) for w in weights]
            self.fn = lambda w, ids, off: F.embedding_bag(ids, w, off, mode="sum",
                                                          include_last_offset=True)
        elif fmt == "fp16":
            self.w = [torch.from_numpy(w).half() for w in weights]
            self.fn = lambda w, ids, off: F.embedding_bag(ids, w, off, mode="sum",
                                                          include_last_offset=True)
        elif fmt == "int8":
            self.w = [q.embedding_bag_byte_prepack(torch.from_numpy(w)) for w in weights]
            op = q.embedding_bag_byte_rowwise_offsets
            self.fn = lambda w, ids, off: op(w, ids, off, False, 0, False, None, None, True)
        else:
            self.w = [q.embedding_bag_4bit_prepack(torch.from_numpy(w)) for w in weights]
            op = q.embedding_bag_4bit_rowwise_offsets
            self.fn = lambda w, ids, off: op(w, ids, off, False, 0, False, None, None, True)
        # The stored rows as bytes, for the roof.
        self.bytes = [w.view(torch.uint8) if w.dtype != torch.uint8 else w for w in self.w]
        self.row_bytes = self.bytes[0].shape[1]

    def lookup(self, req):
        return [self.fn(w, ids, req["t_offsets"]) for w, ids in zip(self.w, req["t_ids"])]


def measure(fn, reqs, seconds, threads=1):
    """(samples per thread-CPU-second, samples per wall-second) of fn(req, thread) over the
    requests, on `threads` threads at once (samples and CPU seconds of all threads summed)."""
    def loop(t, res, start):
        fn(reqs[0], t)  # warm
        start.wait()
        n, k = 0, t % len(reqs)
        c0, w0 = time.thread_time(), time.perf_counter()
        while True:
            fn(reqs[k], t)
            n += reqs[k]["B"]
            k = (k + 1) % len(reqs)
            if time.perf_counter() - w0 >= seconds and k == t % len(reqs):
                break
        res[t] = (n, time.thread_time() - c0, time.perf_counter() - w0)
    res = [None] * threads
    start = threading.Barrier(threads)
    if threads == 1:
        loop(0, res, start)
    else:
        ths = [threading.Thread(target=loop, args=(t, res, start)) for t in range(threads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
    n = sum(r[0] for r in res)
    return n / sum(r[1] for r in res), n / max(r[2] for r in res)


def faults_per_call(call, calls=20):
    """Minor page faults per call of `call` after a warm one: a side that faulted its output in
    anew on every call would pay that inside its figures."""
    call()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        call()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / calls


def checkpoint(lib, weights, dim, workdir):
    tables = [{"name": "t%d" % t, "rows": weights[0].shape[0], "dim": dim}
              for t in range(len(weights))]
    plan = sr.Plan(lib, tables, 1, 512)
    comm = sr.local_group(lib, 1)[0]
    coll = sr.Collection(lib, plan, comm, 1, 0.01, 1e-8)
    for t, w in enumerate(weights):
        coll.set_weights("t%d" % t, w)
    path = os.path.join(workdir, "ckpt_%d_%d" % (dim, weights[0].shape[0]))
    sr.checkpoint_save(lib, coll, path)
    coll.destroy()
    lib.so.shardrec_comm_destroy(comm)
    plan.destroy()
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--formats", default="fp32,fp16,int8,int4")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--temps", default="hot,cold")
    ap.add_argument("--batches", default="512,2048")
    ap.add_argument("--threads", default="1", help="thread counts to run, e.g. 1,2")
    args = ap.parse_args()
    threads = [int(x) for x in args.threads.split(",")]
    import torch
    torch.set_num_threads(1)
    lib = sr.Lib()
    workdir = tempfile.mkdtemp(prefix="shardrec_spmdm_")
    print("libshardrec %s, torch %s, fbgemm_gpu %s; threads %s; bags of %d; prefetch %d (roof); "
          "uptime: %s" % (lib.version(), torch.__version__, __import__("fbgemm_gpu").__version__,
                          args.threads, BAG, PREFETCH, os.popen("uptime").read().strip()), flush=True)
    rows_out = []
    try:
        roof = build_roof(workdir)
        for dim in [int(x) for x in args.dims.split(",")]:
            tables = 8 if dim == 64 else 4
            for temp in args.temps.split(","):
                rows = HOT_ROWS if temp == "hot" else COLD_ROWS
                rng = np.random.default_rng(dim * 7 + rows)
                weights = [rng.normal(0, 0.05, size=(rows, dim)).astype(np.float32)
                           for _ in range(tables)]
                ckpt = checkpoint(lib, weights, dim, workdir)
                reqs = {(b, z): make_requests(tables, rows, b, z, 4, 31 * b + z, torch)
                        for b in [int(x) for x in args.batches.split(",")] for z in (0, 1)}
                # One output per thread and batch size, reused by every request, as FBGEMM's
                # outputs reuse the allocator's freed buffers of the call before (one output per
                # request made libshardrec write 4x the output bytes FBGEMM keeps in cache), and
                # on a 64-byte boundary, as torch's allocator places FBGEMM's.
                for b in {r["B"] for lst in reqs.values() for r in lst}:
                    outs = [aligned_empty(b * tables * dim, np.float32) for _ in range(2)]
                    roofs = [aligned_empty(b * 32, np.uint8) for _ in range(2)]
                    for lst in reqs.values():
                        for r in lst:
                            if r["B"] == b:
                                r["out"], r["roof_out"] = outs, roofs
                for fmt in args.formats.split(","):
                    ours = sr.Inference(lib, ckpt, fmt)
                    theirs = Spmdm(torch, weights, fmt)
                    # Agreement on one request's first 16 samples of every table.
                    req = next(iter(reqs.values()))[0]
                    B = req["B"]
                    ours.lookup(req["view"], req["out"][0])
                    a = req["out"][0].reshape(B, tables * dim)[:16].astype(np.float64)
                    b = np.concatenate([o.float().numpy()[:16] for o in theirs.lookup(req)],
                                       axis=1).astype(np.float64)
                    ref = np.concatenate(
                        [weights[t][req["values"][t * B * BAG:(t * B + 16) * BAG]]
                         .reshape(16, BAG, dim).astype(np.float64).sum(axis=1)
                         for t in range(tables)], axis=1)
                    table_mib = tables * rows * theirs.row_bytes / 2**20
                    print("%s dim %d %s (%d x %d rows, %.0f MiB stored by FBGEMM): max |ours - "
                          "ref| %.3g, |FBGEMM - ref| %.3g, |ours - FBGEMM| %.3g" % (
                              fmt, dim, temp, tables, rows, table_mib, abs(a - ref).max(),
                              abs(b - ref).max(), abs(a - b).max()), flush=True)
                    print("%s dim %d %s: minor page faults per call: ours %.2f, SpMDM %.2f" % (
                        fmt, dim, temp, faults_per_call(lambda: ours.lookup(req["view"],
                                                                            req["out"][0])),
                        faults_per_call(lambda: theirs.lookup(req))), flush=True)
                    fns = {
                        "ours": lambda r, k, h=ours: h.lookup(r["view"], r["out"][k]),
                        "spmdm": lambda r, k: theirs.lookup(r),
                        "roof": lambda r, k, th=theirs, t=tables: [
                            roof(th.bytes[i].data_ptr(), th.row_bytes, r["t_ids"][i].data_ptr(),
                                 r["offsets"].ctypes.data, r["B"], PREFETCH,
                                 r["roof_out"][k].ctypes.data) for i in range(t)],
                    }
                    for ((batch, zipf), lst), nt in [(c, n) for c in reqs.items()
                                                     for n in threads]:
                        figs = {k: [] for k in fns}
                        for trial in range(args.trials):
                            names = list(fns)
                            names = names[trial % 3:] + names[:trial % 3]
                            for name in names:
                                figs[name].append(measure(fns[name], lst, args.seconds, nt))
                        row = {"fmt": fmt, "dim": dim, "temp": temp, "batch": batch,
                               "ids": "zipf" if zipf else "uniform", "figs": figs,
                               "threads": nt, "load": os.getloadavg()[0]}
                        rows_out.append(row)
                        print_row(row, flush=True)
                    ours.destroy()
                    del theirs
                del weights
                shutil.rmtree(ckpt, ignore_errors=True)
        print("\nsummary (ratios of CPU-time medians; targets: ours/SpMDM >= 1.0; int8, int4 "
              "ours/roof >= 0.85 cold); uptime: %s" % os.popen("uptime").read().strip())
        for fmt, temp, nt in [(f, t, n) for f in args.formats.split(",")
                              for t in args.temps.split(",") for n in threads]:
            sel = [r for r in rows_out
                   if r["fmt"] == fmt and r["temp"] == temp and r["threads"] == nt]
            if not sel:
                continue
            vs = [ratio(r, "spmdm") for r in sel]
            vr = [ratio(r, "roof") for r in sel]
            print("%-5s %-4s T%d ours/SpMDM %.2f-%.2f (median %.2f)   ours/roof %.2f-%.2f "
                  "(median %.2f)" % (fmt, temp, nt, min(vs), max(vs), statistics.median(vs),
                                     min(vr), max(vr), statistics.median(vr)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def med(figs, name, i=0):
    return statistics.median(f[i] for f in figs[name])


def ratio(row, other):
    return med(row["figs"], "ours") / med(row["figs"], other)


def print_row(r, flush=False):
    f = r["figs"]
    spread = lambda n: (min(x[0] for x in f[n]), max(x[0] for x in f[n]))  # noqa: E731
    print("  %-5s D%-3d %-4s B%-4d %-7s T%d samples/CPU-s: ours %9.0f (%.0f-%.0f)  SpMDM %9.0f "
          "(%.0f-%.0f)  roof %9.0f  | ours/SpMDM %.2f  ours/roof %.2f  | wall: ours/SpMDM %.2f"
          "  load %.1f" % (
              r["fmt"], r["dim"], r["temp"], r["batch"], r["ids"], r["threads"], med(f, "ours"),
              *spread("ours"), med(f, "spmdm"), *spread("spmdm"), med(f, "roof"),
              ratio(r, "spmdm"), ratio(r, "roof"),
              med(f, "ours", 1) / med(f, "spmdm", 1), r["load"]), flush=flush)


if __name__ == "__main__":
    main()
