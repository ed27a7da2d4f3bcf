//! The dense half of a model (dense.h): MLPs, the DCN-v2 cross network, DLRM's dot interaction,
//! sigmoid + BCE with logits and the OpenBLAS thread count; dense optimizers in dense_optimizer.rs.
use crate::ddp::{Bucketer, DdpHandle};
use crate::{check, cstring, invalid, sys, Result};
use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr;
use std::sync::Arc;

/// Activation of a linear layer (`SHARDREC_ACTIVATION_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activation {
    /// y = x W^T + b.
    #[default]
    None = 0,
    /// y = max(0, x W^T + b).
    Relu = 1,
    /// y = 1 / (1 + exp(-(x W^T + b))).
    Sigmoid = 2,
}

/// Arithmetic of a dense layer on a GPU (`SHARDREC_DENSE_MATH_*`); the host is always fp32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DenseMath {
    /// fp32 throughout (the default).
    #[default]
    Fp32 = 0,
    /// GEMM inputs rounded to tf32 by the tensor cores, fp32 accumulation.
    Tf32 = 1,
    /// GEMM inputs rounded to bf16, fp32 accumulation; parameters and gradients stay fp32.
    Bf16 = 2,
}

impl DenseMath {
    /// The constant of C value `code`, if any.
    pub fn from_code(code: i32) -> Option<DenseMath> {
        match code {
            0 => Some(DenseMath::Fp32),
            1 => Some(DenseMath::Tf32),
            2 => Some(DenseMath::Bf16),
            _ => None,
        }
    }
}

/// Where an MLP lives and how it computes (`shardrec_mlp_options_t` version 2). `device_type`
/// is `SHARDREC_DEVICE_HOST` (0, the default) or `SHARDREC_DEVICE_CUDA` (1); a CUDA MLP runs on
/// the default stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MlpPlacement {
    pub device_type: i32,
    pub device_index: i32,
    pub math: DenseMath,
}

/// Sets OpenBLAS's thread count, PROCESS-WIDE. With several ranks as threads of one process use
/// 1. Call it while no dense layer runs.
pub fn set_blas_threads(threads: i32) -> Result<()> {
    check(unsafe { sys::shardrec_dense_set_blas_threads(threads) })
}

/// OpenBLAS's thread count.
pub fn blas_threads() -> Result<i32> {
    let mut out = 0;
    check(unsafe { sys::shardrec_dense_blas_threads(&mut out) })?;
    Ok(out)
}

/// Output width of the dot interaction: dim + F (F + 1) / 2 with F = `num_sparse`.
pub fn dot_interaction_width(num_sparse: i64, dim: i64) -> Result<i64> {
    let mut out = 0;
    check(unsafe { sys::shardrec_dot_interaction_width(num_sparse, dim, &mut out) })?;
    Ok(out)
}

fn check_len(what: &str, len: usize, want: i64) -> Result<()> {
    if want < 0 || len as i64 != want {
        return Err(invalid(format!(
            "{what} has {len} elements, expected {want}"
        )));
    }
    Ok(())
}

/// DLRM's dot interaction: `out[batch, width]` from `dense[batch, dim]` and
/// `emb[batch, num_sparse * dim]`: the dense vector, then the pairwise dot products of the
/// strictly lower triangle (vector 0 being the dense one).
pub fn dot_interaction_forward(
    dense: &[f32],
    emb: &[f32],
    batch: i64,
    num_sparse: i64,
    dim: i64,
    out: &mut [f32],
) -> Result<()> {
    let width = dot_interaction_width(num_sparse, dim)?;
    check_len("dense", dense.len(), batch.saturating_mul(dim))?;
    check_len(
        "emb",
        emb.len(),
        batch.saturating_mul(num_sparse).saturating_mul(dim),
    )?;
    check_len("out", out.len(), batch.saturating_mul(width))?;
    check(unsafe {
        sys::shardrec_dot_interaction_forward(
            dense.as_ptr(),
            emb.as_ptr(),
            batch,
            num_sparse,
            dim,
            out.as_mut_ptr(),
            out.len() as i64,
        )
    })
}

