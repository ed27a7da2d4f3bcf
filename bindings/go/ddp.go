// Data-parallel dense training (shardrec/ddp.h): the DDP-style gradient bucketer whose
// averages overlap the backward, and fully sharded parameters (FSDP / ZeRO-3).

package shardrec

import (
	"fmt"
	"runtime"
	"sync"

	"shardrec.dev/shardrec/internal/swig"
)

// Compression is how the bucketer's gradients travel (shardrec_ddp_compression_t).
type Compression int

// Compressions (shardrec/ddp.h).
const (
	CompressionNone Compression = 0 // fp32: the exact rank-ordered mean
	CompressionBF16 Compression = 1 // bfloat16: half the bytes, error bounded as in ddp.h
)

// BucketerOptions are the bucketer options; zero values are the defaults (1 MiB first bucket,
// 25 MiB others, no compression).
type BucketerOptions struct {
	FirstBucketBytes int64
	BucketCapBytes   int64
	Compression      Compression
}

// BucketerStats are a bucketer's counters.
type BucketerStats struct {
	Steps          int64   // synced steps finished
	Buckets        int64   // current number of buckets
	CommSeconds    float64 // time the communication thread spent averaging, all steps
	ExposedSeconds float64 // time Finish waited for communication, all steps
	BytesReduced   int64   // gradient bytes exchanged per synced step
}

// Bucketer groups registered gradients into buckets (reverse registration order); each
// bucket's average over the group starts on a communication thread as soon as all its
// gradients are marked ready, and Finish waits for all of them. NewBucketer, MarkReady, Finish
// and Close are collective: every rank registers the same counts and marks the same gradients
// each step. Gradients live in bucket storage: bind layers to it with UseBucketerGrads before
// every step. One goroutine at a time.
type Bucketer struct {
	mu     sync.Mutex
	h      uintptr
	counts []int64
	// external keeps the HostFloats of SetExternal reachable while the bucketer uses them.
	external map[int]*HostFloats
}

// NewBucketer registers gradients of the given element counts (collective over comm; nil
// opts: the defaults).
func NewBucketer(comm *Comm, counts []int64, opts *BucketerOptions) (*Bucketer, error) {
	var o BucketerOptions
	if opts != nil {
		o = *opts
	}
	out := make([]uintptr, 1)
	err := swig.Bind_ddp_create(out, comm.handle(), counts, o.FirstBucketBytes, o.BucketCapBytes,
		int(o.Compression))
	runtime.KeepAlive(comm)
	if err != nil {
		return nil, err
	}
	b := &Bucketer{h: out[0], counts: append([]int64(nil), counts...)}
	runtime.SetFinalizer(b, closeLeaked("bucketer", (*Bucketer).Close))
	return b, nil
}

func (b *Bucketer) handle() uintptr {
	// A nil handle is 0, which the C call refuses as NULL (EINVAL), instead of a panic.
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h
}

func (b *Bucketer) handleOrZero() uintptr {
	if b == nil {
		return 0
	}
	return b.handle()
}

// Close destroys the bucketer after its in-flight buckets complete (collective). Idempotent.
func (b *Bucketer) Close() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	h := b.h
	b.h = 0
	b.mu.Unlock()
	if h != 0 {
		swig.Ddp_destroy(h)
	}
	runtime.SetFinalizer(b, nil)
	return nil
}

// checkLayer checks that tensor i of l has the element count of gradient first+i.
func (b *Bucketer) checkLayer(l DenseLayer, first int) error {
	if b == nil {
		return &Error{Code: ErrCodeInvalid, Message: "nil bucketer"}
	}
	n, err := l.NumTensors()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		want, err := l.TensorCount(i)
		if err != nil {
			return err
		}
		if first+i < 0 || first+i >= len(b.counts) || b.counts[first+i] != want {
			return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"tensor %d has %d elements, bucketer gradient %d does not match (%d registered)",
				i, want, first+i, len(b.counts))}
		}
	}
	return nil
}

