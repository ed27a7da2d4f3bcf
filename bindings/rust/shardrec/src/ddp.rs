//! Data-parallel dense training (ddp.h): the DDP-style gradient bucketer whose averages overlap
//! the backward, and fully sharded parameters (FSDP / ZeRO-3).
use crate::comm::Comm;
use crate::config::Optimizer;
use crate::{check, invalid, sys, Result};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

/// How the bucketer's gradients travel (`SHARDREC_DDP_COMPRESSION_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// fp32: the exact rank-ordered mean.
    #[default]
    None = 0,
    /// bfloat16 on the wire: half the bytes, error bounded as documented in ddp.h.
    Bf16 = 1,
}

/// Bucketer options; `Default` gives the library defaults (1 MiB first bucket, 25 MiB others).
#[derive(Clone, Debug, Default)]
pub struct BucketerOptions {
    /// Cap of the first bucket; 0 means 1 MiB.
    pub first_bucket_bytes: i64,
    /// Cap of the other buckets; 0 means 25 MiB.
    pub bucket_cap_bytes: i64,
    pub compression: Compression,
}

/// Counters of a bucketer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BucketerStats {
    /// Synced steps finished.
    pub steps: i64,
    /// Current number of buckets.
    pub buckets: i64,
    /// Time the communication thread spent averaging, all steps.
    pub comm_seconds: f64,
    /// Time `finish` waited for communication, all steps.
    pub exposed_seconds: f64,
    /// Gradient bytes exchanged per synced step.
    pub bytes_reduced: i64,
}

/// Owner of the C bucketer: shared by the [`Bucketer`] and the layers whose gradients live in
/// its storage, destroyed with the last of them.
pub(crate) struct DdpHandle(
    pub(crate) *mut sys::shardrec_ddp_t,
    /// External gradient storage (`Bucketer::set_external`): heap buffers that never move,
    /// dropped only after the C bucketer (fields drop after `Drop::drop`), so a layer bound to
    /// an external gradient never writes freed memory.
    pub(crate) std::sync::Mutex<Vec<Option<Box<[f32]>>>>,
);

// SAFETY: only the Bucketer calls through the handle (one thread at a time, ddp.h); the layers
// only keep it alive and query gradient addresses, which the bucketer does not change then.
unsafe impl Send for DdpHandle {}
unsafe impl Sync for DdpHandle {}

impl Drop for DdpHandle {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once (after in-flight buckets complete).
        unsafe { sys::shardrec_ddp_destroy(self.0) };
    }
}

