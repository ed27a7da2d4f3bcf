//! Element types and devices (common.h, device.h): element sizes, the CUDA device count, and
//! why a device is missing.
use crate::{check, Result};
use shardrec_sys as sys;

/// Element type (`shardrec_dtype_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DType {
    #[default]
    Float32 = 0,
    Float16 = 1,
    BFloat16 = 2,
    Float64 = 3,
    Int32 = 4,
    Int64 = 5,
    Uint8 = 6,
    /// Table weight storage only: OCP E4M3 rows with a per-row scale (`size()` is 0).
    Fp8E4M3 = 7,
    /// Table weight storage only: OCP E5M2 rows with a per-row scale (`size()` is 0).
    Fp8E5M2 = 8,
}

impl DType {
    /// Size in bytes of one element (`shardrec_dtype_size`).
    pub fn size(self) -> usize {
        // SAFETY: any value is accepted.
        unsafe { sys::shardrec_dtype_size(self as i32) }
    }

    /// The constant of C value `code`, `None` for an unknown one.
    pub fn from_code(code: i32) -> Option<DType> {
        [
            DType::Float32,
            DType::Float16,
            DType::BFloat16,
            DType::Float64,
            DType::Int32,
            DType::Int64,
            DType::Uint8,
            DType::Fp8E4M3,
            DType::Fp8E5M2,
        ]
        .into_iter()
        .find(|d| *d as i32 == code)
    }
}

/// Where buffers live (`shardrec_device_type_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DeviceType {
    #[default]
    Host = 0,
    Cuda = 1,
}

/// Number of CUDA devices libshardrec can use; having no GPU (or no CUDA build or plugin) is not
/// an error and gives 0.
pub fn device_count() -> Result<i32> {
    let mut out = 0;
    // SAFETY: out is a valid i32.
    check(unsafe { sys::shardrec_device_count(&mut out) })?;
    Ok(out)
}

/// `Ok` when the device is usable; else `Code::NoDevice` (no device, plugin or CUDA runtime),
/// `Code::Unsupported` (built without CUDA) or `Code::Invalid` (negative index), with a message
/// that says why.
pub fn device_check(device: DeviceType, index: i32) -> Result<()> {
    // SAFETY: plain values.
    check(unsafe { sys::shardrec_device_check(device as i32, index) })
}

/// Absolute path of the loaded CUDA plugin (an error says why there is none).
pub fn device_plugin_path() -> Result<String> {
    let mut len = 0usize;
    // SAFETY: a NULL buffer of length 0 asks for the length only.
    check(unsafe { sys::shardrec_device_plugin_path(&mut len, std::ptr::null_mut(), 0) })?;
    let mut buf = vec![0u8; len + 1];
    // SAFETY: buf has len + 1 bytes.
    check(unsafe {
        sys::shardrec_device_plugin_path(&mut len, buf.as_mut_ptr().cast(), buf.len())
    })?;
    buf.truncate(len);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
