#!/usr/bin/env python3
"""Reads libshardrec's checkpoint files without libshardrec.

Usage: read_with_safetensors.py DIR, where DIR holds what checkpoint_python_test.cc wrote:
t1.safetensors (a table export), ckpt/ (a sharded checkpoint: manifest.json and per-rank
safetensors files) and <table>.<tensor>.f32 (the expected values, raw little-endian fp32), and
ckpt_fp8/ (FP8 tables, their rows as U8 records) with fp8.<table>.weights.f32.
read_with_safetensors.py --dynamic DIR reads what dynamic_checkpoint_test.cc wrote instead: ckpt/
with dynamic tables, and per table <table>.ids.i64, <table>.rows.f32 (the expected row of each
of those ids) and <table>.size (how many of them the checkpoint holds).

Opens every file with the `safetensors` package (numpy backend) and checks: the export's tensors
equal the expected values; every rank file's tensors match the manifest (dtype, shape, byte
range); and each table's weights and optimizer states reassembled from the records (placed by
their offsets) equal the expected values bit for bit. When the package is not installed it
falls back to a plain reader of the layout (8-byte header length, JSON header, raw tensors) and
says so; the checks are the same.
"""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    # ctest reports this as skipped (SKIP_REGULAR_EXPRESSION); .ci/install-deps installs numpy.
    print("SKIP: numpy not installed")
    sys.exit(0)

try:
    import ml_dtypes  # noqa: F401  (bf16 support for numpy, if present)
except ImportError:
    ml_dtypes = None

try:
    from safetensors import safe_open

    HAVE_SAFETENSORS = True
except ImportError:
    HAVE_SAFETENSORS = False

NP_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
             "U8": np.uint8}
INT_DTYPES = ("I64", "I32", "U8")


