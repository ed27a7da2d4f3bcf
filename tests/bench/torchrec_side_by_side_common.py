"""Shared by torchrec_side_by_side.py and torchrec_side_by_side_check.py: the batches both
libraries are fed, TorchRec's sharded model and its weights and states, and the per-rank process
setup (torch.distributed over gloo beside a libshardrec communicator)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardrec_ctypes as sr  # noqa: E402

LR, EPS = 0.05, 1e-8

# ---------------------------------------------------------------------------------------------
# Data: the same arrays feed both libraries.

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