// SetExternal makes gradient index live in grad (exactly its element count) instead of bucket
// storage: the bucket copies it in and out around each exchange, so after Finish it holds the
// group average. Use when the caller owns its gradients. The bucketer references grad until
// Close; keep grad open until then.
func (b *Bucketer) SetExternal(index int, grad *HostFloats) error {
	if index < 0 || index >= len(b.counts) {
		return &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("gradient %d out of range (%d registered)", index, len(b.counts))}
	}
	if grad == nil || int64(grad.Len()) != b.counts[index] || grad.addr() == 0 {
		n := -1
		if grad != nil {
			n = grad.Len()
		}
		return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
			"external gradient %d must be open HostFloats of %d elements, got %d", index,
			b.counts[index], n)}
	}
	err := swig.Bind_ddp_set_external(b.handle(), int64(index), grad.addr())
	runtime.KeepAlive(b)
	if err == nil {
		b.mu.Lock()
		if b.external == nil {
			b.external = map[int]*HostFloats{}
		}
		b.external[index] = grad
		b.mu.Unlock()
	}
	return err
}

// ZeroGrad zeroes every gradient.
func (b *Bucketer) ZeroGrad() error {
	defer runtime.KeepAlive(b)
	return swig.Ddp_zero_grad(b.handle())
}

// MarkReady says gradient index is final for this step; it launches every bucket now complete.
func (b *Bucketer) MarkReady(index int) error {
	defer runtime.KeepAlive(b)
	return swig.Ddp_mark_ready(b.handle(), int64(index))
}

// Finish waits for every bucket: the gradients then hold the group average. A gradient some
// rank never marked ready (with sync on) fails the step on every rank with ErrCodeUsage; that
// step's gradients must not be applied on any rank.
func (b *Bucketer) Finish() error {
	defer runtime.KeepAlive(b)
	return swig.Ddp_finish(b.handle())
}

// SetSync with false makes the following steps only accumulate locally (no_sync); every rank
// switches at the same step.
func (b *Bucketer) SetSync(enabled bool) error {
	defer runtime.KeepAlive(b)
	v := 0
	if enabled {
		v = 1
	}
	return swig.Ddp_set_sync(b.handle(), v)
}

// Stats returns the counters.
func (b *Bucketer) Stats() (BucketerStats, error) {
	i := make([]int64, 3)
	f := make([]float64, 2)
	err := swig.Bind_ddp_stats(b.handle(), i[0:1], i[1:2], f[0:1], f[1:2], i[2:3])
	runtime.KeepAlive(b)
	return BucketerStats{Steps: i[0], Buckets: i[1], CommSeconds: f[0], ExposedSeconds: f[1],
		BytesReduced: i[2]}, err
}

// Bucket returns the tensor indices of bucket i in launch order.
func (b *Bucketer) Bucket(i int) ([]int, error) {
	defer runtime.KeepAlive(b)
	size := make([]uint64, 1)
	if err := swig.Bind_ddp_bucket_size(b.handle(), int64(i), size); err != nil {
		return nil, err
	}
	out := make([]int, size[0])
	one := make([]uint64, 1)
	for p := range out {
		if err := swig.Bind_ddp_bucket_tensor(b.handle(), int64(i), int64(p), one); err != nil {
			return nil, err
		}
		out[p] = int(one[0])
	}
	return out, nil
}

// FSDP holds parameters grouped into flat units, each rank keeping 1/W of every unit's
// parameters, gradients and optimizer state. Per step: Gather a unit's full parameters
// (collective, optionally prefetching the next), compute, Release; accumulate its gradient
// with AddGrad, ReduceGrad it, and Step applies the optimizer to the local shards. The Go layer
// copies between the library's buffers and Go's. One goroutine at a time.
type FSDP struct {
	mu     sync.Mutex
	h      uintptr
	counts []int64
}

