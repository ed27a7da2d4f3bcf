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
// every step. One goroutine at a time, except Close, which is safe from any goroutine.
type Bucketer struct {
	owned  handleRef
	counts []int64
	// external keeps the HostFloats of SetExternal reachable while the bucketer uses them; mu
	// guards it.
	mu       sync.Mutex
	external map[int]*HostFloats
}

// ref is the bucketer's handle and lock; nil for a nil bucketer (its calls get ErrCodeInvalid,
// and the layers' Backward takes it as no bucketer).
func (b *Bucketer) ref() *handleRef {
	if b == nil {
		return nil
	}
	return &b.owned
}

// NewBucketer registers gradients of the given element counts (collective over comm; nil
// opts: the defaults).
func NewBucketer(comm *Comm, counts []int64, opts *BucketerOptions) (*Bucketer, error) {
	var o BucketerOptions
	if opts != nil {
		o = *opts
	}
	out := make([]uintptr, 1)
	ch, done := comm.ref().acquire()
	err := swig.Bind_ddp_create(out, ch, counts, o.FirstBucketBytes, o.BucketCapBytes,
		int(o.Compression))
	done()
	if err != nil {
		return nil, err
	}
	b := &Bucketer{owned: handleRef{h: out[0]}, counts: append([]int64(nil), counts...)}
	runtime.SetFinalizer(b, closeLeaked((*Bucketer).Close))
	return b, nil
}

