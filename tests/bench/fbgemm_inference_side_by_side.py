#!/usr/bin/env python3
"""FBGEMM's CPU inference lookup and libshardrec's serving lookup side by side (issue 32).

This compares against the table-batched IntNBit TBE, which on this CPU is several times slower
than FBGEMM's own EmbeddingSpMDM kernels; the comparison against FBGEMM's fastest CPU path (and
a gather roof) is fbgemm_spmdm_side_by_side.py (issue 63).

Opt-in (not part of ctest). Needs a Python with torch and the fbgemm-gpu-cpu wheel, e.g.

  python3.11 -m venv /tmp/venv-fbgemm
  /tmp/venv-fbgemm/bin/pip install torch==2.14.0 fbgemm-gpu-cpu==1.9.0 numpy

and a Release build of libshardrec (build/capi/libshardrec.so, or SHARDREC_LIB).

  fbgemm_inference_side_by_side.py [--rows R] [--trials N] [--seconds S] [--threads 1,2]

Both sides get the same tables (4 x R rows x dim 128, the same fp32 values: libshardrec opens
them from a checkpoint its training collection wrote, FBGEMM gets them quantized by this script
in its own row layout: fp16 scale and bias before the codes), the same requests (bags of 16-24
random ids per sample and table, pooled SUM, fp32 output) and the same threads, in one process:

- FBGEMM: IntNBitTableBatchedEmbeddingBagsCodegen's op, torch.ops.fbgemm.
  int_nbit_split_embedding_codegen_lookup_function on CPU tensors, which runs its CPU kernel
  (int_nbit_split_embedding_codegen_lookup_function_cpu); called directly with the module's
  tensors (the module's Python bounds checks and bookkeeping left out), bounds checks off.
- libshardrec: shardrec_inference_lookup through ctypes (shardrec_ctypes.Inference).

Throughput at batch 512 with T threads: libshardrec runs T concurrent requests on one handle;
FBGEMM is measured both ways, T concurrent requests with one intra-op thread each and one request
at a time with T intra-op threads, and the better of the two is its figure. Latency at batch 1 and
16: one thread, per-call p50 and p99, Python's call overhead included on both sides (ctypes on
one, the torch dispatcher on the other). Trials alternate which side runs first. Before timing,
the outputs are compared with each other and with an fp32 reference (a sanity check that both
look up the same rows; their quantizers differ: fp16 against fp32 scale and bias).
"""
import argparse
import ctypes as C
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardrec_ctypes as sr  # noqa: E402

TABLES, DIM = 4, 128
STORAGES = ("fp32", "int8", "int4")


