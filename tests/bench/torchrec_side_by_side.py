#!/usr/bin/env python3
"""TorchRec's CPU path and libshardrec side by side, on identical tables and batches.

Opt-in (not part of ctest); setup and usage in torchrec_side_by_side.md beside this file.

  torchrec_side_by_side.py [--quick] [--trials N] [--iters K] [--worlds 1,2]
      Speed: forward samples/s and training-step samples/s (row-wise Adagrad) of both libraries
      at world 1 (one process, 2 threads each) and world 2 (two processes, one thread per rank;
      TorchRec over torch.distributed gloo, libshardrec over its own communicator), in the same
      processes, trials interleaved (the order alternates every trial), medians and ranges over
      trials, and the ratio libshardrec / TorchRec of samples/s. Tables and batches have the
      same shapes and the same ids on both sides (8 tables of 100k-1M rows, dims 64/128, 2048
      samples per rank, bags of 16-24 ids; --quick: 10x fewer rows, 512 samples per rank).
  torchrec_side_by_side.py --check [--steps S]
      Agreement: for every sharding type TorchRec runs on CPU, both libraries start from the
      same weights, run S training steps on the same batches with the same output gradients,
      and their pooled outputs (every step) and final weights are compared with each other and
      with a float64 NumPy reference; unweighted and weighted batches, SUM and MEAN pooling.
      The reference also has the variants that explain TorchRec's known differences (row-wise
      Adagrad statistic per column shard; weighted MEAN dividing by the id count with a backward
      that drops the division), and the report says which variant each run matches.

Environment: SHARDREC_LIB (path of libshardrec.so; default build/capi/libshardrec.so).
The agreement half lives in torchrec_side_by_side_check.py and what both halves share (batches,
TorchRec's model, the per-rank setup) in torchrec_side_by_side_common.py.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardrec_ctypes as sr  # noqa: E402
from torchrec_side_by_side_check import check_worker, report_check  # noqa: E402
from torchrec_side_by_side_common import (EPS, LR, kjt_of, make_batch, setup,  # noqa: E402
                                          torchrec_model)

BENCH_TABLES = [(1000000, 128), (500000, 64), (200000, 128), (100000, 64), (1000000, 64),
                (300000, 128), (100000, 128), (700000, 64)]  # as embedding_e2e_bench.cc


def bench_tables(quick):
    div = 10 if quick else 1
    return [{"name": "t%d" % i, "rows": r // div, "dim": d, "pooling": "sum",
             "pooling_factor": 20.0} for i, (r, d) in enumerate(BENCH_TABLES)]


def bench_worker(rank, world, port, cfg, outpath):
    threads = 2 if world == 1 else 1
    torch, dist, pg, lib, comm = setup(rank, world, port, threads)
    tables = bench_tables(cfg["quick"])
    B = 512 if cfg["quick"] else 2048
    batches = [make_batch(tables, B, 1000 * rank + k, 16, 24, False) for k in range(4)]
    t0 = time.time()
    dmp, tr_kinds, _ = torchrec_model(tables, world, pg, False, None, meta=True)
    t_tr_create = time.time() - t0
    t0 = time.time()
    forced = cfg.get("shardrec_type")
    cons = {t["name"]: (forced, None) for t in tables} if forced else None
    plan = sr.Plan(lib, tables, world, B, constraints=cons, exclude_dp=True)
    coll = sr.Collection(lib, plan, comm, threads, LR, EPS)
    t_sr_create = time.time() - t0
    sr_kinds = plan.describe()
    kjts = [kjt_of(b, tables) for b in batches]
    out = np.zeros((B, coll.dim), dtype=np.float32)
    grad_np = np.full((B, coll.dim), 1e-4, dtype=np.float32)
    grad_t = torch.from_numpy(grad_np.copy())

    def tr_forward(k):
        with torch.no_grad():
            dmp(kjts[k]).values()

    def tr_step(k):
        dmp(kjts[k]).values().backward(grad_t)

    def sr_forward(k):
        coll.forward(batches[k], out)

    def sr_step(k):
        coll.forward(batches[k], out)
        coll.backward(grad_np)

    sides = {"forward": {"torchrec": tr_forward, "shardrec": sr_forward},
             "step": {"torchrec": tr_step, "shardrec": sr_step}}
    result = {"world": world, "threads_per_rank": threads, "batch_per_rank": B,
              "torchrec_plan": tr_kinds, "shardrec_plan": sr_kinds,
              "create_s": {"torchrec": t_tr_create, "shardrec": t_sr_create},
              "trials": {}, "phases_ms": {}}
    iters, trials = cfg["iters"], cfg["trials"]
    if cfg.get("profile"):  # one side's forward in a loop, for `perf record` around the script
        fn = sides["forward"][cfg["profile"]]
        for k in range(2):
            fn(k)
        t = time.perf_counter()
        for it in range(cfg["profile_iters"]):
            fn(it % 4)
        result["profile_ms"] = 1e3 * (time.perf_counter() - t) / cfg["profile_iters"]
        iters = trials = 0
        sides = {m: {k: v for k, v in d.items() if k == cfg["profile"]} for m, d in sides.items()}
        if cfg["profile"] == "torchrec":
            coll.timings = lambda: {k: 0.0 for k in (
                "forwards", "input_dist_seconds", "lookup_seconds", "output_dist_seconds",
                "backward_seconds", "collective_seconds", "total_seconds")}
    for mode in (("forward",) if cfg.get("profile") else ("forward", "step")):
        for name, fn in sides[mode].items():  # warm-up
            for k in range(2):
                fn(k)
        t_before = coll.timings()
        med = {"torchrec": [], "shardrec": []}
        for trial in range(trials):
            order = ["torchrec", "shardrec"] if trial % 2 == 0 else ["shardrec", "torchrec"]
            for name in order:
                fn = sides[mode][name]
                times = []
                for it in range(iters):
                    dist.barrier()
                    t = time.perf_counter()
                    fn(it % 4)
                    times.append(time.perf_counter() - t)
                med[name].append(statistics.median(times))
        result["trials"][mode] = med
        t_after = coll.timings()
        n = max(1, t_after["forwards"] - t_before["forwards"])
        result["phases_ms" if mode == "forward" else "step_phases_ms"] = {
            k: 1e3 * (t_after[k] - t_before[k]) / n
            for k in ("input_dist_seconds", "lookup_seconds", "output_dist_seconds",
                      "backward_seconds", "collective_seconds", "total_seconds")}
    if rank == 0:
        with open(outpath, "w") as f:
            json.dump(result, f)
    dist.barrier()
    coll.destroy()
    plan.destroy()
    lib.so.shardrec_comm_destroy(comm)
    dist.destroy_process_group()


def fbgemm_alone(quick, threads, trials, iters):
    """FBGEMM's CPU TBE forward alone (the kernel under TorchRec's forward) against libshardrec's
    forward on the same lookups, world 1, in this process, trials interleaved."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, EmbeddingLocation, SplitTableBatchedEmbeddingBagsCodegen)
    torch.set_num_threads(threads)
    tables = bench_tables(quick)
    B = 512 if quick else 2048
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(t["rows"], t["dim"], EmbeddingLocation.HOST, ComputeDevice.CPU) for t in tables],
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=LR, eps=EPS)
    batches = [make_batch(tables, B, k, 16, 24, False) for k in range(4)]
    args = []
    for b in batches:
        lengths = torch.from_numpy(b["lengths"]).long()
        offsets = torch.zeros(lengths.numel() + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lengths, 0)
        args.append((torch.from_numpy(b["values"]), offsets))
    lib = sr.Lib()
    comm = sr.local_group(lib, 1)[0]
    plan = sr.Plan(lib, tables, 1, B, exclude_dp=True)
    coll = sr.Collection(lib, plan, comm, threads, LR, EPS)
    out = np.zeros((B, coll.dim), dtype=np.float32)

    def f_tbe(k):
        with torch.no_grad():
            tbe(*args[k])

    def f_sr(k):
        coll.forward(batches[k], out)
    sides = {"fbgemm": f_tbe, "shardrec": f_sr}
    for f in sides.values():
        for k in range(3):
            f(k)
    med = {k: [] for k in sides}
    t0 = coll.timings()
    for trial in range(trials):
        for name in (["fbgemm", "shardrec"] if trial % 2 == 0 else ["shardrec", "fbgemm"]):
            ts = []
            for it in range(iters):
                t = time.perf_counter()
                sides[name](it % 4)
                ts.append(time.perf_counter() - t)
            med[name].append(1e3 * statistics.median(ts))
    t1 = coll.timings()
    n = max(1, t1["forwards"] - t0["forwards"])
    ph = {k: 1e3 * (t1[k] - t0[k]) / n
          for k in ("input_dist_seconds", "lookup_seconds", "output_dist_seconds")}
    coll.destroy()
    plan.destroy()
    lib.so.shardrec_comm_destroy(comm)
    return ("%d thread(s): FBGEMM TBE forward alone median %.2f ms (%.2f-%.2f); libshardrec "
            "forward %.2f ms (%.2f-%.2f): input_dist %.2f, lookup %.2f, output_dist %.2f" %
            (threads, statistics.median(med["fbgemm"]), min(med["fbgemm"]), max(med["fbgemm"]),
             statistics.median(med["shardrec"]), min(med["shardrec"]), max(med["shardrec"]),
             ph["input_dist_seconds"], ph["lookup_seconds"], ph["output_dist_seconds"]))


