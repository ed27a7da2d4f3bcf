//! Serving (inference.h): a read-only, hot-swappable embedding collection opened from a training
//! checkpoint or a serving file, looked up from any number of threads at once through `&self`.
use crate::device::DeviceType;
use crate::embedding::{BoundsPolicy, Kjt};
use crate::{check, cstring, invalid, sys, Result};
use std::ffi::CStr;
use std::ptr;

/// How an inference handle stores a table's rows (`SHARDREC_SERVING_*`). `Int8` and `Int4` are
/// row-wise: a value reads back within scale / 2 of its trained value, with scale =
/// (row max - row min) / (2^bits - 1). `Fp8E4M3` and `Fp8E5M2` store an fp32 power-of-two scale
/// per row and one FP8 code per value: a value x reads back within max(2^-4 |x|, 2^-10 scale)
/// (E4M3) or max(2^-3 |x|, 2^-17 scale) (E5M2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ServingStorage {
    /// The checkpoint's dtype: lookups equal the training forward bit for bit.
    #[default]
    AsTrained = 0,
    Fp32 = 1,
    /// IEEE half, rounded to nearest even.
    Fp16 = 2,
    /// bfloat16, rounded to nearest even.
    Bf16 = 3,
    /// 1 byte per value plus an fp32 scale and bias per row.
    Int8 = 4,
    /// 2 values per byte plus an fp32 scale and bias per row.
    Int4 = 5,
    /// 1 FP8 E4M3 byte per value plus an fp32 power-of-two scale per row.
    Fp8E4M3 = 6,
    /// 1 FP8 E5M2 byte per value plus an fp32 power-of-two scale per row.
    Fp8E5M2 = 7,
}

impl ServingStorage {
    /// The constant of C value `code`, if any.
    pub fn from_code(code: i32) -> Option<ServingStorage> {
        match code {
            0 => Some(ServingStorage::AsTrained),
            1 => Some(ServingStorage::Fp32),
            2 => Some(ServingStorage::Fp16),
            3 => Some(ServingStorage::Bf16),
            4 => Some(ServingStorage::Int8),
            5 => Some(ServingStorage::Int4),
            6 => Some(ServingStorage::Fp8E4M3),
            7 => Some(ServingStorage::Fp8E5M2),
            _ => None,
        }
    }
}

/// Options of [`Inference::open`]; the default serves every table as trained, rejects
/// out-of-range ids and runs on the host.
#[derive(Clone, Copy, Debug, Default)]
pub struct InferenceOptions<'a> {
    /// Storage of the tables not in `table_storage` (ignored for a serving file).
    pub default_storage: ServingStorage,
    /// Storage per table name (ignored for a serving file).
    pub table_storage: &'a [(&'a str, ServingStorage)],
    /// What lookups do with an id outside its table.
    pub bounds_policy: BoundsPolicy,
    /// Must be `DeviceType::Host`: the library refuses a device with `Code::Unsupported`.
    pub device_type: DeviceType,
    /// Tables served from the checkpoint's files through a row cache of the given bytes each
    /// (`shardrec_serving_tier_t`; [`Inference::tier_stats`] reports it).
    pub tiers: &'a [(&'a str, u64)],
}

/// A table as served; `storage` is what it resolved to (never `AsTrained`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferenceTable {
    pub name: String,
    pub rows: i64,
    pub dim: i32,
    pub storage: ServingStorage,
}

/// A read-only embedding collection for serving: every table of a checkpoint (any plan, world
/// size or mesh) or serving file, reassembled whole, plus the checkpoint's dense tensors.
/// Lookups, pins, saves and reloads all take `&self`: share it (`&Inference`, `Arc<Inference>`)
/// between threads.
pub struct Inference {
    pub(crate) raw: *mut sys::shardrec_inference_t,
    output_dim: i64,
    sequence: bool,
}

// SAFETY: inference.h: "lookups, dense-tensor reads, pins and the introspection calls may run
// from any number of threads at once on one handle, together with one reload" (a second
// concurrent reload is refused with SHARDREC_EUSAGE, not undefined), and save runs
// "concurrently with lookups and a reload". Only destroy must not race with other calls, and
// Drop takes the handle by value. shardrec_inference_dense_tensor, whose pointer a reload may
// free, is bound through `&mut self` so that no reload can run while its slice is borrowed.
unsafe impl Send for Inference {}
unsafe impl Sync for Inference {}

