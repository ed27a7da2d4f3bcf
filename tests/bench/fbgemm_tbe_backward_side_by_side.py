#!/usr/bin/env python3
"""libshardrec's training lookups and fused backward against FBGEMM's CPU TBE (issue 63 item 2).

Opt-in (not part of ctest). Needs the Python of torchrec_side_by_side.py (torch 2.14.0,
fbgemm-gpu-cpu 1.9.0, numpy) and a Release build of libshardrec (build/capi/libshardrec.so, or
SHARDREC_LIB).

  fbgemm_tbe_backward_side_by_side.py [--trials N] [--iters N] [--dims 64,128]
                                      [--batches 512,2048] [--threads 1,2] [--rows R]

One process, world 1, the same tables, ids and output gradients on both sides, fp32 rows and
row-wise Adagrad (lr 0.01, eps 1e-8):

- FBGEMM: SplitTableBatchedEmbeddingBagsCodegen on CPU (EmbeddingLocation.HOST,
  EXACT_ROWWISE_ADAGRAD: what TorchRec's sharded step runs), torch.set_num_threads(threads).
  "forward" is tbe(ids, offsets) under torch.no_grad(); "step" is the forward with autograd plus
  out.backward(grad), whose backward runs the fused gradient and optimizer update; its backward
  is step minus forward (medians).
- libshardrec: shardrec_embedding_forward / _backward through ctypes (num_threads = threads);
  "lookup" and "backward" are the library's own phase timers (shardrec_embedding_step_timings:
  lookup_seconds of the forward-only trials, backward_seconds of the step trials, read around
  every call), "forward" and "step" the calls' wall time.

Tables: 8 tables of --rows rows at dim 64 (default 1M: 2 GiB of fp32 rows on each side, far
larger than the LLC), half as many at dim 128 (the same bytes); bags of 20 uniform ids. Trials interleave the two sides, the order
alternating; each trial's figure is the median of --iters calls, the reported one the median over
trials (range in brackets). Before timing, one step's outputs and updated rows are compared.
Targets (issue 63): libshardrec lookup <= FBGEMM forward (ratio >= 1.0); libshardrec backward
<= 2x its lookup.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardrec_ctypes as sr  # noqa: E402

BAG, TABLES, LR, EPS = 20, 8, 0.01, 1e-8


def batches_for(rows, B, count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids = rng.integers(0, rows, size=TABLES * B * BAG).astype(np.int64)
        out.append({"B": B, "F": TABLES, "lengths": np.full(TABLES * B, BAG, dtype=np.int32),
                    "values": ids})
    return out


def run_config(torch, tbe_cls, loc, dev, opt, dim, B, threads, rows, trials, iters, weights):
    torch.set_num_threads(threads)
    tables = [{"name": "t%d" % t, "rows": rows, "dim": dim} for t in range(TABLES)]
    tbe = tbe_cls([(rows, dim, loc, dev) for _ in range(TABLES)], optimizer=opt,
                  learning_rate=LR, eps=EPS)
    with torch.no_grad():
        for dst, w in zip(tbe.split_embedding_weights(), weights):
            dst.copy_(torch.from_numpy(w))
    lib = sr.Lib()
    comm = sr.local_group(lib, 1)[0]
    plan = sr.Plan(lib, tables, 1, B, exclude_dp=True)
    coll = sr.Collection(lib, plan, comm, threads, LR, EPS)
    for t, w in enumerate(weights):
        coll.set_weights("t%d" % t, w)
    batches = batches_for(rows, B, 4, 7 * B + dim)
    args = []
    for b in batches:
        # TBE's layout is table-major as libshardrec's KJT: feature t's B bags, then t + 1's.
        offsets = torch.arange(0, b["values"].size + 1, BAG, dtype=torch.long)
        args.append((torch.from_numpy(b["values"]), offsets))
    rng = np.random.default_rng(3)
    grads = [rng.normal(0, 1, size=(B, TABLES * dim)).astype(np.float32) for _ in range(4)]
    t_grads = [torch.from_numpy(g) for g in grads]
    out = np.zeros((B, coll.dim), dtype=np.float32)

    # One step each, compared: outputs, then the touched rows of table 0 after the update.
    ref = tbe(*args[0])
    coll.forward(batches[0], out)
    fwd_diff = float(np.abs(ref.detach().numpy() - out).max())
    ref.backward(t_grads[0])
    coll.backward(grads[0])
    touched = np.unique(batches[0]["values"][:B * BAG])
    w_tbe = tbe.split_embedding_weights()[0].detach().numpy()[touched]
    w_sr = coll.get_weights("t0", rows, dim)[touched]
    upd_diff = float(np.abs(w_tbe - w_sr).max())

    def tbe_fwd(k):
        with torch.no_grad():
            tbe(*args[k])

    def tbe_step(k):
        tbe(*args[k]).backward(t_grads[k])

    def sr_fwd(k):
        coll.forward(batches[k], out)

    def sr_step(k):
        coll.forward(batches[k], out)
        coll.backward(grads[k])

    sides = {"tbe_fwd": tbe_fwd, "tbe_step": tbe_step, "sr_fwd": sr_fwd, "sr_step": sr_step}
    for f in sides.values():
        for k in range(2):
            f(k)
    figs = {k: [] for k in list(sides) + ["sr_lookup", "sr_backward"]}
    for trial in range(trials):
        names = list(sides)
        names = names[trial % 4:] + names[:trial % 4]
        for name in names:
            ts, lookup, backward = [], [], []
            for it in range(iters):
                t0 = coll.timings()
                t = time.perf_counter()
                sides[name](it % 4)
                ts.append(time.perf_counter() - t)
                t1 = coll.timings()
                lookup.append(t1["lookup_seconds"] - t0["lookup_seconds"])
                backward.append(t1["backward_seconds"] - t0["backward_seconds"])
            figs[name].append(1e3 * statistics.median(ts))
            if name == "sr_fwd":  # the lookup phase of forwards alone, as TBE's forward alone
                figs["sr_lookup"].append(1e3 * statistics.median(lookup))
            elif name == "sr_step":
                figs["sr_backward"].append(1e3 * statistics.median(backward))
    coll.destroy()
    plan.destroy()
    lib.so.shardrec_comm_destroy(comm)
    del tbe
    return figs, fwd_diff, upd_diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--batches", default="512,2048")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", type=int, default=1 << 20)
    args = ap.parse_args()
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, EmbeddingLocation, SplitTableBatchedEmbeddingBagsCodegen)
    print("libshardrec %s, torch %s, fbgemm_gpu %s; %d tables x %d rows (dim 64), bags of %d; "
          "uptime: %s" % (
        sr.Lib().version(), torch.__version__, __import__("fbgemm_gpu").__version__, TABLES,
        args.rows, BAG, os.popen("uptime").read().strip()), flush=True)
    med = statistics.median
    for dim in [int(x) for x in args.dims.split(",")]:
        rows = args.rows * 64 // dim
        rng = np.random.default_rng(dim)
        weights = [rng.uniform(-0.05, 0.05, size=(rows, dim)).astype(np.float32)
                   for _ in range(TABLES)]
        for B in [int(x) for x in args.batches.split(",")]:
            for threads in [int(x) for x in args.threads.split(",")]:
                f, fd, ud = run_config(torch, SplitTableBatchedEmbeddingBagsCodegen,
                                       EmbeddingLocation.HOST, ComputeDevice.CPU,
                                       EmbOptimType.EXACT_ROWWISE_ADAGRAD, dim, B, threads,
                                       rows, args.trials, args.iters, weights)
                rng_ = lambda k: "%.2f-%.2f" % (min(f[k]), max(f[k]))  # noqa: E731
                tbe_bwd = med(f["tbe_step"]) - med(f["tbe_fwd"])
                print("D%-3d B%-4d T%d  ms: TBE fwd %.2f (%s) step %.2f (%s) bwd %.2f | ours fwd "
                      "%.2f (%s) lookup %.2f (%s) step %.2f (%s) bwd %.2f (%s) | lookup vs TBE "
                      "fwd %.2fx, fwd vs TBE fwd %.2fx, step vs TBE step %.2fx, our bwd / our "
                      "lookup %.2f, TBE bwd / TBE fwd %.2f | max |out diff| %.2g, |row diff| "
                      "%.2g | load %.1f" % (
                          dim, B, threads, med(f["tbe_fwd"]), rng_("tbe_fwd"),
                          med(f["tbe_step"]), rng_("tbe_step"), tbe_bwd, med(f["sr_fwd"]),
                          rng_("sr_fwd"), med(f["sr_lookup"]), rng_("sr_lookup"),
                          med(f["sr_step"]), rng_("sr_step"), med(f["sr_backward"]),
                          rng_("sr_backward"), med(f["tbe_fwd"]) / med(f["sr_lookup"]),
                          med(f["tbe_fwd"]) / med(f["sr_fwd"]),
                          med(f["tbe_step"]) / med(f["sr_step"]),
                          med(f["sr_backward"]) / med(f["sr_lookup"]),
                          tbe_bwd / med(f["tbe_fwd"]), fd, ud, os.getloadavg()[0]), flush=True)
        del weights
    print("uptime: %s" % os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
