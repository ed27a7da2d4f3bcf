//! Communicators: in-process groups (ranks as threads), unique-id rendezvous and splits.
use crate::{check, cstring, sys, Result};
use std::ptr;
use std::sync::Arc;

/// The largest group [`Comm::local_group`] makes (C's `SHARDREC_LOCAL_GROUP_MAX`).
pub const LOCAL_GROUP_MAX: usize = sys::SHARDREC_LOCAL_GROUP_MAX as usize;

/// Communicator options; zero fields mean the library defaults.
#[derive(Clone, Debug, Default)]
pub struct CommOptions {
    pub timeout_ms: i64,
    pub backend: i32,
    pub device_type: i32,
    pub device_index: i32,
    pub bind_address: Option<String>,
    /// How long destroying rank 0 waits for the others to leave its store (0: 2 s).
    pub store_grace_ms: i64,
}

impl CommOptions {
    fn with_raw<T>(&self, f: impl FnOnce(&sys::shardrec_comm_options_t) -> Result<T>) -> Result<T> {
        // SAFETY: plain data filled by init.
        let mut o: sys::shardrec_comm_options_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_comm_options_init(&mut o, sys::SHARDREC_COMM_OPTIONS_VERSION)
        })?;
        o.timeout_ms = self.timeout_ms;
        o.backend = self.backend;
        o.device_type = self.device_type;
        o.device_index = self.device_index;
        o.store_grace_ms = self.store_grace_ms;
        let addr = self
            .bind_address
            .as_deref()
            .map(|a| cstring(a, "bind_address"))
            .transpose()?;
        if let Some(a) = &addr {
            o.bind_address = a.as_ptr();
        }
        f(&o)
    }
}

/// A key-value store the ranks of a group rendezvous through (`shardrec_store_callbacks_t`):
/// bring your own (etcd, Redis, a launcher's store) instead of a unique id. Called from the
/// threads that create communicators (and their splits); a failure is an `Error` whose status
/// the library reports (e.g. `Code::Timeout`). A panic is caught and reported as an error.
pub trait Store: Send + Sync {
    /// Stores `value` under `key`, overwriting.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// Waits up to `timeout_ms` for `key`, then returns its value (an error on timeout).
    fn get(&self, key: &str, timeout_ms: i64) -> Result<Vec<u8>>;
    /// Waits up to `timeout_ms` until every key exists; the default gets them one by one.
    fn wait(&self, keys: &[&str], timeout_ms: i64) -> Result<()> {
        for k in keys {
            self.get(k, timeout_ms)?;
        }
        Ok(())
    }
}

type StoreRef = std::sync::Arc<dyn Store>;

/// Runs a store call for C: the status of its error, `SHARDREC_ERROR` for a panic or a bad key.
fn store_call(f: impl FnOnce() -> Result<()>) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.status(),
        Err(_) => sys::shardrec_status_code_SHARDREC_ERROR,
    }
}

unsafe fn store_key<'a>(key: *const std::os::raw::c_char) -> Result<&'a str> {
    if key.is_null() {
        return Err(crate::invalid("NULL store key"));
    }
    std::ffi::CStr::from_ptr(key)
        .to_str()
        .map_err(|_| crate::invalid("store key is not UTF-8"))
}

unsafe extern "C" fn store_set(
    payload: *mut std::os::raw::c_void,
    key: *const std::os::raw::c_char,
    value: *const std::os::raw::c_void,
    value_len: usize,
) -> i32 {
    let store = &*(payload as *const StoreRef);
    store_call(|| {
        let value = if value_len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(value.cast::<u8>(), value_len)
        };
        store.set(store_key(key)?, value)
    })
}

