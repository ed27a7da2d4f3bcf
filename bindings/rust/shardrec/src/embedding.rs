//! Sharded embedding collections: forward/backward over slices (no copies), pipelined input
//! distribution, and full-table weight and optimizer-state accessors.
use crate::comm::Comm;
use crate::config::Optimizer;
use crate::plan::Plan;
use crate::{check, cstring, sys, Result};
use std::collections::HashMap;
use std::ffi::CStr;
use std::ptr;

/// What happens to an id outside a table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BoundsPolicy {
    #[default]
    Error = 0,
    Clamp = 1,
    Skip = 2,
}

/// How the floats of a collection's embedding collectives travel between ranks
/// (`shardrec_comm_encoding_t` in shardrec/embedding_options.h, which documents the error of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CommEncoding {
    /// Exact fp32 (the default).
    #[default]
    Fp32 = 0,
    /// IEEE half: relative error at most 2^-11, saturates beyond +-65504.
    Fp16 = 1,
    /// bfloat16: relative error at most 2^-8, fp32's range.
    Bf16 = 2,
    /// OCP FP8 E4M3 in 32-value blocks with a shared power-of-two scale: error at most
    /// max(2^-4 |x|, 2^-17 x the block's largest magnitude).
    Fp8E4M3 = 3,
    /// OCP FP8 E5M2, the same blocks: error at most max(2^-3 |x|, 2^-31 x the block's largest).
    Fp8E5M2 = 4,
}

/// What a collection does with a NaN or infinite per-id weight or output gradient
/// (`shardrec_non_finite_policy_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NonFinitePolicy {
    /// Rejected like any bad input (`Code::Invalid` naming the feature/sample); nothing changes.
    #[default]
    Check = 0,
    /// No check: non-finite values flow into outputs, weights and optimizer state.
    Allow = 1,
}

/// Page size of a collection's table storage (`shardrec_table_memory_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TableMemory {
    /// 2 MiB aligned and advised for transparent huge pages (the default).
    #[default]
    HugePages = 0,
    /// Ordinary pages.
    SmallPages = 1,
}

/// One optimizer state: its name and whether it holds one value per row (`[rows]`) rather
/// than one per element (`[rows, dim]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateInfo {
    pub name: String,
    pub row_wise: bool,
}

/// Collection options; `Default` gives the library defaults.
#[derive(Default)]
pub struct EmbeddingOptions<'a> {
    pub seed: u64,
    pub bounds_policy: BoundsPolicy,
    pub num_threads: i32,
    pub dp_comm: Option<&'a Comm>,
    /// Encoding of the forward's return all-to-all.
    pub forward_comm_encoding: CommEncoding,
    /// Encoding of the backward's gradient all-to-all and data-parallel all-reduce.
    pub backward_comm_encoding: CommEncoding,
    /// Non-finite per-id weights and output gradients: rejected (default) or let through.
    pub non_finite: NonFinitePolicy,
    /// Page size of the table storage.
    pub table_memory: TableMemory,
    /// Where the tables live: `Host` (the default). CUDA collections are refused with
    /// `Code::Unsupported` by this build (embedding_options.h); forwarded as given.
    pub device_type: crate::DeviceType,
    /// CUDA ordinal; ignored on the host.
    pub device_index: i32,
    /// Capacity hints of a GPU collection (embedding_options.h): the most samples and the most ids
    /// (over all features) this rank passes to one forward. With both above 0 the per-step device
    /// buffers are sized at creation; 0 (the default) means unknown (they grow on demand). Host
    /// collections ignore them; negative values are rejected.
    pub max_batch_size: i64,
    pub max_ids_per_batch: i64,
    /// Tables tiered on this rank ([`TableTier`](crate::TableTier), docs/disk-tier.md): their
    /// rows on local disk under a DRAM cache, bit-identical to memory. Empty: all in memory.
    pub tiers: &'a [crate::TableTier],
}

/// One rank's batch in keyed-jagged form, feature-major: `lengths[f * batch_size + b]` ids of
/// feature f in sample b, all ids in `values` in that order, optional per-id `weights`.
#[derive(Clone, Copy, Debug)]
pub struct Kjt<'a> {
    pub batch_size: i64,
    pub num_features: usize,
    pub lengths: &'a [i32],
    pub values: &'a [i64],
    pub weights: Option<&'a [f32]>,
}

