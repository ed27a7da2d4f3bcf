//! Dense optimizers (dense.h): SGD, Adagrad and Adam/AdamW over the tensors of dense layers,
//! with their per-tensor state readable and writable for checkpoints.
use crate::config::Optimizer;
use crate::dense::DenseLayer;
use crate::{check, sys, Result};
use std::ptr;

/// A dense optimizer with the embedding optimizers' per-element rules: SGD, Adagrad, Adam
/// (AdamW with decoupled weight decay); row-wise types and LAMB are refused. State is kept per
/// tensor position: step over the same layers in the same order every time.
pub struct DenseOptimizer {
    raw: *mut sys::shardrec_dense_optimizer_t,
}

// SAFETY: dense.h allows a handle on any thread, one at a time.
unsafe impl Send for DenseOptimizer {}

impl Drop for DenseOptimizer {
    fn drop(&mut self) {
        // SAFETY: raw came from create and is destroyed once.
        unsafe { sys::shardrec_dense_optimizer_destroy(self.raw) };
    }
}

impl DenseOptimizer {
    pub fn new(config: &Optimizer) -> Result<DenseOptimizer> {
        let o = config.raw();
        let mut raw = ptr::null_mut();
        check(unsafe { sys::shardrec_dense_optimizer_create(&mut raw, &o) })?;
        Ok(DenseOptimizer { raw })
    }

    /// One step over every tensor of `layers`, in order (parameters updated from gradients).
    pub fn step(&mut self, layers: &mut [&mut dyn DenseLayer]) -> Result<()> {
        let mut tensors = Vec::new();
        for l in layers.iter() {
            tensors.extend(l.core().0.all_tensors()?);
        }
        check(unsafe {
            sys::shardrec_dense_optimizer_step(self.raw, tensors.as_ptr(), tensors.len())
        })
    }

    pub fn set_learning_rate(&mut self, learning_rate: f32) -> Result<()> {
        check(unsafe { sys::shardrec_dense_optimizer_set_learning_rate(self.raw, learning_rate) })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> Result<i64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_dense_optimizer_steps(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn set_steps(&mut self, steps: i64) -> Result<()> {
        check(unsafe { sys::shardrec_dense_optimizer_set_steps(self.raw, steps) })
    }

    /// State `which` of tensor position `tensor` (the order `step` walks the layers' tensors
    /// in), owned by the optimizer: empty before the first step or when the type has no such
    /// state.
    pub fn state(&mut self, tensor: usize, which: DenseState) -> Result<&[f32]> {
        self.state_mut(tensor, which).map(|s| &*s)
    }

    /// The same state, writable (restoring a checkpoint).
    pub fn state_mut(&mut self, tensor: usize, which: DenseState) -> Result<&mut [f32]> {
        let (mut data, mut count) = (ptr::null_mut(), 0i64);
        check(unsafe {
            sys::shardrec_dense_optimizer_state(
                self.raw,
                tensor,
                which as i32,
                &mut data,
                &mut count,
            )
        })?;
        if data.is_null() || count <= 0 {
            return Ok(&mut []);
        }
        // SAFETY: count floats owned by the optimizer until it is dropped; the &mut self borrow
        // keeps every other call (step included) out while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(data, count as usize) })
    }
}

/// One optimizer state of a dense tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseState {
    /// Adagrad's sum of squared gradients, Adam's first moment.
    Momentum1 = 0,
    /// Adam's second moment.
    Momentum2 = 1,
}
