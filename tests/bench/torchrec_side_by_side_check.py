"""The agreement half of torchrec_side_by_side.py (--check): both libraries and a float64
NumPy reference trained on the same small tables, batches and output gradients, for every
sharding type TorchRec runs on CPU; see that script's docstring and torchrec_side_by_side.md."""

import json

import numpy as np

from torchrec_side_by_side_common import (EPS, LR, assemble, kjt_of, log, make_batch, setup,
                                          sr, torchrec_get_states, torchrec_get_weights,
                                          torchrec_model, torchrec_set_weights)

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