/// Gradients of the dot interaction's inputs from `dout[batch, width]`: `d_dense` and `d_emb`
/// are overwritten.
#[allow(clippy::too_many_arguments)]
pub fn dot_interaction_backward(
    dense: &[f32],
    emb: &[f32],
    dout: &[f32],
    batch: i64,
    num_sparse: i64,
    dim: i64,
    d_dense: &mut [f32],
    d_emb: &mut [f32],
) -> Result<()> {
    let width = dot_interaction_width(num_sparse, dim)?;
    check_len("dense", dense.len(), batch.saturating_mul(dim))?;
    check_len(
        "emb",
        emb.len(),
        batch.saturating_mul(num_sparse).saturating_mul(dim),
    )?;
    check_len("dout", dout.len(), batch.saturating_mul(width))?;
    check_len("d_dense", d_dense.len(), batch.saturating_mul(dim))?;
    check_len(
        "d_emb",
        d_emb.len(),
        batch.saturating_mul(num_sparse).saturating_mul(dim),
    )?;
    check(unsafe {
        sys::shardrec_dot_interaction_backward(
            dense.as_ptr(),
            emb.as_ptr(),
            dout.as_ptr(),
            batch,
            num_sparse,
            dim,
            d_dense.as_mut_ptr(),
            d_emb.as_mut_ptr(),
        )
    })
}

/// Sigmoid + binary cross-entropy on logits (labels 0 or 1): returns the summed loss divided by
/// `normalizer` and, with `dlogits`, writes (sigmoid(z) - y) / normalizer into it. In
/// data-parallel training the normalizer is the LOCAL batch size.
pub fn bce_with_logits(
    logits: &[f32],
    labels: &[f32],
    normalizer: f64,
    dlogits: Option<&mut [f32]>,
) -> Result<f64> {
    check_len("labels", labels.len(), logits.len() as i64)?;
    let d = match dlogits {
        Some(d) => {
            check_len("dlogits", d.len(), logits.len() as i64)?;
            d.as_mut_ptr()
        }
        None => ptr::null_mut(),
    };
    let mut loss = 0.0;
    check(unsafe {
        sys::shardrec_bce_with_logits(
            logits.as_ptr(),
            labels.as_ptr(),
            logits.len() as i64,
            normalizer,
            &mut loss,
            d,
        )
    })?;
    Ok(loss)
}

#[derive(Clone, Copy)]
enum Kind {
    Mlp,
    Dcn,
}

/// What an MLP and a cross network share: the handle, the forward input the backward reads
/// again, and the bucketer whose storage the gradients may point into (kept alive with them).
pub(crate) struct Core {
    kind: Kind,
    pub(crate) raw: *mut c_void,
    input: Vec<f32>,
    batch: i64,
    /// The bucketer the gradients live in and this layer's first tensor in it: the gradients
    /// are rebound before every use, because the bucket storage moves when it is rebuilt.
    grads_owner: Option<(Arc<DdpHandle>, usize)>,
    /// Caller storage bound with `bind_tensor`, per tensor: (params, gradients). Heap buffers
    /// that never move, dropped after the C layer (fields drop after `Drop::drop`).
    storage: Vec<(Option<Box<[f32]>>, Option<Box<[f32]>>)>,
}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: raw came from the kind's create call and is destroyed once.
        unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_destroy(self.raw.cast()),
                Kind::Dcn => sys::shardrec_dcn_destroy(self.raw.cast()),
            }
        }
    }
}

struct Ready {
    ddp: *mut sys::shardrec_ddp_t,
    first: usize,
    status: sys::shardrec_status_t,
}

unsafe extern "C" fn on_ready(tensor: usize, user: *mut c_void) {
    // SAFETY: user is the Ready of the backward call running on this thread.
    let r = unsafe { &mut *(user as *mut Ready) };
    let rc = unsafe { sys::shardrec_ddp_mark_ready(r.ddp, r.first + tensor) };
    if rc != 0 && r.status == 0 {
        r.status = rc;
    }
}