# ---------------------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def spawn(fn, world, cfg):
    import torch.multiprocessing as mp
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    mp.spawn(fn, args=(world, free_port(), cfg, path), nprocs=world, join=True)
    with open(path) as f:
        res = json.load(f)
    os.unlink(path)
    return res


def summarize_bench(res):
    B, W = res["batch_per_rank"], res["world"]
    lines = ["world %d (%d thread(s) per rank, %d samples per rank); plans: torchrec %s; "
             "shardrec %s; create s: torchrec %.1f shardrec %.1f" %
             (W, res["threads_per_rank"], B, res["torchrec_plan"], res["shardrec_plan"],
              res["create_s"]["torchrec"], res["create_s"]["shardrec"])]
    ratios = {}
    for mode, med in res["trials"].items():
        sps = {k: [B * W / t for t in v] for k, v in med.items()}
        per_trial = [s / t for s, t in zip(sps["shardrec"], sps["torchrec"])]
        ratios[mode] = (statistics.median(per_trial), min(per_trial), max(per_trial))
        for k in ("torchrec", "shardrec"):
            ms = [1e3 * t for t in med[k]]
            lines.append("  %-7s %-8s median %8.2f ms (%.2f-%.2f)  %9.0f samples/s" %
                         (mode, k, statistics.median(ms), min(ms), max(ms),
                          statistics.median(sps[k])))
        lines.append("  %-7s ratio shardrec/torchrec samples/s: median %.2fx (trials %s)" %
                     (mode, ratios[mode][0], " ".join("%.2f" % r for r in per_trial)))
    ph = res["phases_ms"]
    lines.append("  shardrec forward phases (rank 0, ms per forward): input_dist %.2f, lookup "
                 "%.2f, output_dist %.2f, of which collectives %.2f, total %.2f" %
                 (ph["input_dist_seconds"], ph["lookup_seconds"], ph["output_dist_seconds"],
                  ph["collective_seconds"], ph["total_seconds"]))
    ph = res.get("step_phases_ms")
    if ph:
        fwd = ph["input_dist_seconds"] + ph["lookup_seconds"] + ph["output_dist_seconds"]
        lines.append("  shardrec step phases (rank 0, ms per step): forward %.2f, backward %.2f "
                     "(%.2fx the forward), collectives %.2f, total %.2f" %
                     (fwd, ph["backward_seconds"], ph["backward_seconds"] / max(1e-9, fwd),
                      ph["collective_seconds"], ph["total_seconds"]))
    return lines, ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--types", help="--check: only these sharding types (comma-separated)")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--shardrec-type", choices=["table_wise", "row_wise", "column_wise"],
                    help="speed: libshardrec's planner may use only this sharding type")
    ap.add_argument("--profile", choices=["torchrec", "shardrec"],
                    help="world 1 only: run only this side's forward --profile-iters times "
                         "(wrap the script in `perf record`)")
    ap.add_argument("--profile-iters", type=int, default=50)
    ap.add_argument("--fbgemm-alone", action="store_true",
                    help="FBGEMM's TBE forward alone vs libshardrec's forward, world 1, "
                         "2 threads then 1")
    args = ap.parse_args()
    import torch
    import torchrec
    lib = sr.Lib()
    print("torch %s, torchrec %s, libshardrec %s (%s)" % (
        torch.__version__, getattr(torchrec, "__version__", "?"), lib.version(),
        sr.find_library()))
    print("load before: %s" % open("/proc/loadavg").read().strip())
    worlds = [int(w) for w in args.worlds.split(",")]
    raw = {}
    misses = 0
    if args.fbgemm_alone:
        for threads in (2, 1):
            print(fbgemm_alone(args.quick, threads, args.trials, args.iters), flush=True)
    elif args.check:
        for w in worlds:
            res = spawn(check_worker, w, {"steps": args.steps, "types": args.types and
                                           args.types.split(",")})
            raw["check_world%d" % w] = res
            print("== agreement, world %d, %d row-wise Adagrad steps (lr %g) ==" %
                  (w, args.steps, LR))
            lines, m = report_check(w, args.steps, res)
            misses += m
            print("\n".join(lines))
        print("libshardrec missed the exact reference in %d case(s)" % misses)
    else:
        for w in worlds:
            res = spawn(bench_worker, w, {"quick": args.quick, "trials": args.trials,
                                          "iters": args.iters, "profile": args.profile,
                                          "profile_iters": args.profile_iters,
                                          "shardrec_type": args.shardrec_type})
            if args.profile:
                print("profile %s forward, world %d: %.2f ms per forward; shardrec phases %s" %
                      (args.profile, w, res["profile_ms"], res["phases_ms"]))
                continue
            raw["bench_world%d" % w] = res
            lines, _ = summarize_bench(res)
            print("\n".join(lines))
            print("load now: %s" % open("/proc/loadavg").read().strip(), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f)
    return 1 if args.check and misses else 0


if __name__ == "__main__":
    sys.exit(main())