/// A gradient bucketer (ddp.h): registered gradients are grouped into buckets (reverse
/// registration order); each bucket's average over the group starts on a communication thread
/// as soon as all its gradients are marked ready, and [`Bucketer::finish`] waits for all of
/// them. Creation, `mark_ready`, `finish` and the drop are collective: every rank registers the
/// same counts and marks the same gradients each step. Bind layers to its storage with
/// `DenseLayer::use_bucketer_grads`. One thread at a time.
pub struct Bucketer {
    handle: Arc<DdpHandle>,
    counts: Vec<i64>,
    /// One thread at a time (ddp.h): `Send` but not `Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

impl Bucketer {
    /// Registers gradients of the given element counts (collective over `comm`).
    pub fn new(comm: &mut Comm, counts: &[i64], options: &BucketerOptions) -> Result<Bucketer> {
        // SAFETY: plain data filled by init.
        let mut o: sys::shardrec_ddp_options_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_ddp_options_init(&mut o, sys::SHARDREC_DDP_OPTIONS_VERSION)
        })?;
        o.first_bucket_bytes = options.first_bucket_bytes;
        o.bucket_cap_bytes = options.bucket_cap_bytes;
        o.compression = options.compression as i32;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::shardrec_ddp_create(&mut raw, comm.raw, counts.as_ptr(), counts.len(), &o)
        })?;
        Ok(Bucketer {
            handle: Arc::new(DdpHandle(
                raw,
                std::sync::Mutex::new(vec![None; counts.len()]),
            )),
            counts: counts.to_vec(),
            _not_sync: PhantomData,
        })
    }

    pub(crate) fn raw(&self) -> *mut sys::shardrec_ddp_t {
        self.handle.0
    }

    /// Element count of gradient `index`, `None` when out of range.
    pub fn count(&self, index: usize) -> Option<i64> {
        self.counts.get(index).copied()
    }

    pub(crate) fn shared(&self) -> Arc<DdpHandle> {
        Arc::clone(&self.handle)
    }

    /// Zeroes every gradient.
    pub fn zero_grad(&mut self) -> Result<()> {
        check(unsafe { sys::shardrec_ddp_zero_grad(self.raw()) })
    }

    /// Gradient `index` is final for this step; launches every bucket now complete.
    pub fn mark_ready(&mut self, index: usize) -> Result<()> {
        check(unsafe { sys::shardrec_ddp_mark_ready(self.raw(), index) })
    }

    /// Waits for every bucket: the gradients then hold the group average. A gradient some rank
    /// never marked ready (with sync on) fails the step on every rank with `SHARDREC_EUSAGE`;
    /// that step's gradients must not be applied on any rank.
    pub fn finish(&mut self) -> Result<()> {
        check(unsafe { sys::shardrec_ddp_finish(self.raw()) })
    }

    /// no_sync: with `false` the following steps only accumulate locally (every rank switches
    /// at the same step).
    pub fn set_sync(&mut self, enabled: bool) -> Result<()> {
        check(unsafe { sys::shardrec_ddp_set_sync(self.raw(), i32::from(enabled)) })
    }

    /// Moves gradient `index` into caller-provided storage `grad` (exactly its element count):
    /// the bucket copies it in and out around each exchange, so after `finish` it holds the
    /// group average. The bucketer owns the buffer from now on; read and write it through
    /// [`Bucketer::external`] / [`Bucketer::external_mut`]. A previous buffer is returned.
    pub fn set_external(&mut self, index: usize, grad: Vec<f32>) -> Result<Option<Vec<f32>>> {
        let want = self.count(index).ok_or_else(|| {
            crate::invalid(format!(
                "gradient {index} out of range ({} registered)",
                self.counts.len()
            ))
        })?;
        if grad.len() as i64 != want {
            return Err(crate::invalid(format!(
                "external gradient {index} must have {want} elements, got {}",
                grad.len()
            )));
        }
        let mut boxed = grad.into_boxed_slice();
        // SAFETY: the box's heap storage never moves and lives in the shared handle until the
        // C bucketer is destroyed or the index is rebound (C points at the new buffer first).
        check(unsafe { sys::shardrec_ddp_set_external(self.raw(), index, boxed.as_mut_ptr()) })?;
        let mut external = self.handle.1.lock().unwrap_or_else(|e| e.into_inner());
        Ok(external[index].replace(boxed).map(Vec::from))
    }

    /// Address and length of external gradient `index`, if any.
    fn external_raw(&self, index: usize) -> Option<(*mut f32, usize)> {
        let mut external = self.handle.1.lock().unwrap_or_else(|e| e.into_inner());
        external
            .get_mut(index)
            .and_then(|e| e.as_deref_mut())
            .map(|b| (b.as_mut_ptr(), b.len()))
    }

    /// External gradient `index` (set with `set_external`), `None` when it lives in a bucket.
    pub fn external(&self, index: usize) -> Option<&[f32]> {
        // SAFETY: the buffer lives in the handle this bucketer holds and is only replaced by
        // set_external, which takes &mut self; the C side writes it only inside finish (&mut).
        self.external_raw(index)
            .map(|(p, n)| unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// External gradient `index`, writable (the caller's backward accumulates into it).
    pub fn external_mut(&mut self, index: usize) -> Option<&mut [f32]> {
        // SAFETY: as in external, and &mut self makes this the only borrow.
        self.external_raw(index)
            .map(|(p, n)| unsafe { std::slice::from_raw_parts_mut(p, n) })
    }

    /// A copy of gradient `index` (the storage moves when the buckets are rebuilt).
    pub fn grad(&self, index: usize) -> Result<Vec<f32>> {
        let mut g: *mut f32 = ptr::null_mut();
        check(unsafe { sys::shardrec_ddp_grad(self.raw(), index, &mut g) })?;
        let n = self.counts[index] as usize; // in range: the call checked the index
                                             // SAFETY: the call checked the index; n floats of the bucket storage, copied now.
        Ok(unsafe { std::slice::from_raw_parts(g, n) }.to_vec())
    }

    pub fn stats(&self) -> Result<BucketerStats> {
        // SAFETY: plain data written by the call.
        let mut s: sys::shardrec_ddp_stats_t = unsafe { std::mem::zeroed() };
        check(unsafe { sys::shardrec_ddp_stats(self.raw(), &mut s) })?;
        Ok(BucketerStats {
            steps: s.steps,
            buckets: s.buckets,
            comm_seconds: s.comm_seconds,
            exposed_seconds: s.exposed_seconds,
            bytes_reduced: s.bytes_reduced,
        })
    }

    /// Tensor indices of bucket `bucket` in launch order.
    pub fn bucket(&self, bucket: usize) -> Result<Vec<usize>> {
        let mut size = 0;
        check(unsafe {
            sys::shardrec_ddp_bucket(self.raw(), bucket, ptr::null_mut(), 0, &mut size)
        })?;
        let mut out = vec![0usize; size];
        check(unsafe {
            sys::shardrec_ddp_bucket(self.raw(), bucket, out.as_mut_ptr(), size, &mut size)
        })?;
        Ok(out)
    }
}

/// Parameters grouped into flat units, each rank keeping 1/W of every unit's parameters,
/// gradients and optimizer state (FSDP / ZeRO-3). Per step: [`Fsdp::gather`] a unit's full
/// parameters (collective, optionally prefetching the next), compute, [`Fsdp::release`];
/// accumulate into [`Fsdp::grad`], [`Fsdp::reduce_grad`] it, and [`Fsdp::step`] applies the
/// optimizer to the local shards. One thread at a time.
pub struct Fsdp {
    raw: *mut sys::shardrec_fsdp_t,
    counts: Vec<i64>,
}

// SAFETY: ddp.h allows a handle on any thread, one at a time.
unsafe impl Send for Fsdp {}

impl Drop for Fsdp {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once (after in-flight exchanges complete).
        unsafe { sys::shardrec_fsdp_destroy(self.raw) };
    }
}