def make_requests(rows, batch, count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        lengths = rng.integers(16, 25, size=TABLES * batch).astype(np.int32)
        ids = rng.integers(0, rows, size=int(lengths.sum())).astype(np.int64)
        req = {"B": batch, "F": TABLES, "lengths": lengths, "values": ids}
        req["view"] = sr.Inference.view(req)
        req["indices32"] = ids.astype(np.int32)
        req["offsets32"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        out.append(req)
    return out


# ---- FBGEMM -------------------------------------------------------------------------------------

def quantize_fbgemm(w, bits):
    """FBGEMM's row-wise layout: [scale fp16, bias fp16, codes] with bias = row min and scale =
    (max - min) / (2^bits - 1); int4 codes two per byte, the even column in the low nibble."""
    mn = w.min(axis=1, keepdims=True)
    mx = w.max(axis=1, keepdims=True)
    scale = ((mx - mn) / (2 ** bits - 1)).astype(np.float16)
    bias = mn.astype(np.float16)
    s32 = scale.astype(np.float32)
    s32[s32 == 0] = 1.0
    q = np.clip(np.rint((w - bias.astype(np.float32)) / s32), 0, 2 ** bits - 1).astype(np.uint8)
    if bits == 4:
        q = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    sb = np.concatenate([scale.view(np.uint8), bias.view(np.uint8)], axis=1)
    return q, sb


class Fbgemm:
    def __init__(self, weights, storage):
        import torch
        from fbgemm_gpu.split_embedding_configs import SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (BoundsCheckMode,
                                                                           EmbeddingLocation)
        from fbgemm_gpu.split_table_batched_embeddings_ops_inference import \
            IntNBitTableBatchedEmbeddingBagsCodegen
        self.torch = torch
        ty = {"fp32": SparseType.FP32, "int8": SparseType.INT8, "int4": SparseType.INT4}[storage]
        rows = weights[0].shape[0]
        specs = [("t%d" % t, rows, DIM, ty, EmbeddingLocation.HOST) for t in range(TABLES)]
        m = IntNBitTableBatchedEmbeddingBagsCodegen(
            embedding_specs=specs, device="cpu", output_dtype=SparseType.FP32,
            bounds_check_mode=BoundsCheckMode.NONE)
        m.initialize_weights()
        for (dst, dst_sb), w in zip(m.split_embedding_weights(), weights):
            if storage == "fp32":
                dst.copy_(torch.from_numpy(w.view(np.uint8)))
            else:
                q, sb = quantize_fbgemm(w, 8 if storage == "int8" else 4)
                dst.copy_(torch.from_numpy(q))
                dst_sb.copy_(torch.from_numpy(sb))
        self.m = m
        self.empty_locations = torch.empty(0, dtype=torch.int32)
        self.op = torch.ops.fbgemm.int_nbit_split_embedding_codegen_lookup_function

    def lookup(self, req):
        m = self.m
        return self.op(
            dev_weights=m.weights_host, uvm_weights=m.weights_uvm,
            weights_placements=m.weights_placements, weights_offsets=m.weights_offsets,
            weights_tys=m.weights_tys, D_offsets=m.D_offsets, total_D=m.total_D,
            max_int2_D=m.max_int2_D, max_int4_D=m.max_int4_D, max_int8_D=m.max_int8_D,
            max_float16_D=m.max_float16_D, max_float32_D=m.max_float32_D,
            indices=req["t_indices"], offsets=req["t_offsets"], pooling_mode=int(m.pooling_mode),
            indice_weights=None, output_dtype=m.output_dtype,
            lxu_cache_weights=m.lxu_cache_weights, lxu_cache_locations=self.empty_locations,
            row_alignment=m.row_alignment, max_float8_D=m.max_float8_D,
            fp8_exponent_bits=m.fp8_exponent_bits, fp8_exponent_bias=m.fp8_exponent_bias)


# ---- libshardrec --------------------------------------------------------------------------------

def shardrec_handles(lib, weights, workdir):
    rows = weights[0].shape[0]
    tables = [{"name": "t%d" % t, "rows": rows, "dim": DIM} for t in range(TABLES)]
    plan = sr.Plan(lib, tables, 1, 512)
    comm = sr.local_group(lib, 1)[0]
    coll = sr.Collection(lib, plan, comm, 1, 0.01, 1e-8)
    for t, w in enumerate(weights):
        coll.set_weights("t%d" % t, w)
    ckpt = os.path.join(workdir, "ckpt")
    sr.checkpoint_save(lib, coll, ckpt)
    coll.destroy()
    lib.so.shardrec_comm_destroy(comm)
    plan.destroy()
    return {s: sr.Inference(lib, ckpt, s) for s in STORAGES}


# ---- timing -------------------------------------------------------------------------------------

def throughput(fn, reqs_per_thread, seconds):
    """Samples/s of `threads` threads (one per list of requests) calling fn(req) for ~seconds."""
    done = [0] * len(reqs_per_thread)
    stop = time.perf_counter() + seconds

    def run(i):
        reqs, k, n = reqs_per_thread[i], 0, 0
        while time.perf_counter() < stop:
            fn(reqs[k])
            n += reqs[k]["B"]
            k = (k + 1) % len(reqs)
        done[i] = n

    start = time.perf_counter()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs_per_thread))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done) / (time.perf_counter() - start)


