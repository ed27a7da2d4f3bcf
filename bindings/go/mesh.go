// 2D mesh (replica.h): a world cut into replica groups x sharding groups, collections sharded
// over the sharding group and replicated over the replica group, and the replica sync.

package shardrec

import (
	"runtime"
	"sync"
	"unsafe"

	"shardrec.dev/shardrec/internal/swig"
)

// MeshLayout is how ranks are placed in a 2D mesh (shardrec/replica.h).
type MeshLayout int

// Mesh layouts (shardrec/replica.h).
const (
	MeshLayoutDefault   MeshLayout = 0 // replica groups on consecutive ranks
	MeshLayoutInterHost MeshLayout = 1 // sharding groups on consecutive ranks
)

// SyncMode is what a replica sync averages (shardrec/replica.h).
type SyncMode int

// Sync modes (shardrec/replica.h).
const (
	SyncDefault         SyncMode = 0 // the mesh's configured mode
	SyncWeightsAndState SyncMode = 1
	SyncWeightsOnly     SyncMode = 2
)

// MeshOptions are the mesh options; zero values are the defaults (a 1D mesh, sync every step,
// weights and optimizer state).
type MeshOptions struct {
	ShardingGroupSize int // S; must divide the world size
	Layout            MeshLayout
	RanksPerNode      int // only used by Describe
	SyncInterval      int // Step syncs every N steps
	SyncMode          SyncMode
}

// MeshCoords is where this rank sits: sharding group and plan rank in it, replica group and
// position in it.
type MeshCoords struct {
	ShardingGroup, ShardRank, ReplicaGroup, ReplicaRank int
}

// SyncStats are the figures of the last sync on this rank.
type SyncStats struct {
	Bytes       uint64 // this rank contributed (averaged elements; dynamic tables: merge rows sent)
	Collectives int
	Syncs       int64 // since the mesh was created
}

// Mesh is this rank's view of a 2D mesh. One goroutine at a time, except Close, which is safe
// from any goroutine. Syncs use the built-in collective unless a hook is installed with
// SetSyncHook.
type Mesh struct {
	owned handleRef
	// hookMu is held by SetSyncHook for its whole call and by Close while it releases the hook,
	// so that hook always names the hook the C mesh calls.
	hookMu sync.Mutex
	hook   uintptr // cgo handle of the installed sync hook, 0 for none
}

// ref is the mesh's handle and lock; nil for a nil mesh (its calls get ErrCodeInvalid).
func (m *Mesh) ref() *handleRef {
	if m == nil {
		return nil
	}
	return &m.owned
}

// SyncBuffer is one coalesced buffer handed to a sync hook: Count elements of DType, valid only
// during the call. The hook must leave in it the element-wise AVERAGE over the replica group.
type SyncBuffer struct {
	DType DType
	Count int
	data  unsafe.Pointer
}

// Float32 is the buffer as a slice when it holds float32 (nil otherwise); valid during the call.
func (b *SyncBuffer) Float32() []float32 {
	if b.DType != DTypeFloat32 || b.Count == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(b.data), b.Count)
}

// Bytes is the buffer's raw bytes (Count * DType.Size()); valid during the call.
func (b *SyncBuffer) Bytes() []byte {
	n := b.Count * b.DType.Size()
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.data), n)
}

// SetSyncHook installs hook, a user collective replacing the sync all-reduce (TorchRec's
// custom all-reduce hook): it is called once per coalesced float buffer (integer counters keep
// the built-in collective) and must leave the replica-group average in it. A returned *Error
// fails the sync with its code, any other error with SHARDREC_ERROR; a panic is recovered.
// nil restores the built-in collective. The hook runs inside Sync and Step, which hold the mesh
// and the collection open: it must not Close them (Close would wait for the sync that runs the
// hook) nor call their methods while another goroutine may be closing them.
func (m *Mesh) SetSyncHook(hook func(buf *SyncBuffer) error) error {
	var raw swig.SyncHook
	if hook != nil {
		raw = func(data unsafe.Pointer, count int, dtype int) error {
			return hook(&SyncBuffer{DType: DType(dtype), Count: count, data: data})
		}
	}
	if m == nil {
		_, err := swig.MeshSetSyncHook(0, raw) // refused: a NULL mesh
		return err
	}
	m.hookMu.Lock()
	defer m.hookMu.Unlock()
	mh, done := m.owned.acquire()
	h, err := swig.MeshSetSyncHook(mh, raw)
	done()
	if err != nil {
		return err
	}
	old := m.hook
	m.hook = h
	swig.DeleteHandle(old) // the mesh now calls the new hook (or none)
	return nil
}

