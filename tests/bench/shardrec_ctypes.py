"""Minimal ctypes binding of the libshardrec C API for the side-by-side benchmark.

Only what torchrec_side_by_side.py needs: plans with per-table constraints, communicators
(unique id between processes), collections, forward / backward, weights and optimizer state,
step timings. Struct layouts follow capi/include/shardrec/{config,comm,embedding,tensor}.h; each
struct is filled by its library `_init` function first, so defaults come from the library.
ctypes releases the GIL around every foreign call, so ranks may also be Python threads.
"""
import ctypes as C
import os

import numpy as np

DTYPE_FLOAT32, DTYPE_INT64 = 0, 5
POOLING_SUM, POOLING_MEAN = 0, 1
OPT_ROWWISE_ADAGRAD = 2
SHARDING = {"data_parallel": 0, "table_wise": 1, "row_wise": 2, "column_wise": 3,
            "table_row_wise": 4, "table_column_wise": 5}


class FeatureConfig(C.Structure):
    _fields_ = [("version", C.c_uint32), ("name", C.c_char_p), ("pooling_factor", C.c_float)]


class OptimizerConfig(C.Structure):
    _fields_ = [("version", C.c_uint32), ("type", C.c_int32), ("learning_rate", C.c_float),
                ("eps", C.c_float), ("beta1", C.c_float), ("beta2", C.c_float),
                ("weight_decay", C.c_float), ("weight_decay_mode", C.c_int32),
                ("stochastic_rounding", C.c_int32)]


class TableConfig(C.Structure):
    _fields_ = [("version", C.c_uint32), ("name", C.c_char_p), ("rows", C.c_int64),
                ("dim", C.c_int32), ("pooling", C.c_int32), ("dtype", C.c_int32),
                ("features", C.POINTER(C.c_int32)), ("num_features", C.c_size_t),
                ("init_kind", C.c_int32), ("init_low", C.c_float), ("init_high", C.c_float),
                ("optimizer", C.POINTER(OptimizerConfig)),
                ("feature_names", C.POINTER(C.c_char_p)), ("num_feature_names", C.c_size_t)]


class Topology(C.Structure):
    _fields_ = [("version", C.c_uint32), ("world_size", C.c_int32),
                ("ranks_per_node", C.c_int32), ("device_type", C.c_int32),
                ("memory_bytes", C.c_uint64), ("memory_bytes_per_rank", C.POINTER(C.c_uint64)),
                ("num_memory_bytes_per_rank", C.c_size_t), ("intra_node_bandwidth", C.c_double),
                ("inter_node_bandwidth", C.c_double), ("batch_size", C.c_int32),
                ("optimizer", C.c_int32), ("memory_bandwidth", C.c_double),
                ("reserved_fraction", C.c_double)]


class TableConstraints(C.Structure):
    _fields_ = [("version", C.c_uint32), ("table", C.c_char_p), ("sharding_types", C.c_uint32),
                ("min_partition", C.c_int32), ("ranks", C.POINTER(C.c_int32)),
                ("num_ranks", C.c_size_t), ("pooling_factors", C.POINTER(C.c_float)),
                ("num_pooling_factors", C.c_size_t)]


class EmbeddingOptions(C.Structure):
    _fields_ = [("version", C.c_uint32), ("seed", C.c_uint64), ("bounds_policy", C.c_int32),
                ("num_threads", C.c_int32), ("dp_comm", C.c_void_p), ("device_type", C.c_int32),
                ("device_index", C.c_int32), ("non_finite", C.c_int32),
                ("table_memory", C.c_int32)]


class KjtView(C.Structure):
    _fields_ = [("batch_size", C.c_int64), ("num_features", C.c_size_t),
                ("lengths", C.c_void_p), ("num_lengths", C.c_size_t), ("values", C.c_void_p),
                ("values_dtype", C.c_int32), ("num_values", C.c_size_t), ("weights", C.c_void_p),
                ("num_weights", C.c_size_t), ("device_type", C.c_int32),
                ("device_index", C.c_int32)]


class UniqueId(C.Structure):
    _fields_ = [("internal", C.c_char * 128)]


class StepTimings(C.Structure):
    _fields_ = [("version", C.c_uint32), ("forwards", C.c_int64), ("backwards", C.c_int64),
                ("samples", C.c_int64), ("total_seconds", C.c_double),
                ("collective_seconds", C.c_double), ("input_dist_seconds", C.c_double),
                ("lookup_seconds", C.c_double), ("output_dist_seconds", C.c_double),
                ("backward_seconds", C.c_double)]


def find_library():
    env = os.environ.get("SHARDREC_LIB")
    if env:
        return env
    root = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    for cand in ("build/capi/libshardrec.so", "build/libshardrec.so", "build/lib/libshardrec.so"):
        p = os.path.join(root, cand)
        if os.path.exists(p):
            return p
    raise FileNotFoundError("libshardrec.so not found under build/; set SHARDREC_LIB")


