// Communicators: in-process groups (ranks as goroutines), unique-id rendezvous and splits.

package shardrec

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"shardrec.dev/shardrec/internal/swig"
)

// Backend is a communicator's collective engine (SHARDREC_BACKEND_*).
type Backend int

// Backends (shardrec/comm.h).
const (
	BackendAuto Backend = 0 // Gloo for host devices, NCCL for CUDA devices
	BackendGloo Backend = 1
	BackendNCCL Backend = 2
	BackendMPI  Backend = 3 // MPI (host memory), only through NewCommMPI
)

// CommOptions are the communicator options; zero values mean the library defaults.
type CommOptions struct {
	TimeoutMs   int64
	Backend     Backend
	DeviceType  DeviceType
	DeviceIndex int
	BindAddress string
	// StoreGraceMs bounds how long closing rank 0 waits for the others to leave its store (0: 2 s).
	StoreGraceMs int64
}

// native is nil with an error for options C cannot take (a NUL byte in BindAddress would cut
// the address short there).
func (o *CommOptions) native() (swig.Comm_options, error) {
	if o != nil {
		if err := noNUL("BindAddress", o.BindAddress); err != nil {
			return nil, err
		}
	}
	n := swig.NewComm_options()
	_ = swig.Comm_options_init(n, uint(swig.COMM_OPTIONS_VERSION))
	if o != nil {
		n.SetTimeout_ms(o.TimeoutMs)
		n.SetBackend(int(o.Backend))
		n.SetDevice_type(int(o.DeviceType))
		n.SetDevice_index(o.DeviceIndex)
		n.SetStore_grace_ms(o.StoreGraceMs)
		if o.BindAddress != "" {
			n.SetBind_address(o.BindAddress)
		}
	}
	return n, nil
}

// Comm is a communicator. One goroutine at a time, except Abort and Close: Abort may be called
// from any goroutine, also while a collective is blocked and while Close waits for it; Close
// from any goroutine waits for the calls and aborts in flight (an Abort after Close is an
// error).
type Comm struct {
	// Held for reading by every call but Abort (also by the calls of other objects that pass
	// the communicator to C) for its whole C call, and for writing by Close.
	owned handleRef
	// Held for reading by each Abort for its whole C call, and for writing by Close while it
	// clears the handle (after it got owned's write lock): the C handle is never destroyed under
	// a running abort, and an Abort never waits behind a blocked collective or a waiting Close.
	abortMu sync.RWMutex
}

func newComm(h uintptr) *Comm {
	c := &Comm{owned: handleRef{h: h}}
	runtime.SetFinalizer(c, closeLeaked((*Comm).Close))
	return c
}

// ref is the communicator's handle and lock; nil for a nil communicator (its calls get
// ErrCodeInvalid).
func (c *Comm) ref() *handleRef {
	if c == nil {
		return nil
	}
	return &c.owned
}

// Close destroys the communicator; later calls fail with SHARDREC_EINVAL. Idempotent, and safe
// from any goroutine: it waits for the calls in flight on other goroutines to return. A
// collective blocked on a peer returns at the timeout (CommOptions.TimeoutMs, SetTimeout) or
// at Abort: to close promptly, Abort first (an Abort from another goroutine also ends the
// collective a waiting Close is held by).
func (c *Comm) Close() error {
	if c == nil {
		return nil
	}
	c.owned.mu.Lock()
	c.abortMu.Lock()
	h := c.owned.h
	c.owned.h = 0
	c.abortMu.Unlock()
	c.owned.mu.Unlock()
	if h != 0 {
		swig.Comm_destroy(h)
	}
	runtime.SetFinalizer(c, nil)
	return nil
}

// LocalGroupMax is the largest group NewLocalGroup makes (C's SHARDREC_LOCAL_GROUP_MAX).
const LocalGroupMax = swig.LOCAL_GROUP_MAX

// NewLocalGroup creates n communicators of one in-process group (n in [1, LocalGroupMax]);
// element i is rank i.
func NewLocalGroup(n int, opts *CommOptions) ([]*Comm, error) {
	// A size outside is refused here with the size given, before n pointers are allocated
	// (1 << 40 ran out of memory in make).
	if n < 1 || n > LocalGroupMax {
		return nil, &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("local group size %d must be in [1, %d]", n, LocalGroupMax)}
	}
	raw := make([]uintptr, n)
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer swig.DeleteComm_options(o)
	if err := swig.Comm_create_local_group(raw, o); err != nil {
		return nil, err
	}
	out := make([]*Comm, n)
	for i, h := range raw {
		out[i] = newComm(h)
	}
	return out, nil
}

// NewUniqueID creates a rendezvous id on rank 0; ship its bytes to every rank.
func NewUniqueID() ([]byte, error) {
	id := make([]byte, swig.UNIQUE_ID_BYTES)
	if err := swig.Comm_unique_id_create(id); err != nil {
		return nil, err
	}
	return id, nil
}