unsafe extern "C" fn store_get(
    payload: *mut std::os::raw::c_void,
    key: *const std::os::raw::c_char,
    timeout_ms: i64,
    buf: *mut std::os::raw::c_void,
    buf_len: usize,
    value_len: *mut usize,
) -> i32 {
    let store = &*(payload as *const StoreRef);
    store_call(|| {
        let value = store.get(store_key(key)?, timeout_ms)?;
        *value_len = value.len();
        if !buf.is_null() && buf_len >= value.len() {
            ptr::copy_nonoverlapping(value.as_ptr(), buf.cast::<u8>(), value.len());
        }
        Ok(())
    })
}

unsafe extern "C" fn store_wait(
    payload: *mut std::os::raw::c_void,
    keys: *const *const std::os::raw::c_char,
    num_keys: usize,
    timeout_ms: i64,
) -> i32 {
    let store = &*(payload as *const StoreRef);
    store_call(|| {
        let raw = if num_keys == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(keys, num_keys)
        };
        let keys = raw
            .iter()
            .map(|k| store_key(*k))
            .collect::<Result<Vec<_>>>()?;
        store.wait(&keys, timeout_ms)
    })
}

/// A rendezvous token (128 plain bytes) created by rank 0 and shipped to every rank.
#[derive(Clone, Copy)]
pub struct UniqueId(pub [u8; sys::SHARDREC_UNIQUE_ID_BYTES as usize]);

impl UniqueId {
    /// Creates the id and starts the store it names in this process (rank 0).
    pub fn new() -> Result<UniqueId> {
        // SAFETY: plain bytes written by the call.
        let mut id: sys::shardrec_unique_id_t = unsafe { std::mem::zeroed() };
        check(unsafe { sys::shardrec_comm_unique_id_create(&mut id) })?;
        let mut out = [0u8; sys::SHARDREC_UNIQUE_ID_BYTES as usize];
        for (o, i) in out.iter_mut().zip(id.internal.iter()) {
            *o = *i as u8;
        }
        Ok(UniqueId(out))
    }
}

/// A communicator. One thread at a time (the C header), so it is `Send` but not `Sync`; to abort
/// it from another thread while it is blocked, take an [`AbortHandle`] first.
pub struct Comm {
    pub(crate) raw: *mut sys::shardrec_comm_t,
    // Destroys the C handle once this and every AbortHandle taken from it are gone.
    owner: Arc<Owner>,
}

struct Owner(*mut sys::shardrec_comm_t);

// SAFETY: the pointer is only destroyed (once, by the last owner) and aborted, which comm.h allows
// from any thread at any time.
unsafe impl Send for Owner {}
unsafe impl Sync for Owner {}

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a create call; the last owner destroys it once.
        unsafe { sys::shardrec_comm_destroy(self.0) };
    }
}

// SAFETY: comm.h allows a communicator to be used from any thread, one at a time.
unsafe impl Send for Comm {}

/// Aborts one communicator from any thread, including while another thread is blocked in one of
/// its calls (a collective, or an embedding collection's step over it): that call and later ones
/// fail with `Code::Aborted`, the peers' with `Code::Remote` (`shardrec_comm_abort`). `Send`,
/// `Sync` and `Clone`; it keeps the C communicator alive until it is dropped too, so it never
/// outlives what it aborts.
#[derive(Clone)]
pub struct AbortHandle {
    owner: Arc<Owner>,
}

impl AbortHandle {
    /// Tears down the communicator's connections and those of every one split from it.
    pub fn abort(&self) -> Result<()> {
        // SAFETY: the owner keeps the handle alive; abort is thread-safe (comm.h).
        check(unsafe { sys::shardrec_comm_abort(self.owner.0) })
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AbortHandle")
    }
}

impl Comm {
    /// Takes ownership of a handle a create call returned.
    pub(crate) fn from_raw(raw: *mut sys::shardrec_comm_t) -> Comm {
        Comm {
            raw,
            owner: Arc::new(Owner(raw)),
        }
    }

