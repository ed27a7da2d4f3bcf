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

LR, EPS = 0.05, 1e-8
BENCH_TABLES = [(1000000, 128), (500000, 64), (200000, 128), (100000, 64), (1000000, 64),
                (300000, 128), (100000, 128), (700000, 64)]  # as embedding_e2e_bench.cc


# ---------------------------------------------------------------------------------------------
# Data: the same arrays feed both libraries.

def bench_tables(quick):
    div = 10 if quick else 1
    return [{"name": "t%d" % i, "rows": r // div, "dim": d, "pooling": "sum",
             "pooling_factor": 20.0} for i, (r, d) in enumerate(BENCH_TABLES)]


def make_batch(tables, B, seed, min_len, max_len, weighted, id_range=None):
    """Feature-major KJT arrays: lengths [F*B] int32, values int64, weights float32 or None."""
    rng = np.random.default_rng(seed)
    lengths, values = [], []
    for t in tables:
        lens = rng.integers(min_len, max_len + 1, size=B).astype(np.int32)
        hi = min(t["rows"], id_range) if id_range else t["rows"]
        values.append(rng.integers(0, hi, size=int(lens.sum())).astype(np.int64))
        lengths.append(lens)
    lengths = np.concatenate(lengths)
    values = np.concatenate(values)
    weights = rng.uniform(0.25, 2.0, size=values.size).astype(np.float32) if weighted else None
    return {"B": B, "F": len(tables), "lengths": lengths, "values": values, "weights": weights}


# ---------------------------------------------------------------------------------------------
# TorchRec side.