class Lib:
    """The loaded library; every call is checked and raises RuntimeError with the message."""

    def __init__(self, path=None):
        self.so = C.CDLL(path or find_library())
        self.so.shardrec_last_error.restype = C.c_char_p
        self.so.shardrec_version_string.restype = C.c_char_p

    def version(self):
        return self.so.shardrec_version_string().decode()

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError("%s: %d %s" % (what, rc, self.so.shardrec_last_error().decode()))

    def __getattr__(self, name):  # shardrec_xxx(...) checked: lib.xxx(...)
        fn = getattr(self.so, "shardrec_" + name)

        def call(*args):
            self.check(fn(*args), name)
        return call


class Plan:
    """A plan for `tables` (dicts: name, rows, dim, pooling 'sum'|'mean'), one feature per
    table (feature name = 'f_' + table name), with optional per-table constraints
    {table: (sharding_type_name, [ranks] or None)}."""

    def __init__(self, lib, tables, world, batch, constraints=None, exclude_dp=False,
                 ranks_per_node=0):
        self.lib = lib
        n = len(tables)
        self._keep = []
        feats = (FeatureConfig * n)()
        tabs = (TableConfig * n)()
        self.feature_idx = (C.c_int32 * n)(*range(n))
        for i, t in enumerate(tables):
            lib.feature_config_init(C.byref(feats[i]), 1)
            fname = ("f_" + t["name"]).encode()
            tname = t["name"].encode()
            self._keep += [fname, tname]
            feats[i].name = fname
            feats[i].pooling_factor = float(t.get("pooling_factor", 1.0))
            lib.table_config_init(C.byref(tabs[i]), 2)
            tabs[i].name = tname
            tabs[i].rows = t["rows"]
            tabs[i].dim = t["dim"]
            tabs[i].pooling = POOLING_MEAN if t.get("pooling") == "mean" else POOLING_SUM
            tabs[i].features = C.cast(C.addressof(self.feature_idx) + 4 * i, C.POINTER(C.c_int32))
            tabs[i].num_features = 1
        topo = Topology()
        lib.topology_init(C.byref(topo), 1)
        topo.world_size = world
        topo.ranks_per_node = ranks_per_node
        topo.batch_size = batch
        topo.optimizer = OPT_ROWWISE_ADAGRAD
        cons = []
        for t in tables:
            c = constraints.get(t["name"]) if constraints else None
            if c is None and not exclude_dp:
                continue
            tc = TableConstraints()
            lib.table_constraints_init(C.byref(tc), 1)
            tc.table = t["name"].encode()
            self._keep.append(tc.table)
            if c is None:  # every model-parallel type but TWRW/TWCW/grid: TW, RW, CW
                tc.sharding_types = (1 << 1) | (1 << 2) | (1 << 3)
            else:
                tc.sharding_types = 1 << SHARDING[c[0]]
                if c[1]:
                    arr = (C.c_int32 * len(c[1]))(*c[1])
                    self._keep.append(arr)
                    tc.ranks = C.cast(arr, C.POINTER(C.c_int32))
                    tc.num_ranks = len(c[1])
            cons.append(tc)
        carr = (TableConstraints * len(cons))(*cons) if cons else None
        self.ptr = C.c_void_p()
        lib.plan_create(C.byref(self.ptr), tabs, C.c_size_t(n), feats, C.c_size_t(n), C.byref(topo),
                        carr, C.c_size_t(len(cons)))

    def describe(self):
        """{table: sharding type name} of the plan."""
        names = {v: k for k, v in SHARDING.items()}
        n = C.c_size_t()
        self.lib.plan_num_tables(self.ptr, C.byref(n))
        out = {}
        for i in range(n.value):
            name = C.c_char_p()
            self.lib.plan_table_name(self.ptr, C.c_size_t(i), C.byref(name))
            ty = C.c_int32()
            ns = C.c_size_t()
            self.lib.plan_table_sharding(self.ptr, C.c_size_t(i), C.byref(ty), C.byref(ns))
            out[name.value.decode()] = "%s/%d" % (names.get(ty.value, str(ty.value)), ns.value)
        return out

    def destroy(self):
        self.lib.so.shardrec_plan_destroy(self.ptr)


def comm_for_process(lib, world, rank, broadcast_id):
    """A communicator between processes: rank 0 makes the unique id, `broadcast_id(bytes or
    None) -> bytes` ships it (the benchmark uses torch.distributed)."""
    uid = UniqueId()
    if rank == 0:
        lib.comm_unique_id_create(C.byref(uid))
        raw = broadcast_id(C.string_at(C.addressof(uid), 128))
    else:
        raw = broadcast_id(None)
    C.memmove(C.addressof(uid), raw, 128)
    comm = C.c_void_p()
    lib.comm_create(C.byref(comm), C.byref(uid), world, rank, None)
    return comm


def local_group(lib, world):
    arr = (C.c_void_p * world)()
    lib.comm_create_local_group(arr, world, None)
    return [C.c_void_p(arr[i]) for i in range(world)]