    /// A handle that aborts this communicator from any thread (see [`AbortHandle`]).
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            owner: Arc::clone(&self.owner),
        }
    }

    /// `n` communicators of one in-process group, `n` in [1, [`LOCAL_GROUP_MAX`]]; element i is
    /// rank i (one per thread).
    pub fn local_group(n: usize, options: &CommOptions) -> Result<Vec<Comm>> {
        // Larger sizes are refused before n pointers are allocated.
        if n > LOCAL_GROUP_MAX {
            return Err(crate::invalid(format!(
                "local group size {n} must be in [1, {LOCAL_GROUP_MAX}]"
            )));
        }
        let mut raw = vec![ptr::null_mut(); n];
        let count = i32::try_from(n).map_err(|_| crate::invalid("group size too large"))?;
        options.with_raw(|o| {
            check(unsafe { sys::shardrec_comm_create_local_group(raw.as_mut_ptr(), count, o) })
        })?;
        Ok(raw.into_iter().map(Comm::from_raw).collect())
    }

    /// Joins the group its launcher (torchrun, mpirun, srun) placed this process in, from the
    /// launcher's environment variables (collective, blocking; see `shardrec_comm_create_from_env`).
    pub fn from_env(options: &CommOptions) -> Result<Comm> {
        let mut out = ptr::null_mut();
        options.with_raw(|o| check(unsafe { sys::shardrec_comm_create_from_env(&mut out, o) }))?;
        Ok(Comm::from_raw(out))
    }

    /// Joins the group whose rank 0 hosts the rendezvous store at `addr`:`port`, as `rank` of
    /// `world_size`, for hosts that hand rank 0's address in code such as Ray Train (collective,
    /// blocking; see `shardrec_comm_create_tcp`). Only `SHARDREC_RENDEZVOUS_TOKEN` is read from
    /// the environment. An `addr` holding a NUL byte is refused (`Code::Invalid`).
    pub fn from_tcp(
        addr: &str,
        port: i32,
        rank: i32,
        world_size: i32,
        options: &CommOptions,
    ) -> Result<Comm> {
        let c_addr = crate::cstring(addr, "addr")?;
        let mut out = ptr::null_mut();
        options.with_raw(|o| {
            check(unsafe {
                sys::shardrec_comm_create_tcp(&mut out, c_addr.as_ptr(), port, rank, world_size, o)
            })
        })?;
        Ok(Comm::from_raw(out))
    }

    /// Joins the group named by `id` as `rank` of `world_size` (collective, blocking).
    pub fn new(id: &UniqueId, world_size: i32, rank: i32, options: &CommOptions) -> Result<Comm> {
        // SAFETY: plain bytes.
        let mut c_id: sys::shardrec_unique_id_t = unsafe { std::mem::zeroed() };
        for (o, i) in c_id.internal.iter_mut().zip(id.0.iter()) {
            *o = *i as _;
        }
        let mut out = ptr::null_mut();
        options.with_raw(|o| {
            check(unsafe { sys::shardrec_comm_create(&mut out, &c_id, world_size, rank, o) })
        })?;
        Ok(Comm::from_raw(out))
    }

    /// A communicator over an MPI communicator (collective over its members, blocking):
    /// `mpi_comm_fortran` is its Fortran handle (`MPI_Comm_c2f`), or 0 for `MPI_COMM_WORLD`.
    /// MPI is initialised by the library when the program has not; see
    /// `shardrec_comm_create_mpi` in shardrec/comm.h for the thread level, timeouts and
    /// finalisation. Without the MPI plugin (libshardrec_mpi.so) the error is
    /// `Code::Unsupported`. `options.backend` must be 0 or `shardrec_sys::SHARDREC_BACKEND_MPI` (3).
    pub fn from_mpi(mpi_comm_fortran: i64, options: &CommOptions) -> Result<Comm> {
        let mut out = ptr::null_mut();
        options.with_raw(|o| {
            check(unsafe { sys::shardrec_comm_create_mpi(&mut out, mpi_comm_fortran, o) })
        })?;
        Ok(Comm::from_raw(out))
    }

    /// Joins a group of `world_size` ranks as `rank` through `store` (collective, blocking).
    /// Every rank passes a store that reaches the same keys. The store stays alive for the
    /// rest of the process: C communicators may outlive every Rust handle (collections and
    /// meshes keep theirs), and splits use it too.
    pub fn with_store(
        store: std::sync::Arc<dyn Store>,
        world_size: i32,
        rank: i32,
        options: &CommOptions,
    ) -> Result<Comm> {
        let payload: &'static StoreRef = Box::leak(Box::new(store));
        // SAFETY: plain data filled by init.
        let mut cb: sys::shardrec_store_callbacks_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_store_callbacks_init(&mut cb, sys::SHARDREC_STORE_CALLBACKS_VERSION)
        })?;
        cb.set = Some(store_set);
        cb.get = Some(store_get);
        cb.wait = Some(store_wait);
        cb.payload = (payload as *const StoreRef).cast_mut().cast();
        let mut out = ptr::null_mut();
        options.with_raw(|o| {
            // SAFETY: the callbacks are valid for the process; the payload is never freed.
            check(unsafe {
                sys::shardrec_comm_create_with_store(&mut out, &cb, world_size, rank, o)
            })
        })?;
        Ok(Comm::from_raw(out))
    }

    pub fn rank(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_comm_rank(&mut out, self.raw) })?;
        Ok(out)
    }

    pub fn size(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_comm_size(&mut out, self.raw) })?;
        Ok(out)
    }

    /// This rank's index among the ranks on its host.
    pub fn local_rank(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_comm_local_rank(&mut out, self.raw) })?;
        Ok(out)
    }

    /// The number of ranks on this host.
    pub fn local_size(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_comm_local_size(&mut out, self.raw) })?;
        Ok(out)
    }

    /// Pins this process to NUMA node `local_rank * nodes / local_size`'s CPUs and returns the
    /// node (`shardrec_comm_bind_local_numa`: per process, hwloc's node order; `Unsupported`
    /// when the library was built without hwloc).
    pub fn bind_local_numa(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_comm_bind_local_numa(&mut out, self.raw) })?;
        Ok(out)
    }

    /// Collective split; `None` for a negative color.
    pub fn split(&mut self, color: i32, key: i32) -> Result<Option<Comm>> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::shardrec_comm_split(&mut out, self.raw, color, key) })?;
        Ok(if out.is_null() {
            None
        } else {
            Some(Comm::from_raw(out))
        })
    }

    pub fn set_timeout(&mut self, timeout_ms: i64) -> Result<()> {
        check(unsafe { sys::shardrec_comm_set_timeout(self.raw, timeout_ms) })
    }

    /// Tears down the connections of this communicator and of every one split from it: blocked
    /// and later calls fail with `Code::Aborted`, peers with `Code::Remote`. A `Comm` is not
    /// `Sync`, so a thread blocked in a call on it cannot be aborted through it: use
    /// [`Comm::abort_handle`] for that.
    pub fn abort(&self) -> Result<()> {
        check(unsafe { sys::shardrec_comm_abort(self.raw) })
    }

    /// The error that poisoned the communicator, if any.
    pub fn async_error(&self) -> Result<()> {
        check(unsafe { sys::shardrec_comm_async_error(self.raw) })
    }

    pub fn barrier(&mut self) -> Result<()> {
        check(unsafe { sys::shardrec_comm_barrier(self.raw) })
    }

    /// In-place sum over ranks of `buf` (f32).
    pub fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<()> {
        let p = buf.as_mut_ptr().cast();
        check(unsafe {
            sys::shardrec_comm_allreduce(
                self.raw,
                p,
                p,
                buf.len(),
                sys::shardrec_dtype_SHARDREC_DTYPE_FLOAT32 as i32,
                sys::SHARDREC_REDUCE_SUM as i32,
                ptr::null_mut(),
            )
        })
    }
}