impl<'a> Kjt<'a> {
    /// An unweighted batch: `lengths` holds `num_features * batch_size` bag lengths
    /// (feature-major), `values` their ids. The library checks the shapes at the call that takes
    /// the batch.
    pub fn new(
        batch_size: i64,
        num_features: usize,
        lengths: &'a [i32],
        values: &'a [i64],
    ) -> Self {
        Kjt {
            batch_size,
            num_features,
            lengths,
            values,
            weights: None,
        }
    }

    /// The same batch with one weight per id.
    pub fn with_weights(self, weights: &'a [f32]) -> Self {
        Kjt {
            weights: Some(weights),
            ..self
        }
    }

    /// Floats of an output of `dim` per row for this batch (a row per sample, or per id of a
    /// sequence), checked before a buffer of that size is allocated: a negative batch size, one
    /// that disagrees with `lengths`, or a size beyond memory is `Code::Invalid`, not a panic.
    pub(crate) fn checked_output_len(&self, dim: i64, sequence: bool) -> Result<usize> {
        let rows = if sequence {
            self.values.len()
        } else {
            let b = usize::try_from(self.batch_size).map_err(|_| {
                crate::invalid(format!("batch_size {} is negative", self.batch_size))
            })?;
            if b.checked_mul(self.num_features) != Some(self.lengths.len()) {
                return Err(crate::invalid(format!(
                    "lengths has {} elements, batch_size {} x num_features {} expected",
                    self.lengths.len(),
                    self.batch_size,
                    self.num_features
                )));
            }
            b
        };
        let dim =
            usize::try_from(dim).map_err(|_| crate::invalid(format!("bad output dim {dim}")))?;
        rows.checked_mul(dim)
            .filter(|&n| n <= isize::MAX as usize / std::mem::size_of::<f32>())
            .ok_or_else(|| {
                crate::invalid(format!(
                    "an output of {rows} rows of {dim} floats is too large"
                ))
            })
    }

    pub(crate) fn raw(&self) -> sys::shardrec_kjt_view_t {
        sys::shardrec_kjt_view_t {
            batch_size: self.batch_size,
            num_features: self.num_features,
            lengths: self.lengths.as_ptr(),
            num_lengths: self.lengths.len(),
            values: self.values.as_ptr().cast(),
            values_dtype: sys::shardrec_dtype_SHARDREC_DTYPE_INT64 as i32,
            num_values: self.values.len(),
            weights: self.weights.map_or(ptr::null(), |w| w.as_ptr()),
            num_weights: self.weights.map_or(0, |w| w.len()),
            device_type: sys::shardrec_device_type_SHARDREC_DEVICE_HOST as i32,
            device_index: 0,
        }
    }
}

/// This rank's part of a sharded collection. One thread at a time (embedding.h), so `Send`
/// but not `Sync`. It keeps its plan and communicator alive on the C side.
pub struct EmbeddingCollection {
    pub(crate) raw: *mut sys::shardrec_embedding_t,
    pub(crate) shapes: HashMap<String, (i64, i32)>,
}

// SAFETY: embedding.h allows one thread at a time per collection, any thread.
unsafe impl Send for EmbeddingCollection {}

impl Drop for EmbeddingCollection {
    fn drop(&mut self) {
        unsafe { sys::shardrec_embedding_destroy(self.raw) };
    }
}

impl EmbeddingCollection {
    /// Collective over `comm`: every rank passes the same plan. `optimizer` must be of the
    /// type the plan was made for (`Topology::optimizer`) unless every table has its own.
    pub fn new(
        plan: &Plan,
        comm: &mut Comm,
        optimizer: &Optimizer,
        options: &EmbeddingOptions<'_>,
    ) -> Result<EmbeddingCollection> {
        Self::create_with(plan, optimizer, options, |out, opt, o| unsafe {
            sys::shardrec_embedding_create(out, plan.raw, comm.raw, opt, o)
        })
    }