class Collection:
    def __init__(self, lib, plan, comm, threads, lr, eps, seed=0):
        self.lib = lib
        opt = OptimizerConfig()
        lib.optimizer_config_init(C.byref(opt), 1)
        opt.type = OPT_ROWWISE_ADAGRAD
        opt.learning_rate = lr
        opt.eps = eps
        o = EmbeddingOptions()
        lib.embedding_options_init(C.byref(o), 2)
        o.num_threads = threads
        o.seed = seed
        self.ptr = C.c_void_p()
        lib.embedding_create(C.byref(self.ptr), plan.ptr, comm, C.byref(opt), C.byref(o))
        d = C.c_int64()
        lib.embedding_output_dim(self.ptr, C.byref(d))
        self.dim = d.value

    def forward(self, batch, out):
        """batch: dict with numpy lengths (int32), values (int64), weights (float32|None), B."""
        v = KjtView()
        v.batch_size = batch["B"]
        v.num_features = batch["F"]
        v.lengths = batch["lengths"].ctypes.data
        v.num_lengths = batch["lengths"].size
        v.values = batch["values"].ctypes.data
        v.values_dtype = DTYPE_INT64
        v.num_values = batch["values"].size
        if batch.get("weights") is not None:
            v.weights = batch["weights"].ctypes.data
            v.num_weights = batch["weights"].size
        self.lib.embedding_forward(self.ptr, C.byref(v), out.ctypes.data_as(C.c_void_p),
                                   C.c_size_t(out.size), None)

    def backward(self, grad):
        self.lib.embedding_backward(self.ptr, grad.ctypes.data_as(C.c_void_p),
                                    C.c_size_t(grad.size), None)

    def get_weights(self, table, rows, dim):
        out = np.empty((rows, dim), dtype=np.float32)
        self.lib.embedding_get_weights(self.ptr, table.encode(), out.ctypes.data_as(C.c_void_p),
                                       C.c_size_t(out.size))
        return out

    def set_weights(self, table, w):
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.lib.embedding_set_weights(self.ptr, table.encode(), w.ctypes.data_as(C.c_void_p),
                                       C.c_size_t(w.size))

    def get_state(self, table, rows):
        out = np.empty(rows, dtype=np.float32)
        self.lib.embedding_get_state(self.ptr, table.encode(), b"momentum1",
                                     out.ctypes.data_as(C.c_void_p), C.c_size_t(out.size))
        return out

    def timings(self):
        t = StepTimings()
        self.lib.step_timings_init(C.byref(t), 1)
        self.lib.embedding_step_timings(self.ptr, C.byref(t))
        return {f: getattr(t, f) for f, _ in StepTimings._fields_[1:]}

    def destroy(self):
        self.lib.so.shardrec_embedding_destroy(self.ptr)


# ---- Serving (shardrec/inference.h), for fbgemm_inference_side_by_side.py ----------------------

SERVING = {"as_trained": 0, "fp32": 1, "fp16": 2, "bf16": 3, "int8": 4, "int4": 5}


class InferenceOptions(C.Structure):
    _fields_ = [("version", C.c_uint32), ("default_storage", C.c_int32),
                ("table_storage", C.c_void_p), ("num_table_storage", C.c_size_t),
                ("bounds_policy", C.c_int32), ("device_type", C.c_int32)]


def checkpoint_save(lib, coll, directory):
    """shardrec_checkpoint_save without dense tensors (collective; world 1 here)."""
    lib.checkpoint_save(coll.ptr, directory.encode(), None)


class Inference:
    """A read-only inference handle opened from a checkpoint or serving file with every table
    stored as `storage` (a SERVING key). lookup() may be called from several Python threads at
    once: ctypes releases the GIL around the call and the handle has no lock on its read path."""

    def __init__(self, lib, path, storage):
        self.lib = lib
        o = InferenceOptions()
        lib.inference_options_init(C.byref(o), 1)
        o.default_storage = SERVING[storage]
        self.ptr = C.c_void_p()
        lib.inference_open(path.encode(), C.byref(o), C.byref(self.ptr))
        d = C.c_int64()
        lib.inference_output_dim(self.ptr, C.byref(d))
        self.dim = d.value
        self._lookup = lib.so.shardrec_inference_lookup
        self._lookup.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p]

    @staticmethod
    def view(batch):
        """A KjtView over `batch` (as Collection.forward takes it); keep `batch` alive."""
        v = KjtView()
        v.batch_size = batch["B"]
        v.num_features = batch["F"]
        v.lengths = batch["lengths"].ctypes.data
        v.num_lengths = batch["lengths"].size
        v.values = batch["values"].ctypes.data
        v.values_dtype = DTYPE_INT64
        v.num_values = batch["values"].size
        return v

    def lookup(self, view, out):
        """Pooled output of a prepared view into `out` (float32, B * dim); raises on error."""
        rc = self._lookup(self.ptr, C.addressof(view), out.ctypes.data, out.size, None)
        if rc != 0:
            self.lib.check(rc, "inference_lookup")

    def destroy(self):
        self.lib.so.shardrec_inference_destroy(self.ptr)