// Close destroys the bucketer after its in-flight buckets complete (collective). Idempotent,
// and safe from any goroutine: it first waits for the calls in flight on other goroutines to
// return (a Finish blocked on a peer returns at the communicator's timeout or at Comm.Abort:
// to close promptly, abort first).
func (b *Bucketer) Close() error {
	if b == nil {
		return nil
	}
	if h := b.owned.take(); h != 0 {
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
	if b == nil {
		return &Error{Code: ErrCodeInvalid, Message: "nil bucketer"}
	}
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
	h, done := b.ref().acquire()
	defer done()
	err := swig.Bind_ddp_set_external(h, int64(index), grad.addr())
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
	h, done := b.ref().acquire()
	defer done()
	return swig.Ddp_zero_grad(h)
}

// MarkReady says gradient index is final for this step; it launches every bucket now complete.
func (b *Bucketer) MarkReady(index int) error {
	if err := negativeIndex("gradient", index); err != nil {
		return err
	}
	h, done := b.ref().acquire()
	defer done()
	return swig.Ddp_mark_ready(h, int64(index))
}

// Finish waits for every bucket: the gradients then hold the group average. A gradient some
// rank never marked ready (with sync on) fails the step on every rank with ErrCodeUsage; that
// step's gradients must not be applied on any rank.
func (b *Bucketer) Finish() error {
	h, done := b.ref().acquire()
	defer done()
	return swig.Ddp_finish(h)
}

// SetSync with false makes the following steps only accumulate locally (no_sync); every rank
// switches at the same step.
func (b *Bucketer) SetSync(enabled bool) error {
	h, done := b.ref().acquire()
	defer done()
	v := 0
	if enabled {
		v = 1
	}
	return swig.Ddp_set_sync(h, v)
}

// Stats returns the counters.
func (b *Bucketer) Stats() (BucketerStats, error) {
	i := make([]int64, 3)
	f := make([]float64, 2)
	h, done := b.ref().acquire()
	defer done()
	err := swig.Bind_ddp_stats(h, i[0:1], i[1:2], f[0:1], f[1:2], i[2:3])
	return BucketerStats{Steps: i[0], Buckets: i[1], CommSeconds: f[0], ExposedSeconds: f[1],
		BytesReduced: i[2]}, err
}

// Bucket returns the tensor indices of bucket i in launch order.
func (b *Bucketer) Bucket(i int) ([]int, error) {
	if err := negativeIndex("bucket", i); err != nil {
		return nil, err
	}
	h, done := b.ref().acquire()
	defer done()
	size := make([]uint64, 1)
	if err := swig.Bind_ddp_bucket_size(h, int64(i), size); err != nil {
		return nil, err
	}
	out := make([]int, size[0])
	one := make([]uint64, 1)
	for p := range out {
		if err := swig.Bind_ddp_bucket_tensor(h, int64(i), int64(p), one); err != nil {
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
// copies between the library's buffers and Go's. One goroutine at a time, except Close, which
// is safe from any goroutine.
type FSDP struct {
	owned  handleRef
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
	out := make([]uintptr, 1)
	ch, done := comm.ref().acquire()
	refused := checkLen("initial", initial, total)
	var o swig.Optimizer_config
	if refused == nil {
		o, refused = newNativeOptimizer(opt)
	}
	if refused != nil {
		// Creation is collective: this rank still meets its peers' agreement, with a NULL
		// optimizer that C refuses on every rank together (else the peers wait out their
		// timeout); this rank's reason is the one to report.
		_ = swig.Bind_fsdp_create(out, ch, nil, nil, swig.SwigcptrOptimizer_config(0))
		done()
		return nil, refused
	}
	defer swig.DeleteOptimizer_config(o)
	err := swig.Bind_fsdp_create(out, ch, unitCounts, initial, o)
	done()
	if err != nil {
		return nil, err
	}
	f := &FSDP{owned: handleRef{h: out[0]}, counts: append([]int64(nil), unitCounts...)}
	runtime.SetFinalizer(f, closeLeaked((*FSDP).Close))
	return f, nil
}

// ref is the handle and its lock; nil for a nil FSDP (its calls get ErrCodeInvalid).
func (f *FSDP) ref() *handleRef {
	if f == nil {
		return nil
	}
	return &f.owned
}

// Close destroys the handle after in-flight exchanges complete. Idempotent, and safe from any
// goroutine: it first waits for the calls in flight on other goroutines to return (a
// collective blocked on a peer returns at the communicator's timeout or at Comm.Abort: to
// close promptly, abort first).
func (f *FSDP) Close() error {
	if f == nil {
		return nil
	}
	if h := f.owned.take(); h != 0 {
		swig.Fsdp_destroy(h)
	}
	runtime.SetFinalizer(f, nil)
	return nil
}

func (f *FSDP) count(unit int) (int64, error) {
	if f == nil {
		return 0, &Error{Code: ErrCodeInvalid, Message: "nil FSDP"}
	}
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
	h, done := f.ref().acquire()
	defer done()
	err = swig.Bind_fsdp_gather(h, int64(unit), int64(prefetch), buf, n)
	return buf[:n], err
}

// Release frees unit's full parameters.
func (f *FSDP) Release(unit int) error {
	h, done := f.ref().acquire()
	defer done()
	return swig.Fsdp_release(h, int64(unit))
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
	h, done := f.ref().acquire()
	defer done()
	return swig.Bind_fsdp_add_grad(h, int64(unit), grad, n)
}

// ReduceGrad starts averaging unit's gradient into this rank's shard (collective).
func (f *FSDP) ReduceGrad(unit int) error {
	h, done := f.ref().acquire()
	defer done()
	return swig.Fsdp_reduce_grad(h, int64(unit))
}

// Step waits for every reduction and applies the optimizer to the local shards.
func (f *FSDP) Step() error {
	h, done := f.ref().acquire()
	defer done()
	return swig.Fsdp_step(h)
}

// Shard returns a copy of this rank's slice of unit and its offset in the unit.
func (f *FSDP) Shard(unit int) ([]float32, int64, error) {
	h, done := f.ref().acquire()
	defer done()
	r := make([]int64, 2)
	if err := swig.Bind_fsdp_shard_range(h, int64(unit), r[0:1], r[1:2]); err != nil {
		return nil, 0, err
	}
	buf := make([]float32, r[1]+1)
	if err := swig.Bind_fsdp_read_shard(h, int64(unit), buf); err != nil {
		return nil, 0, err
	}
	return buf[:r[1]], r[0], nil
}

// Memory returns the host bytes this rank holds now and at most so far.
func (f *FSDP) Memory() (current, peak int64, err error) {
	r := make([]int64, 2)
	h, done := f.ref().acquire()
	defer done()
	err = swig.Bind_fsdp_memory(h, r[0:1], r[1:2])
	return r[0], r[1], err
}