    /// Fills the C structs from `optimizer` and `options`, runs `create` (one C create call)
    /// and wraps the handle it returns.
    pub(crate) fn create_with(
        plan: &Plan,
        optimizer: &Optimizer,
        options: &EmbeddingOptions<'_>,
        create: impl FnOnce(
            *mut *mut sys::shardrec_embedding_t,
            &sys::shardrec_optimizer_config_t,
            &sys::shardrec_embedding_options_t,
        ) -> sys::shardrec_status_t,
    ) -> Result<EmbeddingCollection> {
        let mut shapes = HashMap::new();
        for t in 0..plan.num_tables()? {
            shapes.insert(plan.table_name(t)?, plan.table_shape(t)?);
        }
        let opt = optimizer.raw();
        let mut o: sys::shardrec_embedding_options_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_embedding_options_init(&mut o, sys::SHARDREC_EMBEDDING_OPTIONS_VERSION)
        })?;
        o.seed = options.seed;
        o.bounds_policy = options.bounds_policy as i32;
        o.num_threads = options.num_threads;
        o.dp_comm = options.dp_comm.map_or(ptr::null_mut(), |c| c.raw);
        o.forward_comm_encoding = options.forward_comm_encoding as i32;
        o.backward_comm_encoding = options.backward_comm_encoding as i32;
        o.non_finite = options.non_finite as i32;
        o.table_memory = options.table_memory as i32;
        o.device_type = options.device_type as i32;
        o.device_index = options.device_index;
        o.max_batch_size = options.max_batch_size;
        o.max_ids_per_batch = options.max_ids_per_batch;
        // Read by the create call below; `names` holds the strings they point to.
        let mut names = Vec::new();
        let tiers = crate::tier::raw_tiers(options.tiers, &mut names)?;
        o.tiers = if tiers.is_empty() {
            ptr::null()
        } else {
            tiers.as_ptr()
        };
        o.num_tiers = tiers.len();
        let mut out = ptr::null_mut();
        check(create(&mut out, &opt, &o))?;
        Ok(EmbeddingCollection { raw: out, shapes })
    }

    pub fn output_dim(&self) -> Result<i64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_embedding_output_dim(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn is_sequence(&self) -> Result<bool> {
        let mut out = 0;
        check(unsafe { sys::shardrec_embedding_is_sequence(self.raw, &mut out) })?;
        Ok(out != 0)
    }

    /// Number of floats of the forward output of `batch`.
    pub fn output_size(&self, batch: &Kjt<'_>) -> Result<usize> {
        batch.checked_output_len(self.output_dim()?, self.is_sequence()?)
    }

    /// Forward of this rank's batch into `out` (collective).
    pub fn forward(&mut self, batch: &Kjt<'_>, out: &mut [f32]) -> Result<()> {
        let kjt = batch.raw();
        check(unsafe {
            sys::shardrec_embedding_forward(
                self.raw,
                &kjt,
                out.as_mut_ptr(),
                out.len(),
                ptr::null_mut(),
            )
        })
    }

    /// `forward` into a tensor of extents `shape` (at most 4; with 2 or more, the last is the
    /// output width): the library checks the shape against the output
    /// (`shardrec_embedding_forward_tensor`). `out` holds exactly the shape's element count.
    pub fn forward_tensor(
        &mut self,
        batch: &Kjt<'_>,
        out: &mut [f32],
        shape: &[i64],
    ) -> Result<()> {
        let kjt = batch.raw();
        let view = host_view(out.as_mut_ptr(), out.len(), shape);
        agreed(view, |v| unsafe {
            sys::shardrec_embedding_forward_tensor(self.raw, &kjt, v, ptr::null_mut())
        })
    }

    /// `forward_distributed` into a tensor of extents `shape`.
    pub fn forward_distributed_tensor(&mut self, out: &mut [f32], shape: &[i64]) -> Result<()> {
        let view = host_view(out.as_mut_ptr(), out.len(), shape);
        agreed(view, |v| unsafe {
            sys::shardrec_embedding_forward_distributed_tensor(self.raw, v, ptr::null_mut())
        })
    }

    /// `backward` with the gradient as a tensor of extents `shape`.
    pub fn backward_tensor(&mut self, grad: &[f32], shape: &[i64]) -> Result<()> {
        // The library only reads a gradient view.
        let view = host_view(grad.as_ptr().cast_mut(), grad.len(), shape);
        agreed(view, |v| unsafe {
            sys::shardrec_embedding_backward_tensor(self.raw, v, ptr::null_mut())
        })
    }

    /// Waits for the device work a GPU collection's stream-ordered calls left queued and returns
    /// what it found (`shardrec_embedding_synchronize`); `Ok` at once for a host collection, whose
    /// calls (all of them from Rust: it passes host memory) return with their work done.
    pub fn synchronize(&mut self) -> Result<()> {
        check(unsafe { sys::shardrec_embedding_synchronize(self.raw) })
    }

    /// Forward into a new vector of the right size.
    pub fn forward_vec(&mut self, batch: &Kjt<'_>) -> Result<Vec<f32>> {
        let mut out = vec![0.0; self.output_size(batch)?];
        self.forward(batch, &mut out)?;
        Ok(out)
    }

    /// Starts the pipelined input distribution of `batch` (collective).
    pub fn input_dist_start(&mut self, batch: &Kjt<'_>) -> Result<()> {
        let kjt = batch.raw();
        check(unsafe { sys::shardrec_embedding_input_dist_start(self.raw, &kjt, ptr::null_mut()) })
    }

    pub fn input_dist_wait(&mut self) -> Result<()> {
        check(unsafe { sys::shardrec_embedding_input_dist_wait(self.raw, ptr::null_mut()) })
    }

    pub fn forward_distributed(&mut self, out: &mut [f32]) -> Result<()> {
        check(unsafe {
            sys::shardrec_embedding_forward_distributed(
                self.raw,
                out.as_mut_ptr(),
                out.len(),
                ptr::null_mut(),
            )
        })
    }

    /// Backward of the last forward with its output gradient (collective).
    pub fn backward(&mut self, grad: &[f32]) -> Result<()> {
        check(unsafe {
            sys::shardrec_embedding_backward(self.raw, grad.as_ptr(), grad.len(), ptr::null_mut())
        })
    }

    pub fn set_learning_rate(&mut self, lr: f32) -> Result<()> {
        check(unsafe { sys::shardrec_embedding_set_learning_rate(self.raw, lr) })
    }

    pub fn num_steps(&self) -> Result<i64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_embedding_num_steps(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn set_num_steps(&mut self, steps: i64) -> Result<()> {
        check(unsafe { sys::shardrec_embedding_set_num_steps(self.raw, steps) })
    }

    /// Full `[rows, dim]` weights of `table` into `out` (collective).
    pub fn get_weights(&mut self, table: &str, out: &mut [f32]) -> Result<()> {
        let name = cstring(table, "table")?;
        check(unsafe {
            sys::shardrec_embedding_get_weights(
                self.raw,
                name.as_ptr(),
                out.as_mut_ptr(),
                out.len(),
            )
        })
    }

    /// Full weights of `table` as a new vector (collective).
    pub fn weights(&mut self, table: &str) -> Result<Vec<f32>> {
        let n = self
            .shapes
            .get(table)
            .map_or(0, |(r, d)| (*r as usize) * (*d as usize));
        let mut out = vec![0.0; n];
        self.get_weights(table, &mut out)?;
        Ok(out)
    }

    /// Replaces the weights of `table` (collective; same values on every rank).
    pub fn set_weights(&mut self, table: &str, weights: &[f32]) -> Result<()> {
        let name = cstring(table, "table")?;
        check(unsafe {
            sys::shardrec_embedding_set_weights(
                self.raw,
                name.as_ptr(),
                weights.as_ptr(),
                weights.len(),
            )
        })
    }

    /// Names of the optimizer states and whether each is row-wise.
    pub fn states(&self) -> Result<Vec<(String, bool)>> {
        let mut n = 0;
        check(unsafe { sys::shardrec_embedding_num_states(self.raw, &mut n) })?;
        (0..n)
            .map(|i| {
                let (mut name, mut row_wise) = (ptr::null(), 0);
                check(unsafe {
                    sys::shardrec_embedding_state_info(self.raw, i, &mut name, &mut row_wise)
                })?;
                Ok((
                    unsafe { CStr::from_ptr(name) }
                        .to_string_lossy()
                        .into_owned(),
                    row_wise != 0,
                ))
            })
            .collect()
    }

    /// The states of the optimizer `table` trains with (its own or the default), in order: the
    /// names [`EmbeddingCollection::state`] and [`EmbeddingCollection::set_state`] accept.
    pub fn table_states(&self, table: &str) -> Result<Vec<StateInfo>> {
        let name = cstring(table, "table")?;
        let mut n = 0;
        check(unsafe {
            sys::shardrec_embedding_table_num_states(self.raw, name.as_ptr(), &mut n)
        })?;
        (0..n)
            .map(|i| {
                let (mut state, mut row_wise) = (ptr::null(), 0);
                check(unsafe {
                    sys::shardrec_embedding_table_state_info(
                        self.raw,
                        name.as_ptr(),
                        i,
                        &mut state,
                        &mut row_wise,
                    )
                })?;
                // SAFETY: on success the name is NUL-terminated and owned by the collection.
                let state = unsafe { CStr::from_ptr(state) }
                    .to_string_lossy()
                    .into_owned();
                Ok(StateInfo {
                    name: state,
                    row_wise: row_wise != 0,
                })
            })
            .collect()
    }

    /// One full optimizer state of `table` (collective).
    pub fn state(&mut self, table: &str, state: &str) -> Result<Vec<f32>> {
        let row_wise = self
            .table_states(table)?
            .into_iter()
            .any(|s| s.name == state && s.row_wise);
        let (rows, dim) = self.shapes.get(table).copied().unwrap_or((0, 0));
        let mut out = vec![
            0.0;
            if row_wise {
                rows as usize
            } else {
                rows as usize * dim as usize
            }
        ];
        let (t, s) = (cstring(table, "table")?, cstring(state, "state")?);
        check(unsafe {
            sys::shardrec_embedding_get_state(
                self.raw,
                t.as_ptr(),
                s.as_ptr(),
                out.as_mut_ptr(),
                out.len(),
            )
        })?;
        Ok(out)
    }

    /// Replaces one optimizer state of `table` (collective).
    pub fn set_state(&mut self, table: &str, state: &str, values: &[f32]) -> Result<()> {
        let (t, s) = (cstring(table, "table")?, cstring(state, "state")?);
        check(unsafe {
            sys::shardrec_embedding_set_state(
                self.raw,
                t.as_ptr(),
                s.as_ptr(),
                values.as_ptr(),
                values.len(),
            )
        })
    }

    /// Sets the learning rate of one table (per-table schedules); the others keep theirs.
    pub fn set_table_learning_rate(&mut self, table: &str, lr: f32) -> Result<()> {
        let name = cstring(table, "table")?;
        check(unsafe {
            sys::shardrec_embedding_set_table_learning_rate(self.raw, name.as_ptr(), lr)
        })
    }

    /// The optimizer `table` trains with (its own or the default), at its current rate.
    pub fn table_optimizer(&self, table: &str) -> Result<Optimizer> {
        let name = cstring(table, "table")?;
        let mut o: sys::shardrec_optimizer_config_t = unsafe { std::mem::zeroed() };
        check(unsafe { sys::shardrec_embedding_table_optimizer(self.raw, name.as_ptr(), &mut o) })?;
        Ok(Optimizer::from_raw(&o))
    }

    /// The blocks of an output row, in order (TorchRec's KeyedTensor keys and offsets).
    pub fn outputs(&self) -> Result<Vec<OutputBlock>> {
        let mut n = 0;
        check(unsafe { sys::shardrec_embedding_num_outputs(self.raw, &mut n) })?;
        (0..n)
            .map(|i| {
                let (mut feature, mut table) = (ptr::null(), ptr::null());
                let (mut offset, mut width) = (0, 0);
                check(unsafe {
                    sys::shardrec_embedding_output_info(
                        self.raw,
                        i,
                        &mut feature,
                        &mut table,
                        &mut offset,
                        &mut width,
                    )
                })?;
                // SAFETY: on success both names are NUL-terminated and owned by the collection.
                let text = |p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
                Ok(OutputBlock {
                    feature: text(feature),
                    table: text(table),
                    offset,
                    width,
                })
            })
            .collect()
    }

    /// Where this rank's time went since the collection was created, for progress lines.
    pub fn step_timings(&self) -> Result<StepTimings> {
        let mut t: sys::shardrec_step_timings_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_step_timings_init(&mut t, sys::SHARDREC_STEP_TIMINGS_VERSION)
        })?;
        check(unsafe { sys::shardrec_embedding_step_timings(self.raw, &mut t) })?;
        Ok(StepTimings {
            forwards: t.forwards,
            backwards: t.backwards,
            samples: t.samples,
            total_seconds: t.total_seconds,
            collective_seconds: t.collective_seconds,
            input_dist_seconds: t.input_dist_seconds,
            lookup_seconds: t.lookup_seconds,
            output_dist_seconds: t.output_dist_seconds,
            backward_seconds: t.backward_seconds,
            embedding_comm_seconds: t.embedding_comm_seconds,
        })
    }

    /// (seconds in collectives, seconds in forward/backward overall).
    pub fn timings(&self) -> Result<(f64, f64)> {
        let (mut c, mut t) = (0.0, 0.0);
        check(unsafe { sys::shardrec_embedding_timings(self.raw, &mut c, &mut t) })?;
        Ok((c, t))
    }
}