def torchrec_model(tables, world, pg, weighted, per_table, meta, init=None):
    """A DMP-wrapped EmbeddingBagCollection with fused row-wise Adagrad. per_table maps each
    table to a sharding type name (check mode, forced per table) or is None (bench mode: the
    TorchRec planner chooses among table/row/column-wise, fused kernel)."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import (EmbeddingShardingPlanner, ParameterConstraints,
                                              Topology)
    from torchrec.distributed.types import ShardingEnv

    class Wrap(torch.nn.Module):
        def __init__(self, ebc):
            super().__init__()
            self.ebc = ebc

        def forward(self, kjt):
            return self.ebc(kjt)

    cfgs = [EmbeddingBagConfig(name=t["name"], embedding_dim=t["dim"],
                               num_embeddings=t["rows"], feature_names=["f_" + t["name"]],
                               pooling=PoolingType.MEAN if t.get("pooling") == "mean"
                               else PoolingType.SUM) for t in tables]
    dev = torch.device("meta") if meta else torch.device("cpu")
    ebc = EmbeddingBagCollection(tables=cfgs, device=dev, is_weighted=weighted)
    if init is not None:
        with torch.no_grad():
            for t in tables:
                ebc.embedding_bags[t["name"]].weight.copy_(torch.from_numpy(init[t["name"]]))
    sharder = EmbeddingBagCollectionSharder(fused_params={
        "optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": LR, "eps": EPS})
    constraints = {}
    for t in tables:
        st = per_table[t["name"]] if per_table else None
        if st is None:
            constraints[t["name"]] = ParameterConstraints(
                sharding_types=["table_wise", "row_wise", "column_wise"],
                compute_kernels=["fused"])
        else:
            kw = {"is_weighted": weighted}
            if st in ("column_wise", "table_column_wise"):
                kw["min_partition"] = t["dim"] // world
            constraints[t["name"]] = ParameterConstraints(
                sharding_types=[st],
                compute_kernels=["dense"] if st == "data_parallel" else ["fused"], **kw)
    B = per_table and 8 or 2048
    topo = Topology(world_size=world, compute_device="cpu", local_world_size=world)
    model = Wrap(ebc)
    forced = per_table and set(per_table.values()) & {"row_wise", "table_row_wise"}
    if forced:
        # TorchRec's EBC sharder offers neither on CPU (only DP, TW, CW, TWCW), so its planner
        # cannot pick them: build the plan by hand to see whether they run anyway.
        from torchrec.distributed.sharding_plan import (construct_module_sharding_plan,
                                                        row_wise, table_row_wise)
        from torchrec.distributed.types import ShardingPlan
        gens = {t["name"]: row_wise(compute_kernel="fused") if per_table[t["name"]] == "row_wise"
                else table_row_wise(host_index=0) for t in tables}
        mplan = construct_module_sharding_plan(ebc, gens, sharder=sharder, local_size=world,
                                               world_size=world, device_type="cpu")
        for ps in mplan.values():  # table_row_wise() takes no kernel and would pick "dense"
            ps.compute_kernel = "fused"
        plan = ShardingPlan({"ebc": mplan})
    else:
        # Every rank plans for itself (deterministic), so a planner error cannot leave a peer
        # waiting in collective_plan's broadcast.
        planner = EmbeddingShardingPlanner(topology=topo, batch_size=B, constraints=constraints)
        plan = planner.plan(model, [sharder])
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan,
                                   env=ShardingEnv.from_process_group(pg), sharders=[sharder])
    kinds = {}
    for name, ps in plan.plan["ebc"].items():
        kinds[name] = "%s/%d" % (ps.sharding_type, len(ps.ranks or []))
    dense_opt = None
    if per_table and any(v == "data_parallel" for v in per_table.values()):
        from torchrec.optim.keyed import KeyedOptimizerWrapper
        from torchrec.optim.optimizers import in_backward_optimizer_filter
        from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
        params = dict(in_backward_optimizer_filter(dmp.named_parameters()))
        if params:
            dense_opt = KeyedOptimizerWrapper(
                params, lambda p: RowWiseAdagrad(p, lr=LR, eps=EPS))
    return dmp, kinds, dense_opt


def kjt_of(batch, tables):
    import torch
    from torchrec import KeyedJaggedTensor
    return KeyedJaggedTensor(
        keys=["f_" + t["name"] for t in tables],
        values=torch.from_numpy(batch["values"]),
        lengths=torch.from_numpy(batch["lengths"]),
        weights=None if batch["weights"] is None else torch.from_numpy(batch["weights"]))


def local_shards(tensor):
    """[(row_off, col_off, array)] of a state_dict entry (ShardedTensor or plain tensor)."""
    if hasattr(tensor, "local_shards"):
        out = []
        for s in tensor.local_shards():
            off = list(s.metadata.shard_offsets) + [0]
            out.append((int(off[0]), int(off[1]) if tensor.dim() > 1 else 0,
                        s.tensor.detach().clone().numpy()))
        return out
    return [(0, 0, tensor.detach().clone().numpy())]


def torchrec_set_weights(dmp, tables, init):
    import torch
    sd = dmp.state_dict()
    with torch.no_grad():
        for t in tables:
            key = [k for k in sd if k.endswith("embedding_bags.%s.weight" % t["name"])][0]
            v = sd[key]
            shards = v.local_shards() if hasattr(v, "local_shards") else None
            if shards is None:
                v.copy_(torch.from_numpy(init[t["name"]]))
                continue
            for s in shards:
                r0, c0 = s.metadata.shard_offsets
                r, c = s.metadata.shard_sizes
                s.tensor.copy_(torch.from_numpy(init[t["name"]][r0:r0 + r, c0:c0 + c]))


def torchrec_get_weights(dmp, tables):
    sd = dmp.state_dict()
    out = {}
    for t in tables:
        key = [k for k in sd if k.endswith("embedding_bags.%s.weight" % t["name"])][0]
        out[t["name"]] = local_shards(sd[key])
    return out


def torchrec_get_states(dmp):
    """Every local optimizer-state shard, by state name: [(row_off, col_off, array)]."""
    out = {}
    try:
        st = dmp.fused_optimizer.state_dict()["state"]
    except Exception as e:  # report, the weights carry the result anyway
        return {"error": str(e)}
    for pkey, d in st.items():
        for skey, v in d.items():
            if hasattr(v, "dim") and v.dim() >= 1:
                out["%s|%s" % (pkey, skey)] = [(a, b, c.tolist()) for a, b, c in local_shards(v)]
    return out


def assemble(parts_by_rank, rows, dim):
    full = np.full((rows, dim), np.nan, dtype=np.float64)
    for parts in parts_by_rank:
        for r0, c0, a in parts:
            a = np.asarray(a)
            if a.ndim == 1:
                a = a[:, None]
            full[r0:r0 + a.shape[0], c0:c0 + a.shape[1]] = a
    return full


# ---------------------------------------------------------------------------------------------
# Worker processes (one per rank; both libraries live in each).

def log(msg):
    if os.environ.get("SBS_VERBOSE"):
        print(msg, file=sys.stderr, flush=True)


def setup(rank, world, port, threads):
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("SHARDREC_SOCKET_IFADDR", "127.0.0.1")
    torch.set_num_threads(threads)
    import datetime
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    pg = dist.group.WORLD
    lib = sr.Lib()

    def bcast(raw):
        obj = [raw]
        dist.broadcast_object_list(obj, src=0)
        return obj[0]
    comm = sr.comm_for_process(lib, world, rank, bcast)
    return torch, dist, pg, lib, comm


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


# ---------------------------------------------------------------------------------------------
# Agreement.

CHECK_TABLES = [{"name": "ts", "rows": 40, "dim": 8, "pooling": "sum"},
                {"name": "tm", "rows": 30, "dim": 16, "pooling": "mean"}]
CHECK_B = 8


def check_types(world):
    if world == 1:
        return ["table_wise", "data_parallel"]
    return ["table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise",
            "data_parallel"]


def check_data(world, steps, weighted):
    init = {t["name"]: np.random.default_rng(7 + i).uniform(-0.5, 0.5, (t["rows"], t["dim"]))
            .astype(np.float32) for i, t in enumerate(CHECK_TABLES)}
    batches = [[make_batch(CHECK_TABLES, CHECK_B, 500 + 100 * s + r, 0, 6, weighted, 12)
                for r in range(world)] for s in range(steps)]
    width = sum(t["dim"] for t in CHECK_TABLES)
    grads = [[np.random.default_rng(900 + 100 * s + r).uniform(-1, 1, (CHECK_B, width))
              .astype(np.float32) for r in range(world)] for s in range(steps)]
    return init, batches, grads


def check_worker(rank, world, port, cfg, outpath):
    torch, dist, pg, lib, comm = setup(rank, world, port, 1)
    steps = cfg["steps"]
    results = {}
    for weighted in (False, True):
        init, batches, grads = check_data(world, steps, weighted)
        for st in check_types(world):
            if cfg.get("types") and st not in cfg["types"]:
                continue
            key = "%s|%s" % (st, "weighted" if weighted else "unweighted")
            res = {}
            log("rank %d: %s torchrec" % (rank, key))
            try:
                per_table = {t["name"]: st for t in CHECK_TABLES}
                dmp, kinds, dense_opt = torchrec_model(CHECK_TABLES, world, pg, weighted,
                                                       per_table, meta=False, init=init)
                torchrec_set_weights(dmp, CHECK_TABLES, init)
                res["torchrec_plan"] = kinds
                res["torchrec_kernels"] = {
                    n: ps.compute_kernel for n, ps in dmp.plan.plan["ebc"].items()}
                outs = []
                for s in range(steps):
                    kt = dmp(kjt_of(batches[s][rank], CHECK_TABLES))
                    d = kt.to_dict()
                    vals = torch.cat([d["f_" + t["name"]] for t in CHECK_TABLES], dim=1)
                    outs.append(vals.detach().numpy().copy())
                    vals.backward(torch.from_numpy(grads[s][rank]))
                    if dense_opt is not None:
                        dense_opt.step()
                        dense_opt.zero_grad()
                res["torchrec_out"] = [o.tolist() for o in outs]
                parts = torchrec_get_weights(dmp, CHECK_TABLES)
                res["torchrec_w"] = {k: [(a, b, c.tolist()) for a, b, c in v]
                                     for k, v in parts.items()}
                res["torchrec_state"] = torchrec_get_states(dmp)
                del dmp
            except Exception as e:
                res["torchrec_error"] = "%s: %s" % (type(e).__name__, e)
            log("rank %d: %s shardrec (torchrec: %s)" %
                (rank, key, res.get("torchrec_error", "ok")))
            dist.barrier()
            try:
                cons = {}
                for i, t in enumerate(CHECK_TABLES):
                    if st == "table_wise":
                        cons[t["name"]] = (st, [i % world])
                    elif st in ("column_wise", "table_column_wise"):
                        cons[t["name"]] = (st, list(range(world)))
                    else:
                        cons[t["name"]] = (st, None)
                plan = sr.Plan(lib, CHECK_TABLES, world, CHECK_B, constraints=cons)
                res["shardrec_plan"] = plan.describe()
                coll = sr.Collection(lib, plan, comm, 1, LR, EPS)
                for t in CHECK_TABLES:
                    coll.set_weights(t["name"], init[t["name"]])
                outs = []
                for s in range(steps):
                    o = np.zeros((CHECK_B, coll.dim), dtype=np.float32)
                    coll.forward(batches[s][rank], o)
                    outs.append(o)
                    coll.backward(grads[s][rank])
                res["shardrec_out"] = [o.tolist() for o in outs]
                res["shardrec_w"] = {t["name"]: coll.get_weights(t["name"], t["rows"], t["dim"])
                                     .tolist() for t in CHECK_TABLES}
                res["shardrec_state"] = {t["name"]: coll.get_state(t["name"], t["rows"]).tolist()
                                         for t in CHECK_TABLES}
                coll.destroy()
                plan.destroy()
            except Exception as e:
                res["shardrec_error"] = "%s: %s" % (type(e).__name__, e)
            dist.barrier()
            gathered = [None] * world
            dist.all_gather_object(gathered, res)
            if rank == 0:
                results[key] = gathered
    if rank == 0:
        with open(outpath, "w") as f:
            json.dump(results, f)
    dist.barrier()
    lib.so.shardrec_comm_destroy(comm)
    dist.destroy_process_group()


def reference(world, steps, weighted, init, batches, grads, state_blocks=None,
              mean_rule="weight_sum"):
    """float64 forward outputs per step/rank and final weights. mean_rule 'weight_sum': MEAN
    divides by the bag's weight sum (by its length unweighted) and the gradient follows;
    'count_nodiv': the forward divides the weighted sum by the id count and the backward drops
    the division (the TorchRec behaviour under test); 'count_div': the forward divides by the
    id count and the backward is its gradient (to tell the two apart). state_blocks:
    {table: [col widths]} for a row-wise Adagrad statistic per column block (default: one per
    full row). The gradient rule divides the summed row gradient by the world size."""
    W = {k: v.astype(np.float64) for k, v in init.items()}
    S = {t["name"]: np.zeros((t["rows"], len((state_blocks or {}).get(t["name"], [t["dim"]]))))
         for t in CHECK_TABLES}
    outs = []
    for s in range(steps):
        step_out = []
        G = {t["name"]: np.zeros_like(W[t["name"]]) for t in CHECK_TABLES}
        touched = {t["name"]: set() for t in CHECK_TABLES}
        for r in range(world):
            b = batches[s][r]
            out = np.zeros((CHECK_B, sum(t["dim"] for t in CHECK_TABLES)))
            pos, col = 0, 0
            for f, t in enumerate(CHECK_TABLES):
                name, d = t["name"], t["dim"]
                for i in range(CHECK_B):
                    n = int(b["lengths"][f * CHECK_B + i])
                    ids = b["values"][pos:pos + n]
                    w = (b["weights"][pos:pos + n].astype(np.float64) if b["weights"] is not None
                         else np.ones(n))
                    pos += n
                    acc = (w[:, None] * W[name][ids]).sum(0) if n else np.zeros(d)
                    div_f = div_b = 1.0
                    if t["pooling"] == "mean" and n:
                        if mean_rule == "weight_sum" or b["weights"] is None:
                            div_f = div_b = w.sum() if b["weights"] is not None else float(n)
                        elif mean_rule == "count_div":
                            div_f = div_b = float(n)
                        else:
                            div_f, div_b = float(n), 1.0
                    out[i, col:col + d] = acc / div_f if div_f != 0 else 0.0
                    g = grads[s][r][i, col:col + d].astype(np.float64)
                    for j, idx in enumerate(ids):
                        G[name][idx] += w[j] * g / div_b
                        touched[name].add(int(idx))
                col += d
            step_out.append(out)
        outs.append(step_out)
        for t in CHECK_TABLES:
            name = t["name"]
            blocks = (state_blocks or {}).get(name, [t["dim"]])
            for idx in touched[name]:
                g = G[name][idx] / world
                c0 = 0
                for k, wdt in enumerate(blocks):
                    gb = g[c0:c0 + wdt]
                    S[name][idx, k] += np.mean(gb * gb)
                    W[name][idx, c0:c0 + wdt] -= LR * gb / (np.sqrt(S[name][idx, k]) + EPS)
                    c0 += wdt
    return outs, W


def max_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def report_check(world, steps, results):
    """Report lines, and the number of cases where libshardrec misses the exact reference."""
    lines, misses = [], 0
    for key, per_rank in results.items():
        st, wk = key.split("|")
        weighted = wk == "weighted"
        init, batches, grads = check_data(world, steps, weighted)
        r0 = per_rank[0]
        if "torchrec_error" in r0 and "shardrec_error" in r0:
            lines.append("%-18s %-10s both failed: torchrec %s; shardrec %s" %
                         (st, wk, r0["torchrec_error"][:150], r0["shardrec_error"][:150]))
            continue
        variants = {"exact": reference(world, steps, weighted, init, batches, grads)}
        if st in ("column_wise", "table_column_wise"):
            blocks = {t["name"]: [t["dim"] // world] * world for t in CHECK_TABLES}
            variants["stat_per_col_shard"] = reference(world, steps, weighted, init, batches,
                                                       grads, state_blocks=blocks)
        if weighted:
            variants["mean_count_nodiv"] = reference(world, steps, weighted, init, batches,
                                                     grads, mean_rule="count_nodiv")
            variants["mean_count_div"] = reference(world, steps, weighted, init, batches,
                                                   grads, mean_rule="count_div")
            if "stat_per_col_shard" in variants:
                variants["both"] = reference(world, steps, weighted, init, batches, grads,
                                             state_blocks=blocks, mean_rule="count_nodiv")
        for lib_name in ("shardrec", "torchrec"):
            if lib_name + "_error" in r0:
                lines.append("%-18s %-10s %-8s ERROR %s" % (st, wk, lib_name,
                                                          r0[lib_name + "_error"][:300]))
                misses += lib_name == "shardrec"
                continue
            errs = {}
            for vname, (outs, W) in variants.items():
                e_out = max(max_err(per_rank[r][lib_name + "_out"][s], outs[s][r])
                            for r in range(world) for s in range(steps))
                e_w = 0.0
                for t in CHECK_TABLES:
                    if lib_name == "shardrec":
                        got = np.asarray(r0["shardrec_w"][t["name"]])
                    else:
                        parts = [per_rank[r]["torchrec_w"][t["name"]] for r in range(world)]
                        if st == "data_parallel":
                            parts = parts[:1]
                        got = assemble(parts, t["rows"], t["dim"])
                    e_w = max(e_w, max_err(got, W[t["name"]]))
                errs[vname] = (e_out, e_w)
            best = min(errs, key=lambda v: max(errs[v]))
            if lib_name == "shardrec" and max(errs["exact"]) >= 1e-4:
                misses += 1
            plan = r0.get(lib_name + "_plan", {})
            detail = " ".join("%s: out %.1e w %.1e" % (v, e[0], e[1]) for v, e in errs.items())
            lines.append("%-18s %-10s %-8s matches %-18s (out %.1e, weights %.1e) | %s | plan %s" %
                         (st, wk, lib_name, best if max(errs[best]) < 1e-4 else "NONE",
                          errs[best][0], errs[best][1], detail, plan))
        if "torchrec_out" in r0 and "shardrec_out" in r0:
            e = max(max_err(per_rank[r]["torchrec_out"][s], per_rank[r]["shardrec_out"][s])
                    for r in range(world) for s in range(steps))
            lines.append("%-18s %-10s torchrec vs shardrec outputs: max |diff| %.2e" % (st, wk, e))
    return lines, misses


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
