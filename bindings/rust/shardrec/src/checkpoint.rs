//! Checkpoints (checkpoint.h): sharded save/load that works under any plan and world size, and
//! export/import of one full table as a safetensors file. Every call is collective.
use crate::{check, cstring, EmbeddingCollection, Mesh, Result};
use shardrec_sys as sys;

/// Load options; the default refuses any mismatch with the checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Tables whose optimizer type differs load their weights and start their state at zero.
    pub reset_optimizer_state: bool,
    /// Convert between fp32 and fp16/bf16 table storage.
    pub allow_dtype_change: bool,
    /// With `allow_partial_load`: verify every needed chunk before changing anything (reads the
    /// bytes twice). Without it there is nothing more to do: loads are all-or-nothing.
    pub verify_first: bool,
    /// Skip the host staging that makes a load all-or-nothing (faster, no extra memory): a
    /// failure found while copying then leaves the collection partly loaded.
    pub allow_partial_load: bool,
}

/// A named dense tensor saved with a checkpoint (model parameters, dense optimizer state).
/// Names are non-empty, unique, without '/'.
#[derive(Clone, Copy, Debug)]
pub struct DenseTensor<'a> {
    pub name: &'a str,
    pub data: &'a [f32],
}

/// A named dense tensor filled by a checkpoint load (same name and length as saved).
#[derive(Debug)]
pub struct DenseTensorMut<'a> {
    pub name: &'a str,
    pub data: &'a mut [f32],
}

/// The C dense tensor list: the names as CStrings alive as long as the list.
struct RawDense {
    _names: Vec<std::ffi::CString>,
    list: Vec<sys::shardrec_dense_tensor_t>,
}

fn raw_dense<'a>(tensors: impl Iterator<Item = (&'a str, *mut f32, usize)>) -> Result<RawDense> {
    let mut names = Vec::new();
    let mut list = Vec::new();
    for (name, data, count) in tensors {
        let c = cstring(name, "dense tensor name")?;
        list.push(sys::shardrec_dense_tensor_t {
            name: c.as_ptr(),
            data,
            count,
        });
        names.push(c);
    }
    Ok(RawDense {
        _names: names,
        list,
    })
}

fn raw_options(o: &LoadOptions) -> Result<sys::shardrec_checkpoint_options_t> {
    // SAFETY: plain data filled by init.
    let mut raw: sys::shardrec_checkpoint_options_t = unsafe { std::mem::zeroed() };
    check(unsafe {
        sys::shardrec_checkpoint_options_init(&mut raw, sys::SHARDREC_CHECKPOINT_OPTIONS_VERSION)
    })?;
    raw.reset_optimizer_state = o.reset_optimizer_state as i32;
    raw.allow_dtype_change = o.allow_dtype_change as i32;
    raw.verify_first = o.verify_first as i32;
    raw.allow_partial_load = o.allow_partial_load as i32;
    Ok(raw)
}

/// Options carrying the dense tensor list `d`, which must outlive every use of them.
fn raw_options_with_dense(
    o: &LoadOptions,
    d: &RawDense,
) -> Result<sys::shardrec_checkpoint_options_t> {
    let mut raw = raw_options(o)?;
    raw.dense = d.list.as_ptr();
    raw.num_dense = d.list.len();
    Ok(raw)
}

