//! 2D mesh (replica.h): a world cut into replica groups x sharding groups, collections sharded
//! over the sharding group and replicated over the replica group, and the replica sync.
use crate::comm::Comm;
use crate::config::Optimizer;
use crate::embedding::{EmbeddingCollection, EmbeddingOptions};
use crate::plan::{take_text, Plan};
use crate::{check, sys, Result};
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// How ranks are laid out (`SHARDREC_MESH_LAYOUT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MeshLayout {
    /// Replica groups on consecutive ranks (the weight sync stays inside a node).
    #[default]
    Default = 0,
    /// Sharding groups on consecutive ranks (the all-to-alls stay inside a node).
    InterHost = 1,
}

/// What a sync averages (`SHARDREC_SYNC_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// The mesh's configured mode (weights and state unless configured otherwise).
    #[default]
    Default = 0,
    WeightsAndState = 1,
    /// Weights only; optimizer state stays per replica.
    WeightsOnly = 2,
}

/// Mesh options; `Default` is a 1D mesh (S = world size) that syncs every step.
#[derive(Clone, Debug, Default)]
pub struct MeshOptions {
    /// S, the ranks of one sharding group; must divide the world size. 0 means the world size.
    pub sharding_group_size: i32,
    pub layout: MeshLayout,
    /// Only used by `describe`; 0 means unknown.
    pub ranks_per_node: i32,
    /// `step` syncs every N steps; 0 means 1.
    pub sync_interval: i32,
    pub sync_mode: SyncMode,
}

/// Where this rank sits in the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MeshCoords {
    /// Index of the sharding group (0..R-1).
    pub sharding_group: i32,
    /// Position in it: the plan rank (0..S-1).
    pub shard_rank: i32,
    /// Index of the replica group (equals the shard rank).
    pub replica_group: i32,
    /// Position in the replica group (0..R-1).
    pub replica_rank: i32,
}

/// Figures of the last sync on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// Bytes this rank contributed: the averaged elements and, with dynamic tables, the rows and
    /// metadata it sent to their merge (after the first, only those of the changed ids).
    pub bytes: u64,
    /// Collectives issued.
    pub collectives: i32,
    /// Syncs since the mesh was created.
    pub syncs: i64,
}

/// One coalesced buffer handed to a sync hook; the hook must leave in it the element-wise
/// average over the replica group.
pub struct SyncBuffer<'a> {
    data: *mut c_void,
    count: usize,
    dtype: i32,
    _marker: std::marker::PhantomData<&'a mut [u8]>,
}

impl SyncBuffer<'_> {
    /// The element type (a `SHARDREC_DTYPE_*` value).
    pub fn dtype(&self) -> i32 {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The elements when the buffer holds f32, else `None`.
    pub fn as_f32_mut(&mut self) -> Option<&mut [f32]> {
        if self.dtype != sys::shardrec_dtype_SHARDREC_DTYPE_FLOAT32 as i32 {
            return None;
        }
        // SAFETY: the library passes `count` f32 values at `data`, valid for this call.
        Some(unsafe { std::slice::from_raw_parts_mut(self.data.cast::<f32>(), self.count) })
    }
}