impl Core {
    fn num_tensors(&self) -> Result<usize> {
        let mut n = 0;
        check(unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_num_tensors(self.raw.cast(), &mut n),
                Kind::Dcn => sys::shardrec_dcn_num_tensors(self.raw.cast(), &mut n),
            }
        })?;
        Ok(n)
    }

    /// Points the gradients at the bucketer's current storage (a no-op when not bound).
    fn refresh(&self) -> Result<()> {
        if let Some((ddp, first)) = &self.grads_owner {
            for i in 0..self.num_tensors()? {
                let mut g: *mut f32 = ptr::null_mut();
                check(unsafe { sys::shardrec_ddp_grad(ddp.0, first + i, &mut g) })?;
                // SAFETY: the layer is used by one thread at a time (not Sync); rebinding only
                // changes where the C layer looks for its gradients.
                check(unsafe {
                    match self.kind {
                        Kind::Mlp => {
                            sys::shardrec_mlp_bind_tensor(self.raw.cast(), i, ptr::null_mut(), g)
                        }
                        Kind::Dcn => {
                            sys::shardrec_dcn_bind_tensor(self.raw.cast(), i, ptr::null_mut(), g)
                        }
                    }
                })?;
            }
        }
        Ok(())
    }

    fn tensor(&self, i: usize) -> Result<sys::shardrec_dense_param_t> {
        self.refresh()?;
        if let Kind::Mlp = self.kind {
            // A CUDA MLP's tensors are device pointers: never hand them out as slices.
            let mut device_type = 0;
            check(unsafe {
                sys::shardrec_mlp_device(self.raw.cast(), &mut device_type, ptr::null_mut())
            })?;
            if device_type != 0 {
                return Err(invalid(
                    "the tensors of a CUDA MLP live in device memory; the Rust \
                                    binding reads host tensors only",
                ));
            }
        }
        // SAFETY: plain data written by the call.
        let mut t: sys::shardrec_dense_param_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_tensor(self.raw.cast(), i, &mut t),
                Kind::Dcn => sys::shardrec_dcn_tensor(self.raw.cast(), i, &mut t),
            }
        })?;
        Ok(t)
    }

    pub(crate) fn all_tensors(&self) -> Result<Vec<sys::shardrec_dense_param_t>> {
        (0..self.num_tensors()?).map(|i| self.tensor(i)).collect()
    }

    fn forward(&mut self, x: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        // The C layer reads its input again in the backward: keep a copy the layer owns.
        self.input.clear();
        self.input.extend_from_slice(x);
        let rc = unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_forward(
                    self.raw.cast(),
                    self.input.as_ptr(),
                    batch,
                    y.as_mut_ptr(),
                    y.len() as i64,
                ),
                Kind::Dcn => sys::shardrec_dcn_forward(
                    self.raw.cast(),
                    self.input.as_ptr(),
                    batch,
                    y.as_mut_ptr(),
                    y.len() as i64,
                ),
            }
        };
        check(rc)?;
        self.batch = batch;
        Ok(())
    }

    fn backward(
        &mut self,
        dy: &[f32],
        dx: *mut f32,
        ready: Option<(&mut Bucketer, usize)>,
    ) -> Result<()> {
        let mut r = Ready {
            ddp: ptr::null_mut(),
            first: 0,
            status: 0,
        };
        let cb: sys::shardrec_grad_ready_fn = match ready {
            Some((ddp, first)) => {
                r.ddp = ddp.raw();
                r.first = first;
                Some(on_ready)
            }
            None => None,
        };
        let user = &mut r as *mut Ready as *mut c_void;
        self.refresh()?;
        check(unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_backward(self.raw.cast(), dy.as_ptr(), dx, cb, user),
                Kind::Dcn => sys::shardrec_dcn_backward(self.raw.cast(), dy.as_ptr(), dx, cb, user),
            }
        })?;
        check(r.status)
    }

    fn use_bucketer_grads(&mut self, ddp: &Bucketer, first: usize) -> Result<()> {
        // The backward writes count floats through the bound pointer: the sizes must agree.
        for i in 0..self.num_tensors()? {
            let want = self.tensor(i)?.count;
            if ddp.count(first + i) != Some(want) {
                return Err(invalid(format!(
                    "tensor {i} has {want} elements, bucketer gradient {} does not match",
                    first + i
                )));
            }
        }
        self.grads_owner = Some((ddp.shared(), first));
        let rc = self.refresh();
        if rc.is_err() {
            self.grads_owner = None;
        }
        rc
    }

    fn bind_storage(
        &mut self,
        i: usize,
        param: Option<Vec<f32>>,
        grad: Option<Vec<f32>>,
    ) -> Result<()> {
        let n = self.tensor(i)?.count;
        for (what, v) in [("param", &param), ("grad", &grad)] {
            if let Some(v) = v {
                if v.len() as i64 != n {
                    return Err(invalid(format!(
                        "{what} storage of tensor {i} must have {n} elements, got {}",
                        v.len()
                    )));
                }
            }
        }
        let mut param = param.map(Vec::into_boxed_slice);
        let mut grad = grad.map(Vec::into_boxed_slice);
        let p = param.as_mut().map_or(ptr::null_mut(), |b| b.as_mut_ptr());
        let g = grad.as_mut().map_or(ptr::null_mut(), |b| b.as_mut_ptr());
        // SAFETY: host layer (tensor() refused a CUDA MLP); the boxes are kept below, so the
        // storage outlives the C layer or the next rebind.
        check(unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_bind_tensor(self.raw.cast(), i, p, g),
                Kind::Dcn => sys::shardrec_dcn_bind_tensor(self.raw.cast(), i, p, g),
            }
        })?;
        if self.storage.len() <= i {
            self.storage.resize_with(i + 1, Default::default);
        }
        if param.is_some() {
            self.storage[i].0 = param;
        }
        if grad.is_some() {
            self.storage[i].1 = grad;
        }
        Ok(())
    }

    fn zero_grad(&mut self) -> Result<()> {
        self.refresh()?;
        check(unsafe {
            match self.kind {
                Kind::Mlp => sys::shardrec_mlp_zero_grad(self.raw.cast()),
                Kind::Dcn => sys::shardrec_dcn_zero_grad(self.raw.cast()),
            }
        })
    }
}