/// A host FLOAT32 view of `len` floats at `data` with extents `shape`, which must multiply to
/// `len` (the C API trusts a view's shape).
/// Makes a collective tensor call with `view`, or, when this rank refused its buffer or shape,
/// with no view: the library refuses that on this rank and reports it to the others in the same
/// call (docs/semantics.md), so the ranks stay in step instead of the others' call pairing with
/// this rank's next one. Returns this rank's own error first.
pub(crate) fn agreed(
    view: Result<sys::shardrec_tensor_view_t>,
    call: impl FnOnce(*const sys::shardrec_tensor_view_t) -> sys::shardrec_status_t,
) -> Result<()> {
    let status = call(view.as_ref().map_or(ptr::null(), |v| v as *const _));
    view.and_then(|_| check(status))
}

pub(crate) fn host_view(
    data: *mut f32,
    len: usize,
    shape: &[i64],
) -> Result<sys::shardrec_tensor_view_t> {
    let max = sys::SHARDREC_TENSOR_MAX_DIMS as usize;
    if shape.len() > max {
        return Err(crate::invalid(format!(
            "a tensor view has at most {max} dimensions, got {}",
            shape.len()
        )));
    }
    let mut elems: i64 = 1;
    for &d in shape {
        elems = if d < 0 { None } else { elems.checked_mul(d) }
            .ok_or_else(|| crate::invalid(format!("bad tensor shape {shape:?}")))?;
    }
    if elems as u64 != len as u64 {
        return Err(crate::invalid(format!(
            "the buffer has {len} floats; shape {shape:?} has {elems}"
        )));
    }
    // SAFETY: plain data.
    let mut v: sys::shardrec_tensor_view_t = unsafe { std::mem::zeroed() };
    v.data = data.cast();
    v.dtype = sys::shardrec_dtype_SHARDREC_DTYPE_FLOAT32 as i32;
    v.device_type = sys::shardrec_device_type_SHARDREC_DEVICE_HOST as i32;
    v.ndim = shape.len() as i32;
    v.shape[..shape.len()].copy_from_slice(shape);
    Ok(v)
}

/// Where one feature's embedding sits in an output row: columns `offset..offset + width`,
/// looked up in `table`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputBlock {
    pub feature: String,
    pub table: String,
    pub offset: i64,
    pub width: i64,
}

/// Per-phase timings of one rank since the collection was created (seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTimings {
    pub forwards: i64,
    pub backwards: i64,
    pub samples: i64,
    /// Inside the collection's step calls.
    pub total_seconds: f64,
    /// Inside or waiting for collectives.
    pub collective_seconds: f64,
    pub input_dist_seconds: f64,
    pub lookup_seconds: f64,
    pub output_dist_seconds: f64,
    pub backward_seconds: f64,
    /// Part of `collective_seconds` in the collectives that carry embeddings or their
    /// gradients (what `CommEncoding` shrinks).
    pub embedding_comm_seconds: f64,
}

impl StepTimings {
    /// `samples / total_seconds`; 0 before the first step.
    pub fn samples_per_second(&self) -> f64 {
        if self.total_seconds > 0.0 {
            self.samples as f64 / self.total_seconds
        } else {
            0.0
        }
    }
}