impl Drop for Inference {
    fn drop(&mut self) {
        // SAFETY: the handle is owned; nothing else uses it once it is dropped.
        unsafe { sys::shardrec_inference_destroy(self.raw) };
    }
}

impl Inference {
    /// Opens a checkpoint directory (any plan, world size or mesh) or a serving file written by
    /// [`Inference::save`]. Errors: `NotFound`, `Corrupt` (naming the file and record),
    /// `Invalid` (an unknown table or storage), `Unsupported` (a device).
    pub fn open(path: &str, options: &InferenceOptions<'_>) -> Result<Inference> {
        let cpath = cstring(path, "path")?;
        let names = options
            .table_storage
            .iter()
            .map(|(name, _)| cstring(name, "table name"))
            .collect::<Result<Vec<_>>>()?;
        let per_table: Vec<sys::shardrec_table_storage_t> = names
            .iter()
            .zip(options.table_storage)
            .map(|(name, (_, storage))| sys::shardrec_table_storage_t {
                version: sys::SHARDREC_TABLE_STORAGE_VERSION,
                table: name.as_ptr(),
                storage: *storage as i32,
            })
            .collect();
        let tier_names = options
            .tiers
            .iter()
            .map(|(name, _)| cstring(name, "tier table name"))
            .collect::<Result<Vec<_>>>()?;
        let tiers: Vec<sys::shardrec_serving_tier_t> = tier_names
            .iter()
            .zip(options.tiers)
            .map(|(name, (_, bytes))| {
                // SAFETY: plain data filled by init.
                let mut t: sys::shardrec_serving_tier_t = unsafe { std::mem::zeroed() };
                unsafe {
                    sys::shardrec_serving_tier_init(&mut t, sys::SHARDREC_SERVING_TIER_VERSION)
                };
                t.table = name.as_ptr();
                t.cache_bytes = *bytes;
                t
            })
            .collect();
        // SAFETY: plain data filled by init.
        let mut o: sys::shardrec_inference_options_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_inference_options_init(&mut o, sys::SHARDREC_INFERENCE_OPTIONS_VERSION)
        })?;
        o.default_storage = options.default_storage as i32;
        o.table_storage = if per_table.is_empty() {
            ptr::null()
        } else {
            per_table.as_ptr()
        };
        o.num_table_storage = per_table.len();
        o.bounds_policy = options.bounds_policy as i32;
        o.device_type = options.device_type as i32;
        o.tiers = if tiers.is_empty() {
            ptr::null()
        } else {
            tiers.as_ptr()
        };
        o.num_tiers = tiers.len();
        let mut raw = ptr::null_mut();
        // SAFETY: the options and names outlive the call, which copies them.
        check(unsafe { sys::shardrec_inference_open(cpath.as_ptr(), &o, &mut raw) })?;
        let mut inf = Inference {
            raw,
            output_dim: 0,
            sequence: false,
        };
        inf.output_dim = inf.output_dim()?;
        inf.sequence = inf.is_sequence()?;
        Ok(inf)
    }

    /// Width of one output row.
    pub fn output_dim(&self) -> Result<i64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_inference_output_dim(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Whether every table is NONE-pooled (one output row per id).
    pub fn is_sequence(&self) -> Result<bool> {
        let mut out = 0;
        check(unsafe { sys::shardrec_inference_is_sequence(self.raw, &mut out) })?;
        Ok(out != 0)
    }

    /// Number of features a batch carries.
    pub fn num_features(&self) -> Result<usize> {
        let mut out = 0;
        check(unsafe { sys::shardrec_inference_num_features(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Number of tables.
    pub fn num_tables(&self) -> Result<usize> {
        let mut out = 0;
        check(unsafe { sys::shardrec_inference_num_tables(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Table `index` (plan order).
    pub fn table(&self, index: usize) -> Result<InferenceTable> {
        let (mut name, mut rows, mut dim, mut storage) = (ptr::null(), 0, 0, 0);
        check(unsafe {
            sys::shardrec_inference_table_info(
                self.raw,
                index,
                &mut name,
                &mut rows,
                &mut dim,
                &mut storage,
            )
        })?;
        // SAFETY: the name is owned by the handle, NUL-terminated, valid while it lives.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let storage = ServingStorage::from_code(storage)
            .ok_or_else(|| invalid(format!("table {name}: unknown storage {storage}")))?;
        Ok(InferenceTable {
            name,
            rows,
            dim,
            storage,
        })
    }

    /// Number of the version served now: 1 after open, +1 per successful reload.
    pub fn version(&self) -> Result<u64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_inference_version(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Number of floats of the lookup output of `batch`: [batch_size, output_dim], or
    /// [values, dim] for a sequence handle; 0 for a batch no output can hold (a negative batch
    /// size, or a product that overflows), which `lookup` then refuses with an error.
    pub fn output_size(&self, batch: &Kjt<'_>) -> usize {
        output_size(batch, self.output_dim, self.sequence)
    }

    /// Looks up `batch` into `out` (exactly `output_size` floats; no copy) and returns the
    /// number of the version that answered. Any number of threads at once, each with its own
    /// `out`; a bad batch is `Code::Invalid` naming the feature, sample and id. A table served
    /// from the checkpoint's files (tiers) whose missed rows cannot be read, or whose file changed
    /// since open (a checksum taken at open fails, or the file is shorter), is `Code::Corrupt` or
    /// `Code::Io` naming the table and the file; nothing is cached and the handle serves on.
    pub fn lookup(&self, batch: &Kjt<'_>, out: &mut [f32]) -> Result<u64> {
        let kjt = batch.raw();
        let mut version = 0;
        check(unsafe {
            sys::shardrec_inference_lookup(
                self.raw,
                &kjt,
                out.as_mut_ptr(),
                out.len(),
                &mut version,
            )
        })?;
        Ok(version)
    }

    /// The row-wise quantization parameters of rows `ids` of table `table`, which must be served
    /// as `ServingStorage::Int8`, `Int4` or an FP8 storage (an FP8 checkpoint served `AsTrained`
    /// included: its power-of-two scale, bias 0): per id its scale and bias, and the version read.
    /// Each value of an int8/int4 row i reads back as `q * scales[i] + biases[i]`, within
    /// `scales[i] / 2` of the trained value (plus fp32 rounding), so a bag's error is at most the
    /// sum over its ids of `|weight| * scale / 2`. `ids` are a fixed table's row indices in
    /// `[0, rows)` or a dynamic table's ids (one without a row: scale 0, bias 0). Errors:
    /// `Invalid` for another storage or an index out of range, `NotFound` for an unknown table.
    pub fn row_scales(&self, table: &str, ids: &[i64]) -> Result<(Vec<f32>, Vec<f32>, u64)> {
        let name = cstring(table, "table")?;
        let mut scales = vec![0.0f32; ids.len()];
        let mut biases = vec![0.0f32; ids.len()];
        let mut version = 0;
        // SAFETY: valid handle, NUL-terminated name, ids.len() elements in each buffer.
        check(unsafe {
            sys::shardrec_inference_row_scales(
                self.raw,
                name.as_ptr(),
                ids.as_ptr(),
                ids.len(),
                scales.as_mut_ptr(),
                biases.as_mut_ptr(),
                &mut version,
            )
        })?;
        Ok((scales, biases, version))
    }

    /// The lookup output of `batch` in a new vector, and the version that answered.
    pub fn lookup_vec(&self, batch: &Kjt<'_>) -> Result<(Vec<f32>, u64)> {
        let mut out = vec![0.0; batch.checked_output_len(self.output_dim, self.sequence)?];
        let version = self.lookup(batch, &mut out)?;
        Ok((out, version))
    }

    /// Dense tensor `name` (saved with the checkpoint) of the version served now, zero-copy,
    /// and that version's number. `&mut self` keeps reloads (which may free it) away while the
    /// slice is borrowed; to read it while other threads share the handle, [`Inference::pin`] a
    /// snapshot. An unknown name is `Code::NotFound`.
    pub fn dense_tensor(&mut self, name: &str) -> Result<(&[f32], u64)> {
        let cname = cstring(name, "dense tensor name")?;
        let (mut data, mut count, mut version) = (ptr::null(), 0, 0);
        check(unsafe {
            sys::shardrec_inference_dense_tensor(
                self.raw,
                cname.as_ptr(),
                &mut data,
                &mut count,
                &mut version,
            )
        })?;
        // SAFETY: count floats owned by the current version, which nothing can replace or free
        // while self is borrowed mutably.
        Ok((unsafe { slice_or_empty(data, count) }, version))
    }

    /// Pins the version served now: the snapshot keeps its tables and dense tensors unchanged
    /// until dropped, whatever reloads happen (also after this handle is dropped).
    pub fn pin(&self) -> Result<InferenceSnapshot> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::shardrec_inference_pin(self.raw, &mut raw) })?;
        Ok(InferenceSnapshot {
            raw,
            output_dim: self.output_dim,
            sequence: self.sequence,
        })
    }

    /// Writes the version served now as one serving file, atomically (temp, fsync, rename).
    pub fn save(&self, path: &str) -> Result<()> {
        let cpath = cstring(path, "path")?;
        check(unsafe { sys::shardrec_inference_save(self.raw, cpath.as_ptr()) })
    }

    /// Opens `path` (checkpoint or serving file) with the handle's options and swaps it in while
    /// lookups run on other threads; lookups that started before finish on the old version. The
    /// source must have the same features and tables (else `Code::Invalid`, nothing changes); a
    /// reload while another runs is `Code::Usage`. It returns once the lookups running on the
    /// old version have returned.
    pub fn reload(&self, path: &str) -> Result<()> {
        let cpath = cstring(path, "path")?;
        check(unsafe { sys::shardrec_inference_reload(self.raw, cpath.as_ptr()) })
    }
}

/// One pinned version of an [`Inference`] handle. A request that runs the lookup and the dense
/// layers uses both through one snapshot, so it sees one version. It does not borrow the handle
/// (the C snapshot outlives it) and holds its version's memory until dropped.
pub struct InferenceSnapshot {
    pub(crate) raw: *mut sys::shardrec_inference_version_t,
    output_dim: i64,
    sequence: bool,
}

// SAFETY: inference.h documents snapshot_version, snapshot_lookup and snapshot_dense_tensor as
// thread-safe ("any number of threads at once"); unpin must not race, and Drop owns the value.
unsafe impl Send for InferenceSnapshot {}
unsafe impl Sync for InferenceSnapshot {}

impl Drop for InferenceSnapshot {
    fn drop(&mut self) {
        // SAFETY: the snapshot is owned; slices borrowed from it ended with the borrow.
        unsafe { sys::shardrec_inference_unpin(self.raw) };
    }
}

impl InferenceSnapshot {
    /// Number of the pinned version.
    pub fn version(&self) -> Result<u64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_inference_snapshot_version(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Number of floats of the lookup output of `batch`.
    pub fn output_size(&self, batch: &Kjt<'_>) -> usize {
        output_size(batch, self.output_dim, self.sequence)
    }

    /// [`Inference::lookup`] on this version.
    pub fn lookup(&self, batch: &Kjt<'_>, out: &mut [f32]) -> Result<()> {
        let kjt = batch.raw();
        check(unsafe {
            sys::shardrec_inference_snapshot_lookup(self.raw, &kjt, out.as_mut_ptr(), out.len())
        })
    }

    /// The lookup output of `batch` on this version, in a new vector.
    pub fn lookup_vec(&self, batch: &Kjt<'_>) -> Result<Vec<f32>> {
        let mut out = vec![0.0; batch.checked_output_len(self.output_dim, self.sequence)?];
        self.lookup(batch, &mut out)?;
        Ok(out)
    }

    /// Dense tensor `name` of this version, zero-copy, valid while the snapshot is borrowed.
    /// An unknown name is `Code::NotFound`.
    pub fn dense_tensor(&self, name: &str) -> Result<&[f32]> {
        let cname = cstring(name, "dense tensor name")?;
        let (mut data, mut count) = (ptr::null(), 0);
        check(unsafe {
            sys::shardrec_inference_snapshot_dense_tensor(
                self.raw,
                cname.as_ptr(),
                &mut data,
                &mut count,
            )
        })?;
        // SAFETY: count floats of the pinned version, immutable until the snapshot is dropped.
        Ok(unsafe { slice_or_empty(data, count) })
    }
}

fn output_size(batch: &Kjt<'_>, dim: i64, sequence: bool) -> usize {
    let rows = if sequence {
        batch.values.len()
    } else {
        batch.batch_size.max(0) as usize
    };
    rows.checked_mul(dim.max(0) as usize).unwrap_or(0)
}

/// # Safety
/// `data` points to `count` initialized floats that outlive `'a` (or `count` is 0).
unsafe fn slice_or_empty<'a>(data: *const f32, count: usize) -> &'a [f32] {
    if count == 0 || data.is_null() {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(data, count) }
    }
}
