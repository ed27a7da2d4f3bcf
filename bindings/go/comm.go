// Communicators: in-process groups (ranks as goroutines), unique-id rendezvous and splits.

package shardrec

import (
	"runtime"
	"sync"

	"shardrec.dev/shardrec/internal/swig"
)

// Backend is a communicator's collective engine (SHARDREC_BACKEND_*).
type Backend int

// Backends (shardrec/comm.h).
const (
	BackendAuto Backend = 0 // Gloo for host devices, NCCL for CUDA devices
	BackendGloo Backend = 1
	BackendNCCL Backend = 2
)

// CommOptions are the communicator options; zero values mean the library defaults.
type CommOptions struct {
	TimeoutMs   int64
	Backend     Backend
	DeviceType  DeviceType
	DeviceIndex int
	BindAddress string
}

func (o *CommOptions) native() swig.Comm_options {
	n := swig.NewComm_options()
	_ = swig.Comm_options_init(n, uint(swig.COMM_OPTIONS_VERSION))
	if o != nil {
		n.SetTimeout_ms(o.TimeoutMs)
		n.SetBackend(int(o.Backend))
		n.SetDevice_type(int(o.DeviceType))
		n.SetDevice_index(o.DeviceIndex)
		if o.BindAddress != "" {
			n.SetBind_address(o.BindAddress)
		}
	}
	return n
}

// Comm is a communicator. One goroutine at a time; Abort may be called from any goroutine.
type Comm struct {
	mu sync.Mutex
	h  uintptr
}

func newComm(h uintptr) *Comm {
	c := &Comm{h: h}
	runtime.SetFinalizer(c, (*Comm).Close)
	return c
}

func (c *Comm) handle() uintptr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h
}

// Close destroys the communicator; later calls fail with SHARDREC_EINVAL. Idempotent.
func (c *Comm) Close() error {
	c.mu.Lock()
	h := c.h
	c.h = 0
	c.mu.Unlock()
	if h != 0 {
		swig.Comm_destroy(h)
	}
	runtime.SetFinalizer(c, nil)
	return nil
}

// NewLocalGroup creates n communicators of one in-process group; element i is rank i.
func NewLocalGroup(n int, opts *CommOptions) ([]*Comm, error) {
	if n < 0 {
		n = 0
	}
	raw := make([]uintptr, n)
	o := opts.native()
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

// NewComm joins the group named by id as rank of worldSize (collective).
func NewComm(id []byte, worldSize, rank int, opts *CommOptions) (*Comm, error) {
	if len(id) != swig.UNIQUE_ID_BYTES {
		return nil, &Error{Code: ErrCodeInvalid, Message: "a unique id has 128 bytes"}
	}
	out := make([]uintptr, 1)
	o := opts.native()
	defer swig.DeleteComm_options(o)
	if err := swig.Comm_create(out, id, worldSize, rank, o); err != nil {
		return nil, err
	}
	return newComm(out[0]), nil
}

// Rank is this rank's index.
func (c *Comm) Rank() (int, error) {
	out := make([]int32, 1)
	err := swig.Comm_rank(out, c.handle())
	runtime.KeepAlive(c)
	return int(out[0]), err
}

// Size is the number of ranks.
func (c *Comm) Size() (int, error) {
	out := make([]int32, 1)
	err := swig.Comm_size(out, c.handle())
	runtime.KeepAlive(c)
	return int(out[0]), err
}

// Split is collective; it returns nil for a negative color.
func (c *Comm) Split(color, key int) (*Comm, error) {
	out := make([]uintptr, 1)
	err := swig.Comm_split(out, c.handle(), color, key)
	runtime.KeepAlive(c)
	if err != nil || out[0] == 0 {
		return nil, err
	}
	return newComm(out[0]), nil
}

// SetTimeout sets the per-operation timeout in milliseconds.
func (c *Comm) SetTimeout(ms int64) error {
	defer runtime.KeepAlive(c)
	return swig.Comm_set_timeout(c.handle(), ms)
}

// Abort tears down the connections; peers fail promptly. Safe from any goroutine.
func (c *Comm) Abort() error {
	defer runtime.KeepAlive(c)
	return swig.Comm_abort(c.handle())
}

// AsyncError returns the error that poisoned the communicator, if any.
func (c *Comm) AsyncError() error {
	defer runtime.KeepAlive(c)
	return swig.Comm_async_error(c.handle())
}

// Barrier returns once every rank entered it.
func (c *Comm) Barrier() error {
	defer runtime.KeepAlive(c)
	return swig.Comm_barrier(c.handle())
}