impl Fsdp {
    /// Collective over `comm`: `initial[u]` holds unit u's full initial values (identical on
    /// every rank; copied).
    pub fn new(comm: &mut Comm, initial: &[&[f32]], optimizer: &Optimizer) -> Result<Fsdp> {
        let counts: Vec<i64> = initial.iter().map(|u| u.len() as i64).collect();
        let ptrs: Vec<*const f32> = initial.iter().map(|u| u.as_ptr()).collect();
        let o = optimizer.raw();
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::shardrec_fsdp_create(
                &mut raw,
                comm.raw,
                counts.as_ptr(),
                ptrs.as_ptr(),
                counts.len(),
                &o,
            )
        })?;
        Ok(Fsdp { raw, counts })
    }

    pub fn num_units(&self) -> usize {
        self.counts.len()
    }

    fn count(&self, unit: usize) -> Result<usize> {
        self.counts.get(unit).map(|&c| c as usize).ok_or_else(|| {
            invalid(format!(
                "unit {unit} out of range ({} units)",
                self.counts.len()
            ))
        })
    }

    /// Unit `unit`'s full parameters (collective), valid until `release` or `step` (both need
    /// `&mut self`, which ends this borrow); `prefetch` also starts gathering that unit.
    pub fn gather(&mut self, unit: usize, prefetch: Option<usize>) -> Result<&[f32]> {
        let n = self.count(unit)?;
        let mut full: *mut f32 = ptr::null_mut();
        let p = prefetch.map_or(-1, |p| p as i64);
        check(unsafe { sys::shardrec_fsdp_gather(self.raw, unit, p, &mut full) })?;
        // SAFETY: n floats owned by the handle until release/step.
        Ok(unsafe { std::slice::from_raw_parts(full, n) })
    }

    /// Frees unit `unit`'s full parameters.
    pub fn release(&mut self, unit: usize) -> Result<()> {
        check(unsafe { sys::shardrec_fsdp_release(self.raw, unit) })
    }

    /// Unit `unit`'s full gradient of this step (zeroed when first handed out), to accumulate
    /// into; valid until `reduce_grad(unit)`.
    pub fn grad(&mut self, unit: usize) -> Result<&mut [f32]> {
        let n = self.count(unit)?;
        let mut full: *mut f32 = ptr::null_mut();
        check(unsafe { sys::shardrec_fsdp_grad(self.raw, unit, &mut full) })?;
        // SAFETY: n floats owned by the handle until reduce_grad.
        Ok(unsafe { std::slice::from_raw_parts_mut(full, n) })
    }

    /// Starts averaging the unit's gradient into this rank's shard (collective).
    pub fn reduce_grad(&mut self, unit: usize) -> Result<()> {
        check(unsafe { sys::shardrec_fsdp_reduce_grad(self.raw, unit) })
    }

    /// Waits for every reduction and applies the optimizer to the local shards.
    pub fn step(&mut self) -> Result<()> {
        check(unsafe { sys::shardrec_fsdp_step(self.raw) })
    }

    /// This rank's slice of unit `unit` and its offset in the unit.
    pub fn shard(&self, unit: usize) -> Result<(&[f32], i64)> {
        let (mut data, mut offset, mut count) = (ptr::null_mut(), 0, 0);
        check(unsafe {
            sys::shardrec_fsdp_shard(self.raw, unit, &mut data, &mut offset, &mut count)
        })?;
        if count == 0 {
            return Ok((&[], offset));
        }
        // SAFETY: count floats owned by the handle until its destruction.
        Ok((
            unsafe { std::slice::from_raw_parts(data, count as usize) },
            offset,
        ))
    }

    /// Host bytes this rank holds now and at most so far.
    pub fn memory(&self) -> Result<(i64, i64)> {
        let (mut current, mut peak) = (0, 0);
        check(unsafe { sys::shardrec_fsdp_memory(self.raw, &mut current, &mut peak) })?;
        Ok((current, peak))
    }
}