/// A dense layer with flat parameter tensors (an [`Mlp`] or a [`Dcn`]): tensor i has a name, an
/// element count, parameters and gradients. Backward ACCUMULATES into the gradients.
pub trait DenseLayer {
    #[doc(hidden)]
    fn core(&self) -> &CoreRef;
    #[doc(hidden)]
    fn core_mut(&mut self) -> &mut CoreRef;

    /// Number of parameter tensors.
    fn num_tensors(&self) -> Result<usize> {
        self.core().0.num_tensors()
    }

    /// Name of tensor `i`, e.g. "bottom.0.weight".
    fn tensor_name(&self, i: usize) -> Result<String> {
        let t = self.core().0.tensor(i)?;
        // SAFETY: the name is owned by the layer and NUL-terminated.
        Ok(unsafe { CStr::from_ptr(t.name) }
            .to_string_lossy()
            .into_owned())
    }

    /// Parameters of tensor `i` (borrowed from the layer).
    fn param(&self, i: usize) -> Result<&[f32]> {
        let t = self.core().0.tensor(i)?;
        // SAFETY: count floats owned by the layer, valid while it is borrowed.
        Ok(unsafe { std::slice::from_raw_parts(t.param, t.count as usize) })
    }

    /// Parameters of tensor `i`, writable (e.g. to restore a checkpoint).
    fn param_mut(&mut self, i: usize) -> Result<&mut [f32]> {
        let t = self.core().0.tensor(i)?;
        // SAFETY: as param, borrowed mutably.
        Ok(unsafe { std::slice::from_raw_parts_mut(t.param, t.count as usize) })
    }

    /// Gradients of tensor `i` (in the layer or in the bucket it was bound to, kept alive).
    fn grad(&self, i: usize) -> Result<&[f32]> {
        let t = self.core().0.tensor(i)?;
        // SAFETY: the gradient storage is the layer's or a bucketer's the layer keeps alive.
        Ok(unsafe { std::slice::from_raw_parts(t.grad, t.count as usize) })
    }

    /// Sets every gradient to zero.
    fn zero_grad(&mut self) -> Result<()> {
        self.core_mut().0.zero_grad()
    }

    /// Moves tensor `i` into caller-provided storage: `param` (its values are used as they
    /// are, nothing is copied) and/or `grad` (`None` keeps that side), each of exactly the
    /// tensor's element count. The layer owns the buffers from now on; read and write them with
    /// `param`/`param_mut`/`grad`. A later `use_bucketer_grads` takes over the gradients.
    fn bind_tensor(
        &mut self,
        i: usize,
        param: Option<Vec<f32>>,
        grad: Option<Vec<f32>>,
    ) -> Result<()> {
        self.core_mut().0.bind_storage(i, param, grad)
    }

