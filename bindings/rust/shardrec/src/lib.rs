//! Safe Rust API of libshardrec over the `shardrec-sys` FFI declarations: failures are
//! `Result<T, Error>` carrying the C status and message, handles release themselves on `Drop`,
//! buffers are slices passed without copies, and handles are `Send`/`Sync` only where the C
//! header documents that they may be used from other threads.
mod checkpoint;
mod comm;
mod config;
mod ddp;
mod delta_export;
mod dense;
mod dense_optimizer;
mod device;
mod dynamic;
mod embedding;
mod eval_mode;
mod frozen;
mod inference;
mod inference_delta;
mod inference_tier;
mod mesh;
mod plan;
mod tier;
mod vbe;

pub use checkpoint::{DenseTensor, DenseTensorMut, LoadOptions};
pub use comm::{
    AbortHandle, Comm, CommOptions, Element, ReduceOp, Store, UniqueId, LOCAL_GROUP_MAX,
};
pub use config::{
    CalibrateOptions, Calibration, Constraints, Feature, Optimizer, OptimizerType, Pooling,
    ShardingType, Table, Topology,
};
pub use ddp::{Bucketer, BucketerOptions, BucketerStats, Compression, Fsdp};
pub use delta_export::DynamicDelta;
pub use dense::{
    bce_with_logits, blas_threads, dot_interaction_backward, dot_interaction_forward,
    dot_interaction_width, set_blas_threads, Activation, CoreRef, Dcn, DenseLayer, DenseMath, Mlp,
    MlpPlacement,
};
pub use dense_optimizer::{DenseOptimizer, DenseState};
pub use device::{device_check, device_count, device_plugin_path, DType, DeviceType};
pub use dynamic::{DynamicTable, DynamicTableStats, Eviction};
pub use embedding::{
    BoundsPolicy, CommEncoding, EmbeddingCollection, EmbeddingOptions, Kjt, NonFinitePolicy,
    OutputBlock, StateInfo, StepTimings, TableMemory,
};
pub use frozen::{FrozenDcn, FrozenMlp};
pub use inference::{
    Inference, InferenceOptions, InferenceSnapshot, InferenceTable, ServingStorage,
};
pub use inference_tier::ServingTierStats;
pub use mesh::{
    Mesh, MeshCoords, MeshLayout, MeshOptions, SyncBuffer, SyncHook, SyncMode, SyncStats,
};
pub use plan::{Plan, Shard};
pub use tier::{TableTier, TierStats};
pub use vbe::VbeKjt;

use shardrec_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// A status code of libshardrec (`SHARDREC_E*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Generic,
    Invalid,
    Usage,
    NoMemory,
    Cuda,
    Remote,
    Timeout,
    Io,
    Corrupt,
    Unsupported,
    NotFound,
    Internal,
    NoDevice,
    /// `Comm::abort` was called on this communicator's failure domain.
    Aborted,
    Other(i32),
}

impl Code {
    /// The raw status (a negative `SHARDREC_E*` value).
    pub fn status(self) -> i32 {
        match self {
            Code::Generic => -1,
            Code::Invalid => -2,
            Code::Usage => -3,
            Code::NoMemory => -4,
            Code::Cuda => -5,
            Code::Remote => -6,
            Code::Timeout => -7,
            Code::Io => -8,
            Code::Corrupt => -9,
            Code::Unsupported => -10,
            Code::NotFound => -11,
            Code::Internal => -12,
            Code::NoDevice => -13,
            Code::Aborted => -14,
            Code::Other(status) => status,
        }
    }

    fn from_status(status: i32) -> Code {
        match status {
            -1 => Code::Generic,
            -2 => Code::Invalid,
            -3 => Code::Usage,
            -4 => Code::NoMemory,
            -5 => Code::Cuda,
            -6 => Code::Remote,
            -7 => Code::Timeout,
            -8 => Code::Io,
            -9 => Code::Corrupt,
            -10 => Code::Unsupported,
            -11 => Code::NotFound,
            -12 => Code::Internal,
            -13 => Code::NoDevice,
            -14 => Code::Aborted,
            other => Code::Other(other),
        }
    }
}

/// A failed libshardrec call: the status and the C message of the calling thread, read right
/// after the failing call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

impl Error {
    /// An error of your own, e.g. from a [`Store`] implementation (the library reports its
    /// status).
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error {
            status: code.status(),
            message: message.into(),
        }
    }

    /// The raw status (a negative `SHARDREC_E*` value).
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The status as an enum.
    pub fn code(&self) -> Code {
        Code::from_status(self.status)
    }

    /// The status name, e.g. "SHARDREC_EINVAL".
    pub fn code_name(&self) -> String {
        // SAFETY: returns a static, NUL-terminated string for any value.
        unsafe { CStr::from_ptr(sys::shardrec_status_string(self.status)) }
            .to_string_lossy()
            .into_owned()
    }

    /// The C message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code_name(), self.message)
    }
}

impl std::error::Error for Error {}

/// Result of every fallible call.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a status into a Result, copying the thread's C message on failure. Must run right
/// after the call that produced `status`, on the same thread (Rust threads never migrate).
pub(crate) fn check(status: sys::shardrec_status_t) -> Result<()> {
    if status >= 0 {
        return Ok(());
    }
    // SAFETY: a NULL buffer with length 0 only asks for the length; then a buffer of that size.
    let len = unsafe { sys::shardrec_last_error_copy(std::ptr::null_mut(), 0) };
    let mut buf = vec![0u8; len + 1];
    unsafe { sys::shardrec_last_error_copy(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(len);
    Err(Error {
        status,
        message: String::from_utf8_lossy(&buf).into_owned(),
    })
}

/// An error raised by the binding itself (a name with an interior NUL, a size overflow).
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error {
        status: sys::shardrec_status_code_SHARDREC_EINVAL,
        message: message.into(),
    }
}

pub(crate) fn cstring(s: &str, what: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| invalid(format!("{what} contains a NUL byte")))
}

/// Runtime version of the loaded library, "major.minor.patch".
pub fn version() -> String {
    // SAFETY: returns a static string.
    unsafe { CStr::from_ptr(sys::shardrec_version_string()) }
        .to_string_lossy()
        .into_owned()
}

/// Runtime version of the loaded library as major * 10000 + minor * 100 + patch.
pub fn version_code() -> i32 {
    // SAFETY: no arguments.
    unsafe { sys::shardrec_version() }
}