/// The list of tensors a save reads: the C struct's pointer is not const, but nothing is written.
fn saved_dense(dense: &[DenseTensor<'_>]) -> Result<RawDense> {
    raw_dense(
        dense
            .iter()
            .map(|t| (t.name, t.data.as_ptr().cast_mut(), t.data.len())),
    )
}

/// The list of tensors a load fills.
fn loaded_dense(dense: &mut [DenseTensorMut<'_>]) -> Result<RawDense> {
    raw_dense(
        dense
            .iter_mut()
            .map(|t| (t.name, t.data.as_mut_ptr(), t.data.len())),
    )
}

impl EmbeddingCollection {
    /// Saves the collection and the `dense` tensors into directory `dir` atomically
    /// (collective).
    pub fn save_checkpoint_with_dense(
        &mut self,
        dir: &str,
        dense: &[DenseTensor<'_>],
    ) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        let d = saved_dense(dense)?;
        let o = raw_options_with_dense(&LoadOptions::default(), &d)?;
        // SAFETY: valid handle, path and options; the tensors outlive the call.
        check(unsafe { sys::shardrec_checkpoint_save(self.raw, dir.as_ptr(), &o) })
    }

    /// Loads the checkpoint in `dir` and fills the `dense` tensors (collective).
    pub fn load_checkpoint_with_dense(
        &mut self,
        dir: &str,
        options: &LoadOptions,
        dense: &mut [DenseTensorMut<'_>],
    ) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        let d = loaded_dense(dense)?;
        let o = raw_options_with_dense(options, &d)?;
        // SAFETY: valid handle, path and options; the tensors are exclusively borrowed.
        check(unsafe { sys::shardrec_checkpoint_load(self.raw, dir.as_ptr(), &o) })
    }

    /// Saves the collection into directory `dir` atomically (collective).
    pub fn save_checkpoint(&mut self, dir: &str) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        // SAFETY: valid handle and NUL-terminated path; NULL options are the defaults.
        check(unsafe { sys::shardrec_checkpoint_save(self.raw, dir.as_ptr(), std::ptr::null()) })
    }

    /// Loads the checkpoint in `dir`, whatever plan and world size saved it (collective).
    pub fn load_checkpoint(&mut self, dir: &str, options: &LoadOptions) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        let o = raw_options(options)?;
        // SAFETY: valid handle, path and options for the call.
        check(unsafe { sys::shardrec_checkpoint_load(self.raw, dir.as_ptr(), &o) })
    }

    /// Writes one full table (optionally with its optimizer state) to a safetensors file.
    pub fn export_table(
        &mut self,
        table: &str,
        path: &str,
        with_optimizer_state: bool,
    ) -> Result<()> {
        let (table, path) = (cstring(table, "table")?, cstring(path, "path")?);
        // SAFETY: valid handle and NUL-terminated strings.
        check(unsafe {
            sys::shardrec_checkpoint_export_table(
                self.raw,
                table.as_ptr(),
                path.as_ptr(),
                with_optimizer_state as i32,
            )
        })
    }

    /// Reads one full table (F32/F16/BF16 "weights", optionally states) from a safetensors file.
    pub fn import_table(
        &mut self,
        table: &str,
        path: &str,
        with_optimizer_state: bool,
    ) -> Result<()> {
        let (table, path) = (cstring(table, "table")?, cstring(path, "path")?);
        // SAFETY: valid handle and NUL-terminated strings.
        check(unsafe {
            sys::shardrec_checkpoint_import_table(
                self.raw,
                table.as_ptr(),
                path.as_ptr(),
                with_optimizer_state as i32,
            )
        })
    }
}

impl Mesh {
    /// Saves a collection created on this mesh together with the `dense` tensors.
    pub fn save_checkpoint_with_dense(
        &mut self,
        coll: &mut EmbeddingCollection,
        dir: &str,
        dense: &[DenseTensor<'_>],
    ) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        let d = saved_dense(dense)?;
        let o = raw_options_with_dense(&LoadOptions::default(), &d)?;
        // SAFETY: valid handles, path and options; the tensors outlive the call.
        check(unsafe { sys::shardrec_checkpoint_save_mesh(self.raw, coll.raw, dir.as_ptr(), &o) })
    }

    /// Loads a checkpoint into a collection created on this mesh and fills `dense`.
    pub fn load_checkpoint_with_dense(
        &mut self,
        coll: &mut EmbeddingCollection,
        dir: &str,
        options: &LoadOptions,
        dense: &mut [DenseTensorMut<'_>],
    ) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        let d = loaded_dense(dense)?;
        let o = raw_options_with_dense(options, &d)?;
        // SAFETY: valid handles, path and options; the tensors are exclusively borrowed.
        check(unsafe { sys::shardrec_checkpoint_load_mesh(self.raw, coll.raw, dir.as_ptr(), &o) })
    }

    /// Saves a collection created on this mesh; each shard is written by one replica.
    pub fn save_checkpoint(&mut self, coll: &mut EmbeddingCollection, dir: &str) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        // SAFETY: valid handles and path; NULL options are the defaults.
        check(unsafe {
            sys::shardrec_checkpoint_save_mesh(self.raw, coll.raw, dir.as_ptr(), std::ptr::null())
        })
    }

    /// Loads a checkpoint into a collection created on this mesh.
    pub fn load_checkpoint(
        &mut self,
        coll: &mut EmbeddingCollection,
        dir: &str,
        options: &LoadOptions,
    ) -> Result<()> {
        let dir = cstring(dir, "dir")?;
        let o = raw_options(options)?;
        // SAFETY: valid handles, path and options for the call.
        check(unsafe { sys::shardrec_checkpoint_load_mesh(self.raw, coll.raw, dir.as_ptr(), &o) })
    }
}