// Close destroys the mesh; communicators handed out stay valid, later calls fail with
// SHARDREC_EINVAL. Idempotent, and safe from any goroutine: it waits for the calls in flight
// on other goroutines to return. A sync blocked on a peer returns at the communicators'
// timeout or when they are aborted (Comm.Abort): to close promptly, abort first.
func (m *Mesh) Close() error {
	if m == nil {
		return nil
	}
	if h := m.owned.take(); h != 0 {
		swig.Mesh_destroy(h)
	}
	m.hookMu.Lock()
	hook := m.hook
	m.hook = 0
	m.hookMu.Unlock()
	swig.DeleteHandle(hook)
	runtime.SetFinalizer(m, nil)
	return nil
}

// NewMesh splits world into the mesh (collective; every rank passes the same options). nil
// options give a 1D mesh.
func NewMesh(world *Comm, opts *MeshOptions) (*Mesh, error) {
	o := swig.NewMesh_options()
	defer swig.DeleteMesh_options(o)
	if err := swig.Mesh_options_init(o, uint(swig.MESH_OPTIONS_VERSION)); err != nil {
		return nil, err
	}
	if opts != nil {
		o.SetSharding_group_size(opts.ShardingGroupSize)
		o.SetLayout(int(opts.Layout))
		o.SetRanks_per_node(opts.RanksPerNode)
		o.SetSync_interval(opts.SyncInterval)
		o.SetSync_mode(int(opts.SyncMode))
	}
	out := make([]uintptr, 1)
	wh, done := world.ref().acquire()
	err := swig.Mesh_create(out, wh, o)
	done()
	if err != nil {
		return nil, err
	}
	m := &Mesh{owned: handleRef{h: out[0]}}
	runtime.SetFinalizer(m, closeLeaked((*Mesh).Close))
	return m, nil
}

// Coords returns this rank's coordinates in the mesh.
func (m *Mesh) Coords() (MeshCoords, error) {
	g, p, rg, rr := make([]int32, 1), make([]int32, 1), make([]int32, 1), make([]int32, 1)
	h, done := m.ref().acquire()
	defer done()
	err := swig.Mesh_coords(h, g, p, rg, rr)
	return MeshCoords{int(g[0]), int(p[0]), int(rg[0]), int(rr[0])}, err
}

// ShardingComm is a new handle on this rank's sharding-group communicator (plan ranks).
func (m *Mesh) ShardingComm() (*Comm, error) {
	out := make([]uintptr, 1)
	h, done := m.ref().acquire()
	defer done()
	err := swig.Mesh_sharding_comm(out, h)
	if err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// ReplicaComm is a new handle on this rank's replica-group communicator.
func (m *Mesh) ReplicaComm() (*Comm, error) {
	out := make([]uintptr, 1)
	h, done := m.ref().acquire()
	defer done()
	err := swig.Mesh_replica_comm(out, h)
	if err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// Describe lists the sharding and replica groups (and nodes, when RanksPerNode was given).
func (m *Mesh) Describe() (string, error) {
	var text string
	h, done := m.ref().acquire()
	defer done()
	err := swig.Mesh_describe(h, &text)
	return text, err
}

// NewEmbeddingCollection creates this rank's part of a collection sharded over its sharding
// group and replicated over its replica group (collective over the whole world). The plan is
// made for S ranks and, like the seed, is the same on every rank: replicas that start
// different fail loudly.
func (m *Mesh) NewEmbeddingCollection(plan *Plan, opt *OptimizerConfig,
	opts *EmbeddingOptions) (*EmbeddingCollection, error) {
	return newEmbeddingCollection(plan, m.ref(), opt, opts, swig.Mesh_embedding_create)
}

// Sync averages coll's shards over the replica group (collective over the world); mode is a
// SyncMode, SyncDefault the mesh's configured mode.
func (m *Mesh) Sync(coll *EmbeddingCollection, mode SyncMode) error {
	h, done := acquireAll(m.ref(), coll.ref())
	defer done()
	return swig.Mesh_sync(h[0], h[1], int(mode))
}

// Step counts a training step (call it after every backward) and reports whether it synced.
func (m *Mesh) Step(coll *EmbeddingCollection) (bool, error) {
	synced := make([]int32, 1)
	h, done := acquireAll(m.ref(), coll.ref())
	defer done()
	err := swig.Mesh_step(h[0], h[1], synced)
	return synced[0] != 0, err
}

// SyncStats returns the figures of the last sync on this rank.
func (m *Mesh) SyncStats() (SyncStats, error) {
	bytes, collectives, syncs := make([]uint64, 1), make([]int32, 1), make([]int64, 1)
	h, done := m.ref().acquire()
	defer done()
	err := swig.Mesh_sync_stats(h, bytes, collectives, syncs)
	return SyncStats{Bytes: bytes[0], Collectives: int(collectives[0]), Syncs: syncs[0]}, err
}