    /// Points tensor i's gradient at the bucketer's tensor `first + i`, so the backward writes
    /// into the bucket that averages it (no copies). The layer keeps the bucketer alive and
    /// follows its storage when the buckets are rebuilt after the first synced step.
    fn use_bucketer_grads(&mut self, ddp: &Bucketer, first: usize) -> Result<()> {
        self.core_mut().0.use_bucketer_grads(ddp, first)
    }
}

/// Opaque part of a dense layer (see [`DenseLayer`]).
pub struct CoreRef(pub(crate) Core);

/// A stack of linear layers with bias and activation on OpenBLAS. Its tensors are, per layer
/// l, `name.l.weight` `[out, in]` (row-major) then `name.l.bias` `[out]`. One thread at a time.
pub struct Mlp {
    core: CoreRef,
    in_features: i64,
    out_features: i64,
    device_type: i32,
}

// SAFETY: dense.h allows a handle on any thread, one at a time.
unsafe impl Send for Mlp {}

impl DenseLayer for Mlp {
    fn core(&self) -> &CoreRef {
        &self.core
    }
    fn core_mut(&mut self) -> &mut CoreRef {
        &mut self.core
    }
}

impl Mlp {
    /// Where the MLP's tensors live (`SHARDREC_DEVICE_HOST` 0 or `SHARDREC_DEVICE_CUDA` 1).
    pub fn device_type(&self) -> i32 {
        self.device_type
    }

    fn require_host(&self, what: &str) -> Result<()> {
        if self.device_type != 0 {
            return Err(invalid(format!(
                "{what} of a CUDA MLP needs device pointers, which the Rust binding does not pass; \
                 use the C API"
            )));
        }
        Ok(())
    }

    /// An MLP from `in_features` through `widths`. `activations` `None` means ReLU on every
    /// layer but the last, which has none; otherwise one per layer. `name` "" means "mlp".
    pub fn new(
        in_features: i64,
        widths: &[i64],
        activations: Option<&[Activation]>,
        seed: u64,
        name: &str,
    ) -> Result<Mlp> {
        Mlp::new_on(
            in_features,
            widths,
            activations,
            seed,
            name,
            MlpPlacement::default(),
        )
    }

