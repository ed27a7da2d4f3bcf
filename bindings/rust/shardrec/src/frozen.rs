//! The dense layers' serving forward (`shardrec_mlp_infer`, `shardrec_dcn_infer`): `infer` on
//! `&self`, and frozen layers that many threads share to run it at once.
use crate::dense::{Dcn, DenseLayer, Mlp};
use crate::{check, invalid, sys, Result};

fn check_len(what: &str, len: usize, want: i64) -> Result<()> {
    if want < 0 || len as i64 != want {
        return Err(invalid(format!(
            "{what} has {len} elements, expected {want}"
        )));
    }
    Ok(())
}

impl Mlp {
    /// `y[batch, out]` from `x[batch, in]` for serving: the values of `forward`, bit for bit,
    /// keeping nothing for a backward. To run it from several threads at once, [`Mlp::freeze`]
    /// the MLP. A CUDA MLP is `Code::Unsupported`.
    pub fn infer(&self, x: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        check_len("x", x.len(), batch.saturating_mul(self.in_features()))?;
        check_len("y", y.len(), batch.saturating_mul(self.out_features()))?;
        check(unsafe {
            sys::shardrec_mlp_infer(
                self.core().0.raw.cast(),
                x.as_ptr(),
                batch,
                y.as_mut_ptr(),
                y.len() as i64,
            )
        })
    }

    /// The MLP for serving from many threads: a [`FrozenMlp`] offers only `infer`.
    pub fn freeze(self) -> FrozenMlp {
        FrozenMlp(self)
    }
}

impl Dcn {
    /// `y[batch, width]` from `x0[batch, width]` for serving: `forward`'s values bit for bit,
    /// keeping nothing for a backward. To run it from several threads at once, freeze it.
    pub fn infer(&self, x0: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        let n = batch.saturating_mul(self.width());
        check_len("x0", x0.len(), n)?;
        check_len("y", y.len(), n)?;
        check(unsafe {
            sys::shardrec_dcn_infer(
                self.core().0.raw.cast(),
                x0.as_ptr(),
                batch,
                y.as_mut_ptr(),
                n,
            )
        })
    }

    /// The cross network for serving from many threads: a [`FrozenDcn`] offers only `infer`.
    pub fn freeze(self) -> FrozenDcn {
        FrozenDcn(self)
    }
}

/// An MLP frozen for serving: `Send + Sync`, so `&FrozenMlp` (or an `Arc`) runs `infer` on
/// many threads at once. `into_inner` gives the MLP back for training.
pub struct FrozenMlp(Mlp);

// SAFETY: dense.h: "any number of threads may call shardrec_mlp_infer on one MLP at once, each
// with its own y"; nothing that changes the MLP may run meanwhile, and a FrozenMlp exposes no
// such call (the MLP itself, whose `&self` methods may rebind tensors, is reachable only by
// value through `into_inner`).
unsafe impl Sync for FrozenMlp {}

impl FrozenMlp {
    /// [`Mlp::infer`], from any number of threads at once.
    pub fn infer(&self, x: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        self.0.infer(x, batch, y)
    }

    pub fn in_features(&self) -> i64 {
        self.0.in_features()
    }

    pub fn out_features(&self) -> i64 {
        self.0.out_features()
    }

    /// The MLP back, for training or reading its tensors.
    pub fn into_inner(self) -> Mlp {
        self.0
    }
}

/// A cross network frozen for serving: `Send + Sync`, as [`FrozenMlp`].
pub struct FrozenDcn(Dcn);

// SAFETY: dense.h gives shardrec_dcn_infer shardrec_mlp_infer's thread-safety; a FrozenDcn
// exposes nothing else (see FrozenMlp).
unsafe impl Sync for FrozenDcn {}

impl FrozenDcn {
    /// [`Dcn::infer`], from any number of threads at once.
    pub fn infer(&self, x0: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        self.0.infer(x0, batch, y)
    }

    pub fn width(&self) -> i64 {
        self.0.width()
    }

    /// The cross network back, for training or reading its tensors.
    pub fn into_inner(self) -> Dcn {
        self.0
    }
}
