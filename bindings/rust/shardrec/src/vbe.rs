//! Batches with a batch size per feature (VBE, `shardrec_kjt_vbe_view_t`): a request of one user
//! and many candidate items carries the user's features once instead of once per candidate.

use crate::embedding::{agreed, host_view, EmbeddingCollection, Kjt};
use crate::inference::{Inference, InferenceSnapshot};
use crate::{check, sys, Result};
use std::ptr;

/// A batch whose features each have their own number of bags (TorchRec's variable batch size
/// per feature). `kjt.lengths` holds `sum_f feature_batch_sizes[f]` bag lengths, feature-major
/// (the bags of feature 0, then of feature 1, ...); `kjt.values` and `kjt.weights` follow them.
/// With `inverse_indices` (`num_features x kjt.batch_size` entries, each in `[0, B_f)`), sample b
/// of feature f reads bag `inverse_indices[f * batch_size + b]` and the output equals, bit for
/// bit, that of the expanded plain batch; without them `kjt.batch_size` must be the largest B_f
/// and the output is feature-major (each feature's B_f rows of its width; a sequence collection:
/// one row per id). The library checks the sizes at the call that takes the batch.
#[derive(Clone, Copy, Debug)]
pub struct VbeKjt<'a> {
    pub kjt: Kjt<'a>,
    pub feature_batch_sizes: &'a [i64],
    pub inverse_indices: Option<&'a [i64]>,
}

impl<'a> VbeKjt<'a> {
    /// A batch without inverse indices (feature-major output).
    pub fn new(kjt: Kjt<'a>, feature_batch_sizes: &'a [i64]) -> Self {
        VbeKjt {
            kjt,
            feature_batch_sizes,
            inverse_indices: None,
        }
    }

    /// The same batch with inverse indices (the expanded batch's output layout).
    pub fn with_inverse_indices(self, inverse_indices: &'a [i64]) -> Self {
        VbeKjt {
            inverse_indices: Some(inverse_indices),
            ..self
        }
    }

    fn raw(&self) -> sys::shardrec_kjt_vbe_view_t {
        sys::shardrec_kjt_vbe_view_t {
            version: sys::SHARDREC_KJT_VBE_VIEW_VERSION,
            kjt: self.kjt.raw(),
            feature_batch_sizes: self.feature_batch_sizes.as_ptr(),
            num_feature_batch_sizes: self.feature_batch_sizes.len(),
            inverse_indices: self.inverse_indices.map_or(ptr::null(), |i| i.as_ptr()),
            num_inverse_indices: self.inverse_indices.map_or(0, |i| i.len()),
        }
    }
}

impl Inference {
    /// Number of floats `lookup_vbe` writes for `batch` (`shardrec_inference_vbe_output_len`);
    /// `Code::Invalid` for sizes that do not fit the handle.
    pub fn vbe_output_size(&self, batch: &VbeKjt<'_>) -> Result<usize> {
        let view = batch.raw();
        let mut n = 0;
        check(unsafe { sys::shardrec_inference_vbe_output_len(self.raw, &view, &mut n) })?;
        Ok(n)
    }

    /// Looks up a VBE batch into `out` (exactly `vbe_output_size` floats; no copy), each distinct
    /// bag once, and returns the number of the version that answered. A bad batch (sizes that do
    /// not add up, an inverse index outside `[0, B_f)`, any error of `lookup`) is
    /// `Code::Invalid` naming the feature and sample, and `out` is not written.
    pub fn lookup_vbe(&self, batch: &VbeKjt<'_>, out: &mut [f32]) -> Result<u64> {
        let view = batch.raw();
        let mut version = 0;
        check(unsafe {
            sys::shardrec_inference_lookup_vbe(
                self.raw,
                &view,
                out.as_mut_ptr(),
                out.len(),
                &mut version,
            )
        })?;
        Ok(version)
    }

    /// The lookup output of a VBE batch in a new vector, and the version that answered.
    pub fn lookup_vbe_vec(&self, batch: &VbeKjt<'_>) -> Result<(Vec<f32>, u64)> {
        let mut out = vec![0.0; self.vbe_output_size(batch)?];
        let version = self.lookup_vbe(batch, &mut out)?;
        Ok((out, version))
    }
}

impl InferenceSnapshot {
    /// [`Inference::lookup_vbe`] on this version (size `out` with the handle's
    /// [`Inference::vbe_output_size`]).
    pub fn lookup_vbe(&self, batch: &VbeKjt<'_>, out: &mut [f32]) -> Result<()> {
        let view = batch.raw();
        check(unsafe {
            sys::shardrec_inference_snapshot_lookup_vbe(
                self.raw,
                &view,
                out.as_mut_ptr(),
                out.len(),
            )
        })
    }
}

impl EmbeddingCollection {
    /// Number of floats of the forward output of a VBE batch
    /// (`shardrec_embedding_vbe_output_len`; not collective).
    pub fn vbe_output_size(&self, batch: &VbeKjt<'_>) -> Result<usize> {
        let view = batch.raw();
        let mut n = 0;
        check(unsafe { sys::shardrec_embedding_vbe_output_len(self.raw, &view, &mut n) })?;
        Ok(n)
    }

    /// Forward of this rank's VBE batch into `out` (collective; ranks may mix VBE and plain
    /// batches). The `backward` that follows takes a gradient of the same layout; the gradients
    /// of the samples that read a bag are summed into it.
    pub fn forward_vbe(&mut self, batch: &VbeKjt<'_>, out: &mut [f32]) -> Result<()> {
        let view = batch.raw();
        check(unsafe {
            sys::shardrec_embedding_forward_vbe(
                self.raw,
                &view,
                out.as_mut_ptr(),
                out.len(),
                ptr::null_mut(),
            )
        })
    }

    /// `forward_vbe` into a new vector of the right size. A batch whose size this rank cannot
    /// read is still passed to the collective call, which refuses it on every rank.
    pub fn forward_vbe_vec(&mut self, batch: &VbeKjt<'_>) -> Result<Vec<f32>> {
        match self.vbe_output_size(batch) {
            Ok(n) => {
                let mut out = vec![0.0; n];
                self.forward_vbe(batch, &mut out)?;
                Ok(out)
            }
            Err(e) => {
                self.forward_vbe(batch, &mut [])?;
                Err(e)
            }
        }
    }

    /// `forward_vbe` into a tensor of extents `shape` (with 2 or more, the last is the output
    /// width, which only the plain layout has: inverse indices given, or a sequence collection).
    pub fn forward_vbe_tensor(
        &mut self,
        batch: &VbeKjt<'_>,
        out: &mut [f32],
        shape: &[i64],
    ) -> Result<()> {
        let vbe = batch.raw();
        let view = host_view(out.as_mut_ptr(), out.len(), shape);
        agreed(view, |v| unsafe {
            sys::shardrec_embedding_forward_vbe_tensor(self.raw, &vbe, v, ptr::null_mut())
        })
    }

    /// Starts the pipelined input distribution of a VBE batch (collective); the
    /// `forward_distributed` that follows writes `vbe_output_size(batch)` floats.
    pub fn input_dist_start_vbe(&mut self, batch: &VbeKjt<'_>) -> Result<()> {
        let view = batch.raw();
        check(unsafe {
            sys::shardrec_embedding_input_dist_start_vbe(self.raw, &view, ptr::null_mut())
        })
    }
}