/// Reduction of [`Comm::allreduce`] (`SHARDREC_REDUCE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReduceOp {
    #[default]
    Sum = 0,
    Avg = 1,
    Max = 2,
    Min = 3,
}

/// An element type of the dense collectives: its `shardrec_dtype_t`.
pub trait Element: Copy + sealed::Sealed {
    const DTYPE: crate::DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: crate::DType = crate::DType::$d;
        }
    };
}
element!(f32, Float32);
element!(f64, Float64);
element!(i32, Int32);
element!(i64, Int64);
element!(u8, Uint8);

impl Comm {
    /// `recv = op` over the ranks of `send`, element-wise (collective; the same length on every
    /// rank). `recv` must have `send.len()` elements.
    pub fn allreduce<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        if recv.len() != send.len() {
            // Collective: this rank still meets its peers' agreement with NULL buffers, which C
            // refuses on every rank together (else the peers wait out their timeout); this
            // rank's reason is the one to report.
            // SAFETY: NULL buffers with a count of 1 are refused before any memory is touched.
            let _ = unsafe {
                sys::shardrec_comm_allreduce(
                    self.raw,
                    ptr::null(),
                    ptr::null_mut(),
                    1,
                    T::DTYPE as i32,
                    op as i32,
                    ptr::null_mut(),
                )
            };
            return Err(crate::invalid(format!(
                "allreduce: recv has {} elements, send {}",
                recv.len(),
                send.len()
            )));
        }
        // SAFETY: both slices hold send.len() elements of T for the call.
        check(unsafe {
            sys::shardrec_comm_allreduce(
                self.raw,
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                send.len(),
                T::DTYPE as i32,
                op as i32,
                ptr::null_mut(),
            )
        })
    }

    /// In-place `buf = op` over the ranks of `buf` (collective).
    pub fn allreduce_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let p = buf.as_mut_ptr();
        // SAFETY: in place is allowed (comm.h); buf.len() elements of T.
        check(unsafe {
            sys::shardrec_comm_allreduce(
                self.raw,
                p.cast_const().cast(),
                p.cast(),
                buf.len(),
                T::DTYPE as i32,
                op as i32,
                ptr::null_mut(),
            )
        })
    }

    /// Copies `buf` of rank `root` into `buf` on every rank (collective; same length everywhere).
    pub fn broadcast<T: Element>(&mut self, buf: &mut [T], root: i32) -> Result<()> {
        // SAFETY: buf.len() elements of T for the call.
        check(unsafe {
            sys::shardrec_comm_broadcast(
                self.raw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                T::DTYPE as i32,
                root,
                ptr::null_mut(),
            )
        })
    }

    /// Gathers every rank's `send` into `recv`, rank r's block at `r * send.len()` (collective;
    /// `recv` has `size() * send.len()` elements).
    pub fn allgather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let size = self.size()? as usize;
        if recv.len() != size * send.len() {
            // As in allreduce: the refusal still meets the peers' agreement.
            // SAFETY: NULL buffers with a count of 1 are refused before any memory is touched.
            let _ = unsafe {
                sys::shardrec_comm_allgather(
                    self.raw,
                    ptr::null(),
                    ptr::null_mut(),
                    1,
                    T::DTYPE as i32,
                    ptr::null_mut(),
                )
            };
            return Err(crate::invalid(format!(
                "allgather: recv has {} elements, expected {} ranks x {}",
                recv.len(),
                size,
                send.len()
            )));
        }
        // SAFETY: send.len() and size * send.len() elements of T; distinct borrows never overlap.
        check(unsafe {
            sys::shardrec_comm_allgather(
                self.raw,
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                send.len(),
                T::DTYPE as i32,
                ptr::null_mut(),
            )
        })
    }
}