// NewFSDP creates fully sharded parameters (collective over comm): initial holds every unit's
// full initial values, units one after another, identical on every rank.
func NewFSDP(comm *Comm, unitCounts []int64, initial []float32, opt *OptimizerConfig) (*FSDP, error) {
	var total int64
	for _, c := range unitCounts {
		if c > 0 {
			total += c
		}
	}
	if err := checkLen("initial", initial, total); err != nil {
		return nil, err
	}
	o, err := newNativeOptimizer(opt)
	if err != nil {
		return nil, err
	}
	defer swig.DeleteOptimizer_config(o)
	out := make([]uintptr, 1)
	err = swig.Bind_fsdp_create(out, comm.handle(), unitCounts, initial, o)
	runtime.KeepAlive(comm)
	if err != nil {
		return nil, err
	}
	f := &FSDP{h: out[0], counts: append([]int64(nil), unitCounts...)}
	runtime.SetFinalizer(f, closeLeaked("FSDP", (*FSDP).Close))
	return f, nil
}

func (f *FSDP) handle() uintptr {
	// A nil handle is 0, which the C call refuses as NULL (EINVAL), instead of a panic.
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

// Close destroys the handle after in-flight exchanges complete. Idempotent.
func (f *FSDP) Close() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	h := f.h
	f.h = 0
	f.mu.Unlock()
	if h != 0 {
		swig.Fsdp_destroy(h)
	}
	runtime.SetFinalizer(f, nil)
	return nil
}

func (f *FSDP) count(unit int) (int64, error) {
	if unit < 0 || unit >= len(f.counts) {
		return 0, &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("unit %d out of range (%d units)", unit, len(f.counts))}
	}
	return f.counts[unit], nil
}

// Gather returns a copy of unit's full parameters (collective); prefetch >= 0 also starts
// gathering that unit. The unit stays gathered until Release.
func (f *FSDP) Gather(unit, prefetch int) ([]float32, error) {
	n, err := f.count(unit)
	if err != nil {
		return nil, err
	}
	buf := make([]float32, n+1)
	err = swig.Bind_fsdp_gather(f.handle(), int64(unit), int64(prefetch), buf, n)
	runtime.KeepAlive(f)
	return buf[:n], err
}

// Release frees unit's full parameters.
func (f *FSDP) Release(unit int) error {
	defer runtime.KeepAlive(f)
	return swig.Fsdp_release(f.handle(), int64(unit))
}

// AddGrad adds grad (the unit's element count) into unit's full gradient of this step.
func (f *FSDP) AddGrad(unit int, grad []float32) error {
	n, err := f.count(unit)
	if err != nil {
		return err
	}
	if err := checkLen("grad", grad, n); err != nil {
		return err
	}
	if n == 0 {
		grad = make([]float32, 1)
	}
	defer runtime.KeepAlive(f)
	return swig.Bind_fsdp_add_grad(f.handle(), int64(unit), grad, n)
}

// ReduceGrad starts averaging unit's gradient into this rank's shard (collective).
func (f *FSDP) ReduceGrad(unit int) error {
	defer runtime.KeepAlive(f)
	return swig.Fsdp_reduce_grad(f.handle(), int64(unit))
}

// Step waits for every reduction and applies the optimizer to the local shards.
func (f *FSDP) Step() error {
	defer runtime.KeepAlive(f)
	return swig.Fsdp_step(f.handle())
}

// Shard returns a copy of this rank's slice of unit and its offset in the unit.
func (f *FSDP) Shard(unit int) ([]float32, int64, error) {
	defer runtime.KeepAlive(f)
	r := make([]int64, 2)
	if err := swig.Bind_fsdp_shard_range(f.handle(), int64(unit), r[0:1], r[1:2]); err != nil {
		return nil, 0, err
	}
	buf := make([]float32, r[1]+1)
	if err := swig.Bind_fsdp_read_shard(f.handle(), int64(unit), buf); err != nil {
		return nil, 0, err
	}
	return buf[:r[1]], r[0], nil
}

// Memory returns the host bytes this rank holds now and at most so far.
func (f *FSDP) Memory() (current, peak int64, err error) {
	r := make([]int64, 2)
	err = swig.Bind_fsdp_memory(f.handle(), r[0:1], r[1:2])
	runtime.KeepAlive(f)
	return r[0], r[1], err
}