def bf16_to_f32(raw_u16):
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def read_plain(path):
    """The safetensors layout read by hand: {name: (dtype, shape, raw bytes)}."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), data[b:e])
    return out, header


def as_f32(dtype, shape, raw):
    """fp32 for float tensors; integer tensors (a dynamic table's ids and metadata) stay int."""
    if dtype in INT_DTYPES:
        return np.frombuffer(raw, dtype=np.dtype(NP_DTYPES[dtype]).newbyteorder("<")).reshape(shape)
    if dtype == "BF16":
        return bf16_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
    return np.frombuffer(raw, dtype=NP_DTYPES[dtype]).astype(np.float32).reshape(shape)


def load_tensors(path):
    """{name: fp32 numpy array}, through the safetensors package when available."""
    plain, header = read_plain(path)
    out = {}
    if HAVE_SAFETENSORS:
        # numpy has no bfloat16: BF16 tensors are read through the package's byte view when
        # numpy cannot hold them, and checked against the plain bytes.
        with safe_open(path, framework="numpy") as f:
            keys = set(f.keys())
            assert keys == set(plain), (path, keys, set(plain))
            for name in keys:
                dtype, shape, raw = plain[name]
                if dtype == "BF16":
                    sl = f.get_slice(name)
                    assert tuple(sl.get_shape()) == shape, (name, sl.get_shape(), shape)
                    assert sl.get_dtype() == "BF16", sl.get_dtype()
                    out[name] = as_f32(dtype, shape, raw)
                else:
                    t = f.get_tensor(name)
                    assert t.shape == shape, (name, t.shape, shape)
                    out[name] = t if dtype in INT_DTYPES else t.astype(np.float32)
                    assert np.array_equal(out[name], as_f32(dtype, shape, raw), equal_nan=True)
    else:
        for name, (dtype, shape, raw) in plain.items():
            out[name] = as_f32(dtype, shape, raw)
    return out, header


def fp8_values(e4m3):
    """The value of each of the 256 OCP FP8 codes, from the format's definition (E4M3 "FN": bias
    7, 3 mantissa bits, 0x7F/0xFF NaN, no infinities; E5M2: bias 15, 2 mantissa bits, IEEE-like)."""
    mant_bits, bias = (3, 7) if e4m3 else (2, 15)
    out = np.empty(256, np.float64)
    for c in range(256):
        sign = -1.0 if c & 0x80 else 1.0
        exp, mant = (c & 0x7F) >> mant_bits, c & ((1 << mant_bits) - 1)
        if e4m3 and (c & 0x7F) == 0x7F:
            out[c] = np.nan
        elif not e4m3 and exp == 31:
            out[c] = sign * np.inf if mant == 0 else np.nan
        elif exp == 0:
            out[c] = sign * mant * 2.0 ** (1 - bias - mant_bits)
        else:
            out[c] = sign * (1 + mant / 2.0 ** mant_bits) * 2.0 ** (exp - bias)
    return out


def decode_fp8_rows(raw_u8, dtype):
    """An FP8 record's rows (docs/checkpoint-format.md, FP8 records): a little-endian fp32
    power-of-two scale, then one code a value; value = code's value x scale (exact in fp32)."""
    rows = np.ascontiguousarray(raw_u8)
    scale = rows[:, :4].copy().view("<f4")[:, 0].astype(np.float64)
    mant = np.frexp(scale)[0]
    assert np.all(mant == 0.5), "an FP8 row scale is not a power of two"
    values = fp8_values(dtype == "fp8_e4m3")[rows[:, 4:]]
    return (values * scale[:, None]).astype(np.float32)


def main_fp8(d):
    """ckpt_fp8: every FP8 table's rows decoded from its U8 records, against the expected values."""
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    assert manifest["format_version"] == 3, manifest["format_version"]
    tables = {t["name"]: t for t in manifest["tables"]}
    full = {n: np.full((t["rows"], t["dim"]), np.nan, np.float32) for n, t in tables.items()}
    records = 0
    for f in manifest["files"]:
        tensors, header = load_tensors(os.path.join(d, f["name"]))
        for rec in f["records"]:
            if rec["tensor"] != "weights":
                continue
            assert rec["dtype"] == tables[rec["table"]]["dtype"], rec["key"]
            assert rec["dtype"] in ("fp8_e4m3", "fp8_e5m2"), rec["key"]
            rows, cols = rec["shape"]
            info = header[rec["key"]]
            assert info["dtype"] == "U8" and info["shape"] == [rows, cols + 4], (rec["key"], info)
            r0, c0 = rec["offsets"]
            target = full[rec["table"]]
            assert np.isnan(target[r0:r0 + rows, c0:c0 + cols]).all(), f"overlap at {rec['key']}"
            target[r0:r0 + rows, c0:c0 + cols] = decode_fp8_rows(
                tensors[rec["key"]].reshape(rows, cols + 4), rec["dtype"])
            records += 1
    for name, arr in full.items():
        assert not np.isnan(arr).any(), f"{name} weights not covered"
        want = np.fromfile(os.path.join(d, "..", f"fp8.{name}.weights.f32"), dtype="<f4")
        assert bits_equal(arr, want.reshape(arr.shape)), f"FP8 table {name}"
    print(f"ok: {records} FP8 records decode to the trained rows")


def expected(d, table, tensor, shape):
    return np.fromfile(os.path.join(d, f"{table}.{tensor}.f32"), dtype="<f4").reshape(shape)


def bits_equal(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def main_dynamic(d):
    """Each dynamic table's id -> row map from its records, against the expected rows."""
    print("reader:", "safetensors package" if HAVE_SAFETENSORS else "plain Python reader")
    manifest = json.load(open(os.path.join(d, "ckpt", "manifest.json")))
    tables = {t["name"]: t for t in manifest["tables"] if t.get("dynamic")}
    assert tables, "no dynamic table in the manifest"
    # Per table and row block (its first row): the ids, and the weights by column offset.
    ids, cols = {}, {}
    for f in manifest["files"]:
        tensors, header = load_tensors(os.path.join(d, "ckpt", f["name"]))
        for rec in f["records"]:
            if rec["table"] not in tables:
                continue
            block = (rec["table"], rec["offsets"][0])
            if rec["tensor"] == "ids":
                assert block not in ids, f"two ids records for {block}"
                ids[block] = tensors[rec["key"]]
            elif rec["tensor"] == "weights":
                rows, ncols = rec["shape"]
                cols.setdefault(block, {})[rec["offsets"][1]] = tensors[rec["key"]].reshape(
                    rows, ncols)
    checked = 0
    for name, t in tables.items():
        got = {}
        for (table, first), block_ids in ids.items():
            if table != name:
                continue
            parts = cols[(table, first)]
            rows = np.concatenate([parts[c] for c in sorted(parts)], axis=1)
            assert rows.shape == (len(block_ids), t["dim"]), (name, first, rows.shape)
            for i, x in enumerate(block_ids.tolist()):
                assert x not in got, f"{name}: id {x} saved twice"
                got[x] = rows[i]
        want_ids = np.fromfile(os.path.join(d, f"{name}.ids.i64"), dtype="<i8")
        want_rows = np.fromfile(os.path.join(d, f"{name}.rows.f32"), dtype="<f4").reshape(
            len(want_ids), t["dim"])
        want = dict(zip(want_ids.tolist(), want_rows))
        size = int(open(os.path.join(d, f"{name}.size")).read())
        assert len(got) == size, f"{name}: {len(got)} rows saved, {size} expected"
        for x, row in got.items():
            assert x in want, f"{name}: id {x} was never trained"
            assert bits_equal(row, want[x]), f"{name}: row of id {x}"
        checked += len(got)
    print(f"ok: {checked} rows of {len(tables)} dynamic tables match by id")


def main():
    if sys.argv[1] == "--dynamic":
        main_dynamic(sys.argv[2])
        return
    d = sys.argv[1]
    print("reader:", "safetensors package" if HAVE_SAFETENSORS else "plain Python reader")
    manifest = json.load(open(os.path.join(d, "ckpt", "manifest.json")))
    tables = {t["name"]: t for t in manifest["tables"]}

    # 1. The export of t1: weights and both states, fp32.
    t1 = tables["t1"]
    exp, header = load_tensors(os.path.join(d, "t1.safetensors"))
    assert header["__metadata__"]["table"] == "t1"
    shapes = {"weights": (t1["rows"], t1["dim"]), "momentum1": (t1["rows"], t1["dim"]),
              "momentum2": (t1["rows"],)}
    for tensor, shape in shapes.items():
        assert bits_equal(exp[tensor], expected(d, "t1", tensor, shape)), f"export {tensor}"

    # 2. The sharded checkpoint: reassemble every table's tensors from the rank files.
    full = {}
    for name, t in tables.items():
        full[(name, "weights")] = np.full((t["rows"], t["dim"]), np.nan, np.float32)
        for s in t["states"]:
            shape = (t["rows"], 1) if s["row_wise"] else (t["rows"], t["dim"])
            full[(name, s["name"])] = np.full(shape, np.nan, np.float32)
    records = 0
    for f in manifest["files"]:
        path = os.path.join(d, "ckpt", f["name"])
        assert os.path.getsize(path) == f["size"], path
        tensors, header = load_tensors(path)
        for rec in f["records"]:
            info = header[rec["key"]]
            rows, cols = rec["shape"]
            want_shape = [rows] if rec["vector"] else [rows, cols]
            assert info["shape"] == want_shape, (rec["key"], info["shape"], want_shape)
            assert info["dtype"] == {"float32": "F32", "float16": "F16",
                                     "bfloat16": "BF16"}[rec["dtype"]], rec["key"]
            b, e = rec["byte_range"]
            db, de = info["data_offsets"]
            assert e - b == de - db, rec["key"]
            r0, c0 = rec["offsets"]
            block = tensors[rec["key"]].reshape(rows, cols)
            target = full[(rec["table"], rec["tensor"])]
            assert np.isnan(target[r0:r0 + rows, c0:c0 + cols]).all(), f"overlap at {rec['key']}"
            target[r0:r0 + rows, c0:c0 + cols] = block
            records += 1
    for (name, tensor), arr in full.items():
        t = tables[name]
        shape = (t["rows"],) if arr.shape[1] == 1 and tensor != "weights" else arr.shape
        assert not np.isnan(arr).any(), f"{name} {tensor} not covered"
        assert bits_equal(arr.reshape(shape), expected(d, name, tensor, shape)), f"{name} {tensor}"
    print(f"ok: export of t1 and {records} records in {len(manifest['files'])} rank files match")

    # 3. FP8 tables (format version 3), when the writer made them.
    if os.path.isdir(os.path.join(d, "ckpt_fp8")):
        main_fp8(os.path.join(d, "ckpt_fp8"))


if __name__ == "__main__":
    main()