/// A sync hook: a user collective replacing the built-in all-reduce of `sync`.
pub type SyncHook = Box<dyn FnMut(&mut SyncBuffer<'_>) -> Result<()> + Send>;

unsafe extern "C" fn call_hook(
    data: *mut c_void,
    count: usize,
    dtype: i32,
    payload: *mut c_void,
) -> i32 {
    // SAFETY: payload is the Box<SyncHook> owned by the mesh, alive while it is installed.
    let hook = unsafe { &mut *payload.cast::<SyncHook>() };
    let mut buf = SyncBuffer {
        data,
        count,
        dtype,
        _marker: std::marker::PhantomData,
    };
    // A panic must not unwind into C.
    match catch_unwind(AssertUnwindSafe(|| hook(&mut buf))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.status(),
        Err(_) => sys::shardrec_status_code_SHARDREC_EINTERNAL,
    }
}

/// This rank's view of a 2D mesh. One thread at a time (replica.h), so `Send` but not `Sync`.
/// Communicators it hands out stay valid after it is dropped.
pub struct Mesh {
    pub(crate) raw: *mut sys::shardrec_mesh_t,
    // Declared after `raw` and dropped after the mesh is destroyed (see Drop).
    hook: Option<Box<SyncHook>>,
}

// SAFETY: replica.h allows a mesh to be used from any thread, one at a time; the hook is Send.
unsafe impl Send for Mesh {}

impl Drop for Mesh {
    fn drop(&mut self) {
        // SAFETY: raw came from shardrec_mesh_create and is destroyed once; the hook box is
        // dropped afterwards with the struct's fields.
        unsafe { sys::shardrec_mesh_destroy(self.raw) };
    }
}

impl Mesh {
    /// Splits `world` into the mesh (collective; every rank passes the same options).
    pub fn new(world: &mut Comm, options: &MeshOptions) -> Result<Mesh> {
        // SAFETY: plain data filled by init.
        let mut o: sys::shardrec_mesh_options_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_mesh_options_init(&mut o, sys::SHARDREC_MESH_OPTIONS_VERSION)
        })?;
        o.sharding_group_size = options.sharding_group_size;
        o.layout = options.layout as i32;
        o.ranks_per_node = options.ranks_per_node;
        o.sync_interval = options.sync_interval;
        o.sync_mode = options.sync_mode as i32;
        let mut out = ptr::null_mut();
        check(unsafe { sys::shardrec_mesh_create(&mut out, world.raw, &o) })?;
        Ok(Mesh {
            raw: out,
            hook: None,
        })
    }

    pub fn coords(&self) -> Result<MeshCoords> {
        let mut c = MeshCoords::default();
        check(unsafe {
            sys::shardrec_mesh_coords(
                self.raw,
                &mut c.sharding_group,
                &mut c.shard_rank,
                &mut c.replica_group,
                &mut c.replica_rank,
            )
        })?;
        Ok(c)
    }

    /// A new handle on this rank's sharding-group communicator (its ranks are plan ranks).
    pub fn sharding_comm(&self) -> Result<Comm> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::shardrec_mesh_sharding_comm(&mut out, self.raw) })?;
        Ok(Comm::from_raw(out))
    }

    /// A new handle on this rank's replica-group communicator.
    pub fn replica_comm(&self) -> Result<Comm> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::shardrec_mesh_replica_comm(&mut out, self.raw) })?;
        Ok(Comm::from_raw(out))
    }

    /// The sharding and replica groups (and nodes, when `ranks_per_node` was given) as text.
    pub fn describe(&self) -> Result<String> {
        let mut text = ptr::null_mut();
        let mut len = 0;
        check(unsafe { sys::shardrec_mesh_describe(self.raw, &mut text, &mut len) })?;
        Ok(take_text(text, len))
    }

    /// This rank's part of a collection sharded over its sharding group and replicated over its
    /// replica group (collective over the whole world). The plan is made for S ranks and, like
    /// the seed, is the same on every rank: replicas that start different fail loudly.
    pub fn embedding_collection(
        &mut self,
        plan: &Plan,
        optimizer: &Optimizer,
        options: &EmbeddingOptions<'_>,
    ) -> Result<EmbeddingCollection> {
        let mesh = self.raw;
        EmbeddingCollection::create_with(plan, optimizer, options, |out, opt, o| unsafe {
            sys::shardrec_mesh_embedding_create(out, mesh, plan.raw, opt, o)
        })
    }

    /// Averages `coll`'s shards over the replica group (collective over the world).
    pub fn sync(&mut self, coll: &mut EmbeddingCollection, mode: SyncMode) -> Result<()> {
        check(unsafe { sys::shardrec_mesh_sync(self.raw, coll.raw, mode as i32) })
    }

    /// Counts a training step (call it after every backward); returns whether it synced.
    pub fn step(&mut self, coll: &mut EmbeddingCollection) -> Result<bool> {
        let mut synced = 0;
        check(unsafe { sys::shardrec_mesh_step(self.raw, coll.raw, &mut synced) })?;
        Ok(synced != 0)
    }

    /// Installs (or, with `None`, removes) a hook that replaces the sync all-reduce. It runs on
    /// the syncing thread, once per coalesced float buffer; an `Err` fails the sync with its
    /// status (the C message then names the status, not the Rust message).
    pub fn set_sync_hook(&mut self, hook: Option<SyncHook>) -> Result<()> {
        let mut boxed = hook.map(Box::new);
        let payload = boxed
            .as_mut()
            .map_or(ptr::null_mut(), |b| ptr::addr_of_mut!(**b).cast());
        let f: sys::shardrec_sync_hook_fn = if boxed.is_some() {
            Some(call_hook)
        } else {
            None
        };
        check(unsafe { sys::shardrec_mesh_set_sync_hook(self.raw, f, payload) })?;
        // The previous hook is no longer referenced by the mesh.
        self.hook = boxed;
        Ok(())
    }

    pub fn sync_stats(&self) -> Result<SyncStats> {
        let mut s = SyncStats::default();
        check(unsafe {
            sys::shardrec_mesh_sync_stats(self.raw, &mut s.bytes, &mut s.collectives, &mut s.syncs)
        })?;
        Ok(s)
    }
}