// NewCommFromEnv joins the group its launcher (torchrun, mpirun, srun) placed this process in,
// from the launcher's environment variables (collective; see shardrec_comm_create_from_env).
func NewCommFromEnv(opts *CommOptions) (*Comm, error) {
	out := make([]uintptr, 1)
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer swig.DeleteComm_options(o)
	if err := swig.Comm_create_from_env(out, o); err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// NewCommTCP joins the group whose rank 0 hosts the rendezvous store at addr:port, as rank of
// worldSize, for hosts that hand rank 0's address in code such as Ray Train (collective; see
// shardrec_comm_create_tcp). Only SHARDREC_RENDEZVOUS_TOKEN is read from the environment.
func NewCommTCP(addr string, port, rank, worldSize int, opts *CommOptions) (*Comm, error) {
	if err := noNUL("addr", addr); err != nil {
		return nil, err
	}
	// C takes int32: a larger Go int would wrap into a valid-looking value there.
	for _, a := range []struct {
		name string
		v    int
	}{{"port", port}, {"rank", rank}, {"worldSize", worldSize}} {
		if a.v < math.MinInt32 || a.v > math.MaxInt32 {
			return nil, &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf("%s %d is outside int32", a.name, a.v)}
		}
	}
	out := make([]uintptr, 1)
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer swig.DeleteComm_options(o)
	if err := swig.Comm_create_tcp(out, addr, port, rank, worldSize, o); err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// NewComm joins the group named by id as rank of worldSize (collective).
func NewComm(id []byte, worldSize, rank int, opts *CommOptions) (*Comm, error) {
	if len(id) != swig.UNIQUE_ID_BYTES {
		return nil, &Error{Code: ErrCodeInvalid, Message: "a unique id has 128 bytes"}
	}
	out := make([]uintptr, 1)
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer swig.DeleteComm_options(o)
	if err := swig.Comm_create(out, id, worldSize, rank, o); err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// NewCommMPI creates a communicator over an MPI communicator (collective over its members):
// mpiCommFortran is its Fortran handle (MPI_Comm_c2f), or 0 for MPI_COMM_WORLD. MPI is
// initialised by the library when the program has not; see shardrec_comm_create_mpi in
// shardrec/comm.h for the thread level, timeouts and finalisation. Without the MPI plugin
// (libshardrec_mpi.so) the error has code ErrCodeUnsupported.
func NewCommMPI(mpiCommFortran int64, opts *CommOptions) (*Comm, error) {
	out := make([]uintptr, 1)
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer swig.DeleteComm_options(o)
	if err := swig.Comm_create_mpi(out, mpiCommFortran, o); err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// Store is a key-value store the ranks of a group rendezvous through, instead of a unique id:
// bring your own (etcd, Redis, a launcher's store) and pass it to NewCommWithStore. Set stores
// value under key (overwriting); Get waits up to timeoutMs for key and returns its value, or an
// error when it does not appear (use &Error{Code: ErrCodeTimeout}). Called from the goroutine
// that creates a communicator and from library threads, so implementations must be safe for
// concurrent use. An *Error reports its Code to the library, any other error
// SHARDREC_ERROR; a panic is recovered and reported as SHARDREC_ERROR. The library keeps the
// store for the rest of the process.
type Store = swig.Store

// NewCommWithStore joins a group of worldSize ranks as rank through store (collective): every
// rank passes a store that reaches the same keys.
func NewCommWithStore(store Store, worldSize, rank int, opts *CommOptions) (*Comm, error) {
	if store == nil {
		return nil, &Error{Code: ErrCodeInvalid, Message: "nil store"}
	}
	out := make([]uintptr, 1)
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer swig.DeleteComm_options(o)
	if err := swig.CommCreateWithStore(out, store, worldSize, rank, o); err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// Rank is this rank's index.
func (c *Comm) Rank() (int, error) {
	out := make([]int32, 1)
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_rank(out, h)
	return int(out[0]), err
}

// Size is the number of ranks.
func (c *Comm) Size() (int, error) {
	out := make([]int32, 1)
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_size(out, h)
	return int(out[0]), err
}

// LocalRank is this rank's index among the ranks on its host.
func (c *Comm) LocalRank() (int, error) {
	out := make([]int32, 1)
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_local_rank(out, h)
	return int(out[0]), err
}

// LocalSize is the number of ranks on this host.
func (c *Comm) LocalSize() (int, error) {
	out := make([]int32, 1)
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_local_size(out, h)
	return int(out[0]), err
}

// BindLocalNuma pins this process to NUMA node LocalRank*nodes/LocalSize's CPUs (nodes with
// CPUs, hwloc's order) and returns the node; the binding is per process (see
// shardrec_comm_bind_local_numa). Unsupported when the library was built without hwloc.
func (c *Comm) BindLocalNuma() (int, error) {
	out := make([]int32, 1)
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_bind_local_numa(out, h)
	return int(out[0]), err
}

// Split is collective; it returns nil for a negative color.
func (c *Comm) Split(color, key int) (*Comm, error) {
	out := make([]uintptr, 1)
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_split(out, h, color, key)
	if err != nil || out[0] == 0 {
		return nil, err
	}
	return newComm(out[0]), nil
}

// SetTimeout sets the per-operation timeout in milliseconds.
func (c *Comm) SetTimeout(ms int64) error {
	h, done := c.ref().acquire()
	defer done()
	return swig.Comm_set_timeout(h, ms)
}

// Abort tears down the connections of c and of every communicator split from it; blocked and
// later calls fail with ErrCodeAborted, peers with ErrCodeRemote. Safe from any goroutine at any
// time: it waits neither for the calls in flight nor for a Close waiting for them, so it also
// ends the blocked collective such a Close waits for.
func (c *Comm) Abort() error {
	if c == nil {
		return swig.Comm_abort(0)
	}
	// Not owned's lock: a Close waiting for a blocked collective holds new readers of it back.
	c.abortMu.RLock()
	defer c.abortMu.RUnlock()
	return swig.Comm_abort(c.owned.h)
}

// AsyncError returns the error that poisoned the communicator, if any.
func (c *Comm) AsyncError() error {
	h, done := c.ref().acquire()
	defer done()
	return swig.Comm_async_error(h)
}

// Barrier returns once every rank entered it.
func (c *Comm) Barrier() error {
	h, done := c.ref().acquire()
	defer done()
	return swig.Comm_barrier(h)
}

// ReduceOp is the reduction of Allreduce (SHARDREC_REDUCE_*).
type ReduceOp int

// Reductions (shardrec/comm.h).
const (
	ReduceSum ReduceOp = 0
	ReduceAvg ReduceOp = 1
	ReduceMax ReduceOp = 2
	ReduceMin ReduceOp = 3
)

// Element is an element type of the dense collectives.
type Element interface {
	float32 | float64 | int32 | int64 | uint8
}

func dtypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return DTypeFloat32
	case float64:
		return DTypeFloat64
	case int32:
		return DTypeInt32
	case int64:
		return DTypeInt64
	default:
		return DTypeUint8
	}
}

func addrOf[T Element](s []T) uintptr {
	if len(s) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&s[0]))
}