def latency(fn, reqs, seconds):
    """(p50, p99) seconds of single calls for ~seconds."""
    lat = []
    stop = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < stop or len(lat) < 100:
        t0 = time.perf_counter_ns()
        fn(reqs[k])
        lat.append((time.perf_counter_ns() - t0) * 1e-9)
        k = (k + 1) % len(reqs)
    lat.sort()
    return lat[(len(lat) - 1) // 2], lat[int((len(lat) - 1) * 0.99)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=250000)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    import torch
    thread_counts = [int(x) for x in args.threads.split(",")]

    lib = sr.Lib()
    rng = np.random.default_rng(1)
    weights = [rng.normal(0, 0.05, size=(args.rows, DIM)).astype(np.float32)
               for _ in range(TABLES)]
    workdir = tempfile.mkdtemp(prefix="shardrec_fbgemm_")
    try:
        ours = shardrec_handles(lib, weights, workdir)
        theirs = {s: Fbgemm(weights, s) for s in STORAGES}
        reqs = {b: [make_requests(args.rows, b, 8, 100 * b + t) for t in range(max(thread_counts))]
                for b in (1, 16, 512)}
        for per_thread in reqs.values():
            for lst in per_thread:
                for r in lst:
                    r["t_indices"] = torch.from_numpy(r["indices32"])
                    r["t_offsets"] = torch.from_numpy(r["offsets32"])
                    r["out"] = np.empty(r["B"] * TABLES * DIM, dtype=np.float32)

        def ours_fn(s):
            h = ours[s]
            return lambda r: h.lookup(r["view"], r["out"])

        def theirs_fn(s):
            f = theirs[s]
            return lambda r: f.lookup(r)

        print("libshardrec %s, torch %s, fbgemm_gpu %s; %d tables x %d rows x dim %d, bags of "
              "16-24; uptime: %s" % (lib.version(), torch.__version__,
                                     __import__("fbgemm_gpu").__version__, TABLES, args.rows, DIM,
                                     os.popen("uptime").read().strip()))
        # Agreement on one batch of 16.
        req = reqs[16][0][0]
        ref = np.zeros((16, TABLES * DIM), dtype=np.float64)
        pos = 0
        for t in range(TABLES):
            for b in range(16):
                n = int(req["lengths"][t * 16 + b])
                ref[b, t * DIM:(t + 1) * DIM] = weights[t][req["values"][pos:pos + n]].sum(axis=0)
                pos += n
        for s in STORAGES:
            ours_fn(s)(req)
            a = req["out"].reshape(16, -1).astype(np.float64)
            b = theirs_fn(s)(req).numpy().reshape(16, -1).astype(np.float64)
            print("  agreement %s: max |libshardrec - reference| %.3g, |FBGEMM - reference| %.3g, "
                  "|libshardrec - FBGEMM| %.3g" % (s, abs(a - ref).max(), abs(b - ref).max(),
                                                   abs(a - b).max()))

        results = {}  # (storage, metric) -> list of (ours, theirs)
        for trial in range(args.trials):
            order = ("ours", "theirs") if trial % 2 == 0 else ("theirs", "ours")
            for s in STORAGES:
                for T in thread_counts:
                    fig = {}
                    for side in order:
                        if side == "ours":
                            torch.set_num_threads(1)
                            fig[side] = throughput(ours_fn(s), reqs[512][:T], args.seconds)
                        else:
                            torch.set_num_threads(1)
                            concurrent = throughput(theirs_fn(s), reqs[512][:T], args.seconds)
                            torch.set_num_threads(T)
                            intra = throughput(theirs_fn(s), reqs[512][:1], args.seconds)
                            torch.set_num_threads(1)
                            fig[side] = max(concurrent, intra)
                    results.setdefault((s, "samples/s b512 T%d" % T), []).append(
                        (fig["ours"], fig["theirs"]))
                for b in (1, 16):
                    fig = {}
                    for side in order:
                        fn = ours_fn(s) if side == "ours" else theirs_fn(s)
                        fig[side] = latency(fn, reqs[b][0], args.seconds / 2)
                    for i, name in enumerate(("p50", "p99")):
                        results.setdefault((s, "%s us b%d" % (name, b)), []).append(
                            (fig["ours"][i] * 1e6, fig["theirs"][i] * 1e6))
            print("  trial %d done; uptime: %s" % (trial + 1, os.popen("uptime").read().strip()))

        print("\n%-5s %-22s %24s %24s %18s" % ("table", "figure", "libshardrec (range)",
                                              "FBGEMM (range)", "ratio (range)"))
        for (s, metric), pairs in results.items():
            o = [p[0] for p in pairs]
            t = [p[1] for p in pairs]
            ratios = [p[0] / p[1] for p in pairs]
            print("%-5s %-22s %10.1f (%.1f-%.1f) %10.1f (%.1f-%.1f) %6.2f (%.2f-%.2f)" % (
                s, metric, statistics.median(o), min(o), max(o), statistics.median(t), min(t),
                max(t), statistics.median(ratios), min(ratios), max(ratios)))
        print("targets: samples/s ratio >= 1.5 at batch 512; latency ratio <= 1.0 at batch 1 "
              "and 16 (ratio = libshardrec / FBGEMM)")
        for h in ours.values():
            h.destroy()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