    /// As [`Mlp::new`] placed by `place`. A CUDA MLP keeps its tensors in device memory and runs
    /// through cuBLASLt; Rust slices are host memory, so `forward` and `backward` refuse it (use
    /// the C API with device pointers). Without the CUDA plugin or a GPU the error is
    /// `Code::NoDevice`; TF32 and BF16 on the host `Code::Invalid`.
    pub fn new_on(
        in_features: i64,
        widths: &[i64],
        activations: Option<&[Activation]>,
        seed: u64,
        name: &str,
        place: MlpPlacement,
    ) -> Result<Mlp> {
        let acts: Option<Vec<i32>> = match activations {
            Some(a) if a.len() != widths.len() => {
                return Err(invalid(format!(
                    "{} activations for {} layers",
                    a.len(),
                    widths.len()
                )))
            }
            Some(a) => Some(a.iter().map(|&v| v as i32).collect()),
            None => None,
        };
        let cname = cstring(name, "MLP name")?;
        let num_layers = i32::try_from(widths.len()).map_err(|_| invalid("too many layers"))?;
        // SAFETY: plain data filled by init.
        let mut o: sys::shardrec_mlp_options_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_mlp_options_init(&mut o, sys::SHARDREC_MLP_OPTIONS_VERSION)
        })?;
        o.in_features = in_features;
        o.out_features = widths.as_ptr();
        o.activations = acts.as_ref().map_or(ptr::null(), |a| a.as_ptr());
        o.num_layers = num_layers;
        o.seed = seed;
        o.name = cname.as_ptr();
        o.device_type = place.device_type;
        o.device_index = place.device_index;
        o.math = place.math as i32;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::shardrec_mlp_create(&mut raw, &o) })?;
        let core = CoreRef(Core {
            kind: Kind::Mlp,
            raw: raw.cast(),
            input: Vec::new(),
            batch: -1,
            grads_owner: None,
            storage: Vec::new(),
        });
        let (mut i, mut out) = (0, 0);
        check(unsafe { sys::shardrec_mlp_dims(raw, &mut i, &mut out) })?;
        let mut device_type = 0;
        check(unsafe { sys::shardrec_mlp_device(raw, &mut device_type, ptr::null_mut()) })?;
        Ok(Mlp {
            core,
            in_features: i,
            out_features: out,
            device_type,
        })
    }

    pub fn in_features(&self) -> i64 {
        self.in_features
    }

    pub fn out_features(&self) -> i64 {
        self.out_features
    }

    /// `y[batch, out]` from `x[batch, in]`; the layer copies `x` for the backward.
    pub fn forward(&mut self, x: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        self.require_host("forward")?;
        check_len("x", x.len(), batch.saturating_mul(self.in_features))?;
        check_len("y", y.len(), batch.saturating_mul(self.out_features))?;
        self.core.0.forward(x, batch, y)
    }

    /// Backward of the last forward: accumulates the parameter gradients from
    /// `dy[batch, out]` and writes `dx[batch, in]` when given. With `ready` = (bucketer, first),
    /// tensor i is marked ready as the bucketer's tensor first + i as soon as its gradient is
    /// final (last layer first), so its average overlaps the rest of the backward.
    pub fn backward(
        &mut self,
        dy: &[f32],
        dx: Option<&mut [f32]>,
        ready: Option<(&mut Bucketer, usize)>,
    ) -> Result<()> {
        self.require_host("backward")?;
        let batch = self.core.0.batch.max(0);
        check_len("dy", dy.len(), batch.saturating_mul(self.out_features))?;
        let dx = match dx {
            Some(d) => {
                check_len("dx", d.len(), batch.saturating_mul(self.in_features))?;
                d.as_mut_ptr()
            }
            None => ptr::null_mut(),
        };
        self.core.0.backward(dy, dx, ready)
    }
}

/// A low-rank DCN-v2 cross network: x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l. Tensors per
/// layer: "name.l.V.weight", "name.l.W.weight", "name.l.W.bias". One thread at a time.
pub struct Dcn {
    core: CoreRef,
    width: i64,
}

// SAFETY: dense.h allows a handle on any thread, one at a time.
unsafe impl Send for Dcn {}

impl DenseLayer for Dcn {
    fn core(&self) -> &CoreRef {
        &self.core
    }
    fn core_mut(&mut self) -> &mut CoreRef {
        &mut self.core
    }
}

impl Dcn {
    /// A cross network over inputs of `width`; `name` "" means "cross".
    pub fn new(width: i64, num_layers: i32, rank: i64, seed: u64, name: &str) -> Result<Dcn> {
        let cname = cstring(name, "DCN name")?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::shardrec_dcn_create(&mut raw, width, num_layers, rank, seed, cname.as_ptr())
        })?;
        Ok(Dcn {
            core: CoreRef(Core {
                kind: Kind::Dcn,
                raw: raw.cast(),
                input: Vec::new(),
                batch: -1,
                grads_owner: None,
                storage: Vec::new(),
            }),
            width,
        })
    }

    pub fn width(&self) -> i64 {
        self.width
    }

    /// `y[batch, width]` from `x0[batch, width]`; the layer copies `x0` for the backward.
    pub fn forward(&mut self, x0: &[f32], batch: i64, y: &mut [f32]) -> Result<()> {
        check_len("x0", x0.len(), batch.saturating_mul(self.width))?;
        check_len("y", y.len(), batch.saturating_mul(self.width))?;
        self.core.0.forward(x0, batch, y)
    }

    /// Backward of the last forward (`dx0` required); `ready` as in [`Mlp::backward`].
    pub fn backward(
        &mut self,
        dy: &[f32],
        dx0: &mut [f32],
        ready: Option<(&mut Bucketer, usize)>,
    ) -> Result<()> {
        let n = self.core.0.batch.max(0) * self.width;
        check_len("dy", dy.len(), n)?;
        check_len("dx0", dx0.len(), n)?;
        self.core.0.backward(dy, dx0.as_mut_ptr(), ready)
    }
}