// Allreduce sets recv to op over the ranks of send, element-wise (collective; every rank
// passes the same length). recv may be send (in place); it must have len(send) elements.
func Allreduce[T Element](c *Comm, send, recv []T, op ReduceOp) error {
	h, done := c.ref().acquire()
	defer done()
	if len(recv) != len(send) {
		// Collective: this rank still meets its peers' agreement, with NULL buffers that C
		// refuses on every rank together (else the peers wait out their timeout); this rank's
		// reason is the one to report.
		_ = swig.Comm_allreduce(h, 0, 0, 1, int(DTypeFloat32), int(ReduceSum))
		return &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("allreduce: recv has %d elements, send %d", len(recv), len(send))}
	}
	err := swig.Comm_allreduce(h, addrOf(send), addrOf(recv), int64(len(send)),
		int(dtypeOf[T]()), int(op))
	runtime.KeepAlive(send)
	runtime.KeepAlive(recv)
	return err
}

// Broadcast copies buf of rank root into buf on every rank (collective; same length everywhere).
func Broadcast[T Element](c *Comm, buf []T, root int) error {
	h, done := c.ref().acquire()
	defer done()
	err := swig.Comm_broadcast(h, addrOf(buf), int64(len(buf)), int(dtypeOf[T]()), root)
	runtime.KeepAlive(buf)
	return err
}

// Allgather gathers every rank's send into recv, rank r's block at r*len(send) (collective;
// recv has Size()*len(send) elements and must not overlap send).
func Allgather[T Element](c *Comm, send, recv []T) error {
	size, err := c.Size()
	if err != nil {
		return err
	}
	h, done := c.ref().acquire()
	defer done()
	if len(recv) != size*len(send) {
		// As in Allreduce: the refusal still meets the peers' agreement.
		_ = swig.Comm_allgather(h, 0, 0, 1, int(DTypeFloat32))
		return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
			"allgather: recv has %d elements, expected %d ranks x %d", len(recv), size, len(send))}
	}
	err = swig.Comm_allgather(h, addrOf(send), addrOf(recv), int64(len(send)),
		int(dtypeOf[T]()))
	runtime.KeepAlive(send)
	runtime.KeepAlive(recv)
	return err
}
