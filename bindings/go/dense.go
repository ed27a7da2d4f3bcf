// The dense half of a model (shardrec/dense.h): MLPs, the DCN-v2 cross network, DLRM's dot
// interaction, sigmoid + BCE with logits, dense optimizers and the OpenBLAS thread count.

package shardrec

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"shardrec.dev/shardrec/internal/swig"
)

// Activation is a linear layer's activation (shardrec_activation_t).
type Activation int

// Activations (shardrec/dense.h).
const (
	ActivationNone    Activation = 0
	ActivationReLU    Activation = 1
	ActivationSigmoid Activation = 2
)

// DenseMath is the arithmetic of a dense layer on a GPU (shardrec_dense_math_t); the host is
// always fp32.
type DenseMath int

// Math modes (shardrec/dense.h).
const (
	DenseMathFP32 DenseMath = 0 // fp32 throughout (the default)
	DenseMathTF32 DenseMath = 1 // GEMM inputs rounded to tf32 by the tensor cores, fp32 accumulation
	DenseMathBF16 DenseMath = 2 // GEMM inputs rounded to bf16, fp32 accumulation and storage
)

// SetBlasThreads sets OpenBLAS's thread count, PROCESS-WIDE. With several ranks as goroutines
// of one process use 1. Call it while no dense layer runs.
func SetBlasThreads(threads int) error { return swig.Dense_set_blas_threads(threads) }

// BlasThreads returns OpenBLAS's thread count.
func BlasThreads() (int, error) {
	out := make([]int32, 1)
	err := swig.Bind_dense_blas_threads(out)
	return int(out[0]), err
}

// DotInteractionWidth is the dot interaction's output width: dim + F (F + 1) / 2.
func DotInteractionWidth(numSparse, dim int64) (int64, error) {
	out := make([]int64, 1)
	err := swig.Dot_interaction_width(numSparse, dim, out)
	return out[0], err
}

// checkBatchFloats refuses a batch whose batch x perSample floats are not addressable, so the
// length checks after it cannot wrap around (a wrapped length let empty slices through to a
// backward that takes no lengths).
func checkBatchFloats(batch, perSample int64) error {
	if batch < 0 || (perSample > 0 && batch > math.MaxInt64/4/perSample) {
		return &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("batch %d x %d floats per sample overflows", batch, perSample)}
	}
	return nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func checkLen(what string, buf []float32, want int64) error {
	if int64(len(buf)) != want {
		return &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("%s has %d elements, expected %d", what, len(buf), want)}
	}
	return nil
}

// DotInteractionForward writes out[batch, width] from dense[batch, dim] and
// emb[batch, numSparse*dim]: the dense vector, then the pairwise dot products of the strictly
// lower triangle (vector 0 being the dense one).
func DotInteractionForward(dense, emb []float32, batch, numSparse, dim int64, out []float32) error {
	width, err := DotInteractionWidth(numSparse, dim)
	if err != nil {
		return err
	}
	if err := checkBatchFloats(batch, max64(width, numSparse*dim)); err != nil {
		return err
	}
	if err := firstErr(checkLen("dense", dense, batch*dim), checkLen("emb", emb, batch*numSparse*dim),
		checkLen("out", out, batch*width)); err != nil {
		return err
	}
	return swig.Bind_dot_interaction_forward(dense, emb, batch, numSparse, dim, out, batch*width)
}

// DotInteractionBackward overwrites dDense[batch, dim] and dEmb[batch, numSparse*dim] from
// dout[batch, width].
func DotInteractionBackward(dense, emb, dout []float32, batch, numSparse, dim int64,
	dDense, dEmb []float32) error {
	width, err := DotInteractionWidth(numSparse, dim)
	if err != nil {
		return err
	}
	if err := checkBatchFloats(batch, max64(width, numSparse*dim)); err != nil {
		return err
	}
	if err := firstErr(checkLen("dense", dense, batch*dim), checkLen("emb", emb, batch*numSparse*dim),
		checkLen("dout", dout, batch*width), checkLen("dDense", dDense, batch*dim),
		checkLen("dEmb", dEmb, batch*numSparse*dim)); err != nil {
		return err
	}
	return swig.Dot_interaction_backward(dense, emb, dout, batch, numSparse, dim, dDense, dEmb)
}

// BCEWithLogits is sigmoid + binary cross-entropy on logits (labels 0 or 1): it returns the
// summed loss divided by normalizer and, when dlogits is not nil, writes
// (sigmoid(z) - y) / normalizer into it. In data-parallel training the normalizer is the LOCAL
// batch size.
func BCEWithLogits(logits, labels []float32, normalizer float64, dlogits []float32) (float64, error) {
	n := int64(len(logits))
	if err := checkLen("labels", labels, n); err != nil {
		return 0, err
	}
	if dlogits != nil {
		if err := checkLen("dlogits", dlogits, n); err != nil {
			return 0, err
		}
	}
	if n == 0 {
		// The C call needs non-NULL buffers even when empty.
		logits, labels = make([]float32, 1), make([]float32, 1)
		if dlogits != nil {
			dlogits = make([]float32, 1)
		}
	}
	loss := make([]float64, 1)
	err := swig.Bce_with_logits(logits, labels, n, normalizer, loss, dlogits)
	return loss[0], err
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// DenseLayer is a layer with flat parameter tensors (an *MLP or a *DCN): tensor i has a name, an
// element count, parameters and gradients. Backward ACCUMULATES into the gradients.
type DenseLayer interface {
	NumTensors() (int, error)
	TensorName(i int) (string, error)
	TensorCount(i int) (int64, error)
	// Param and Grad return copies of tensor i's parameters and gradients.
	Param(i int) ([]float32, error)
	Grad(i int) ([]float32, error)
	// SetParam overwrites tensor i's parameters (exactly its element count).
	SetParam(i int, values []float32) error
	// BindTensor points tensor i at caller storage: param (its current values are used as
	// they are, nothing is copied) and/or grad (nil keeps that side), each open HostFloats of
	// exactly TensorCount(i) floats. The layer references them until Close or a rebind; a
	// later UseBucketerGrads takes over the gradients. Use it to keep parameters in a flat
	// buffer of your own or to read gradients without copies.
	BindTensor(i int, param, grad *HostFloats) error
	ZeroGrad() error
	// UseBucketerGrads points tensor i's gradient at the bucketer's tensor first+i (no copies);
	// the bucket storage moves once, after the first synced step: call it before every step.
	UseBucketerGrads(ddp *Bucketer, first int) error
	// ref is the layer's handle and lock (nil for a nil layer); addTo adds the layer, whose
	// handle h is held, to a dense optimizer's tensor list.
	ref() *handleRef
	addTo(list, h uintptr) error
}

// layer is what MLP and DCN share: a handle, the kind's calls and the kept forward input.
type layer struct {
	owned handleRef
	// lastInput is read again by the backward: kept reachable until then. Written by Forward
	// under owned's read lock, cleared by Close under its write lock.
	lastInput []float32
	lastBatch int64
	info      func(h uintptr, i int64, name *string, count []int64) error
	copyT     func(h uintptr, i int64, which int, buf []float32, toTensor int) error
	num       func(h uintptr, out []uint64) error
	bindT     func(h uintptr, i int64, param, grad uintptr) error
	// storage keeps the HostFloats of BindTensor reachable while the layer uses them; mu guards
	// it.
	mu      sync.Mutex
	storage map[int][2]*HostFloats
}

// take is Close's part: it waits for the calls in flight, drops the kept input and returns the
// handle, leaving 0.
func (l *layer) take() uintptr {
	l.owned.mu.Lock()
	defer l.owned.mu.Unlock()
	h := l.owned.h
	l.owned.h = 0
	l.lastInput = nil
	return h
}

func (l *layer) NumTensors() (int, error) {
	out := make([]uint64, 1)
	h, done := l.owned.acquire()
	defer done()
	err := l.num(h, out)
	return int(out[0]), err
}

func (l *layer) TensorName(i int) (string, error) {
	if err := negativeIndex("tensor", i); err != nil {
		return "", err
	}
	var name string
	h, done := l.owned.acquire()
	defer done()
	err := l.info(h, int64(i), &name, make([]int64, 1))
	return name, err
}

func (l *layer) TensorCount(i int) (int64, error) {
	if err := negativeIndex("tensor", i); err != nil {
		return 0, err
	}
	var name string
	count := make([]int64, 1)
	h, done := l.owned.acquire()
	defer done()
	err := l.info(h, int64(i), &name, count)
	return count[0], err
}

func (l *layer) read(i, which int) ([]float32, error) {
	n, err := l.TensorCount(i)
	if err != nil {
		return nil, err
	}
	buf := make([]float32, n+1) // +1: a non-nil pointer for empty tensors
	h, done := l.owned.acquire()
	defer done()
	if err := l.copyT(h, int64(i), which, buf, 0); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func (l *layer) Param(i int) ([]float32, error) { return l.read(i, 0) }
func (l *layer) Grad(i int) ([]float32, error)  { return l.read(i, 1) }

func (l *layer) SetParam(i int, values []float32) error {
	n, err := l.TensorCount(i)
	if err != nil {
		return err
	}
	if err := checkLen(fmt.Sprintf("values of tensor %d", i), values, n); err != nil {
		return err
	}
	buf := append(append(make([]float32, 0, n+1), values...), 0)
	h, done := l.owned.acquire()
	defer done()
	return l.copyT(h, int64(i), 0, buf, 1)
}

func (l *layer) BindTensor(i int, param, grad *HostFloats) error {
	n, err := l.TensorCount(i)
	if err != nil {
		return err
	}
	var addr [2]uintptr
	for k, h := range [2]*HostFloats{param, grad} {
		if h == nil {
			continue
		}
		if addr[k] = h.addr(); addr[k] == 0 || int64(h.Len()) != n {
			return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"%s storage of tensor %d must be open HostFloats of %d floats, got %d",
				[2]string{"param", "grad"}[k], i, n, h.Len())}
		}
	}
	h, done := l.owned.acquire()
	defer done()
	if err := l.bindT(h, int64(i), addr[0], addr[1]); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.storage == nil {
		l.storage = map[int][2]*HostFloats{}
	}
	kept := l.storage[i]
	if param != nil {
		kept[0] = param
	}
	if grad != nil {
		kept[1] = grad
	}
	l.storage[i] = kept
	return nil
}

// MLP is a stack of linear layers with bias and activation on OpenBLAS. Its tensors are, per
// layer l, "<name>.<l>.weight" [out, in] (row-major) then "<name>.<l>.bias" [out]. One
// goroutine at a time, except Infer and Close; Close (idempotent, from any goroutine) frees it,
// a finalizer is the safety net.
type MLP struct {
	layer
	in, out int64
	device  DeviceType
}

// NewMLP creates an MLP from inFeatures through widths. activations nil means ReLU on every
// layer but the last, which has none; otherwise one per layer. name "" means "mlp".
func NewMLP(inFeatures int64, widths []int64, activations []Activation, seed uint64,
	name string) (*MLP, error) {
	return NewMLPOn(inFeatures, widths, activations, seed, name, DeviceHost, 0, DenseMathFP32)
}

// NewMLPOn is NewMLP on device (CUDA: ordinal deviceIndex, the default stream) with math. A
// CUDA MLP keeps its tensors in device memory and runs through cuBLASLt; Go slices are host
// memory, so Forward and Backward refuse it (use the C API with device pointers). Without the
// CUDA plugin or a GPU the error has ErrCodeNoDevice; TF32 and BF16 on the host ErrCodeInvalid.
func NewMLPOn(inFeatures int64, widths []int64, activations []Activation, seed uint64,
	name string, device DeviceType, deviceIndex int32, math DenseMath) (*MLP, error) {
	if err := noNUL("name", name); err != nil {
		return nil, err
	}
	var acts []int32
	if activations != nil {
		if len(activations) != len(widths) {
			return nil, &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"%d activations for %d layers", len(activations), len(widths))}
		}
		acts = make([]int32, len(activations))
		for i, a := range activations {
			acts[i] = int32(a)
		}
	}
	out := make([]uintptr, 1)
	if err := swig.Bind_mlp_create_on(out, inFeatures, widths, acts, seed, name, int(device),
		int(deviceIndex), int(math)); err != nil {
		return nil, err
	}
	m := &MLP{layer: layer{owned: handleRef{h: out[0]}, lastBatch: -1,
		info: swig.Bind_mlp_tensor_info, copyT: swig.Bind_mlp_copy_tensor,
		num: swig.Mlp_num_tensors, bindT: swig.Bind_mlp_bind_storage}}
	dims := make([]int64, 2)
	if err := swig.Bind_mlp_dims(out[0], dims[:1], dims[1:]); err != nil {
		swig.Mlp_destroy(out[0])
		return nil, err
	}
	m.in, m.out = dims[0], dims[1]
	where := make([]int32, 2)
	if err := swig.Bind_mlp_device(out[0], where[:1], where[1:]); err != nil {
		swig.Mlp_destroy(out[0])
		return nil, err
	}
	m.device = DeviceType(where[0])
	if m.device != DeviceHost {
		// A CUDA MLP's tensors are device memory: refuse before the C helper would copy them.
		m.copyT = func(uintptr, int64, int, []float32, int) error {
			return m.requireHost("Copying a tensor")
		}
		m.bindT = func(uintptr, int64, uintptr, uintptr) error {
			return m.requireHost("Binding host storage")
		}
	}
	runtime.SetFinalizer(m, closeLeaked((*MLP).Close))
	return m, nil
}

// ref is the MLP's handle and lock; nil for a nil MLP (a NULL handle to C: ErrCodeInvalid).
func (m *MLP) ref() *handleRef {
	if m == nil {
		return nil
	}
	return &m.owned
}

// Close destroys the MLP; later calls fail with SHARDREC_EINVAL. Idempotent, and safe from any
// goroutine: it waits for the calls in flight on other goroutines (Infer calls included).
func (m *MLP) Close() error {
	if m == nil {
		return nil
	}
	if h := m.take(); h != 0 {
		swig.Mlp_destroy(h)
	}
	runtime.SetFinalizer(m, nil)
	return nil
}

// Device is where the MLP's tensors live.
func (m *MLP) Device() DeviceType { return m.device }

func (m *MLP) requireHost(what string) error {
	if m.device != DeviceHost {
		return &Error{Code: ErrCodeInvalid, Message: what +
			" of a CUDA MLP needs device pointers, which the Go binding does not pass; use the C API"}
	}
	return nil
}

// InFeatures and OutFeatures are the input and output widths.
func (m *MLP) InFeatures() int64  { return m.in }
func (m *MLP) OutFeatures() int64 { return m.out }

// Forward writes y[batch, out] from x[batch, in]. The MLP keeps x for the next backward: do not
// change it until then.
func (m *MLP) Forward(x []float32, batch int64, y []float32) error {
	if err := m.requireHost("Forward"); err != nil {
		return err
	}
	if err := firstErr(checkLen("x", x, batch*m.in), checkLen("y", y, batch*m.out)); err != nil {
		return err
	}
	h, done := m.ref().acquire()
	defer done()
	err := swig.Mlp_forward(h, x, batch, y, batch*m.out)
	if err == nil {
		m.lastInput, m.lastBatch = x, batch
	}
	return err
}

// Infer writes y[batch, out] from x[batch, in] for serving (shardrec_mlp_infer): the same
// values as Forward, bit for bit, without keeping anything for a backward. Any number of
// goroutines may call Infer on one MLP at once, each with its own y; no training call
// (Forward, Backward, an optimizer step) may run meanwhile (a training call seen running gives
// ErrCodeUsage), and a Close waits for the Infer calls in flight. A CUDA MLP gives
// ErrCodeUnsupported.
func (m *MLP) Infer(x []float32, batch int64, y []float32) error {
	if err := firstErr(checkLen("x", x, batch*m.in), checkLen("y", y, batch*m.out)); err != nil {
		return err
	}
	h, done := m.ref().acquire()
	defer done()
	return swig.Mlp_infer(h, x, batch, y, batch*m.out)
}

// Backward accumulates the parameter gradients of the last forward from dy[batch, out] and
// writes dx[batch, in] unless dx is nil. With ddp not nil, tensor i is marked ready in the
// bucketer as tensor first+i as soon as its gradient is final (last layer first), so its
// average overlaps the rest of the backward.
func (m *MLP) Backward(dy, dx []float32, ddp *Bucketer, first int) error {
	if err := m.requireHost("Backward"); err != nil {
		return err
	}
	batch := m.lastBatch
	if batch < 0 {
		batch = 0
	}
	if err := checkLen("dy", dy, batch*m.out); err != nil {
		return err
	}
	if dx != nil {
		if err := checkLen("dx", dx, batch*m.in); err != nil {
			return err
		}
	}
	if len(dy) == 0 {
		dy = make([]float32, 1) // a non-NULL pointer: the C call reports the real problem
	}
	h, done := acquireAll(m.ref(), ddp.ref())
	defer done()
	if err := closedArgument("the bucketer", ddp.ref(), h[1]); err != nil {
		return err
	}
	return swig.Bind_mlp_backward(h[0], dy, dx, h[1], int64(first))
}

func (m *MLP) ZeroGrad() error {
	h, done := m.ref().acquire()
	defer done()
	return swig.Mlp_zero_grad(h)
}

func (m *MLP) UseBucketerGrads(ddp *Bucketer, first int) error {
	if err := ddp.checkLayer(m, first); err != nil {
		return err
	}
	h, done := acquireAll(m.ref(), ddp.ref())
	defer done()
	return swig.Bind_mlp_use_ddp_grads(h[0], h[1], int64(first))
}

func (m *MLP) addTo(list, h uintptr) error { return swig.Bind_param_list_add_mlp(list, h) }

// DCN is a low-rank DCN-v2 cross network over inputs of a fixed width:
// x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l. Tensors per layer: "<name>.<l>.V.weight",
// "<name>.<l>.W.weight", "<name>.<l>.W.bias". One goroutine at a time, except Infer and Close.
type DCN struct {
	layer
	width int64
}

// NewDCN creates a cross network; name "" means "cross".
func NewDCN(width int64, numLayers int, rank int64, seed uint64, name string) (*DCN, error) {
	if err := noNUL("name", name); err != nil {
		return nil, err
	}
	out := make([]uintptr, 1)
	if err := swig.Dcn_create(out, width, numLayers, rank, seed, name); err != nil {
		return nil, err
	}
	d := &DCN{layer: layer{owned: handleRef{h: out[0]}, lastBatch: -1,
		info: swig.Bind_dcn_tensor_info, copyT: swig.Bind_dcn_copy_tensor,
		num: swig.Dcn_num_tensors, bindT: swig.Bind_dcn_bind_storage}, width: width}
	runtime.SetFinalizer(d, closeLeaked((*DCN).Close))
	return d, nil
}

// ref is the network's handle and lock; nil for a nil DCN (a NULL handle to C: ErrCodeInvalid).
func (d *DCN) ref() *handleRef {
	if d == nil {
		return nil
	}
	return &d.owned
}

// Close destroys the cross network. Idempotent, and safe from any goroutine: it waits for the
// calls in flight on other goroutines (Infer calls included).
func (d *DCN) Close() error {
	if d == nil {
		return nil
	}
	if h := d.take(); h != 0 {
		swig.Dcn_destroy(h)
	}
	runtime.SetFinalizer(d, nil)
	return nil
}

// Width is the input and output width.
func (d *DCN) Width() int64 { return d.width }

// Forward writes y[batch, width] from x0[batch, width]; x0 is kept for the backward.
func (d *DCN) Forward(x0 []float32, batch int64, y []float32) error {
	n := batch * d.width
	if err := firstErr(checkLen("x0", x0, n), checkLen("y", y, n)); err != nil {
		return err
	}
	h, done := d.ref().acquire()
	defer done()
	err := swig.Dcn_forward(h, x0, batch, y, n)
	if err == nil {
		d.lastInput, d.lastBatch = x0, batch
	}
	return err
}

// Infer writes y[batch, width] from x0[batch, width] for serving (shardrec_dcn_infer), as
// Forward bit for bit and from any number of goroutines at once, with MLP.Infer's rules.
func (d *DCN) Infer(x0 []float32, batch int64, y []float32) error {
	n := batch * d.width
	if err := firstErr(checkLen("x0", x0, n), checkLen("y", y, n)); err != nil {
		return err
	}
	h, done := d.ref().acquire()
	defer done()
	return swig.Dcn_infer(h, x0, batch, y, n)
}

// Backward of the last forward (dx0 required); ddp as in MLP.Backward.
func (d *DCN) Backward(dy, dx0 []float32, ddp *Bucketer, first int) error {
	batch := d.lastBatch
	if batch < 0 {
		batch = 0
	}
	if err := firstErr(checkLen("dy", dy, batch*d.width), checkLen("dx0", dx0, batch*d.width)); err != nil {
		return err
	}
	if len(dy) == 0 {
		dy, dx0 = make([]float32, 1), make([]float32, 1)
	}
	h, done := acquireAll(d.ref(), ddp.ref())
	defer done()
	if err := closedArgument("the bucketer", ddp.ref(), h[1]); err != nil {
		return err
	}
	return swig.Bind_dcn_backward(h[0], dy, dx0, h[1], int64(first))
}

func (d *DCN) ZeroGrad() error {
	h, done := d.ref().acquire()
	defer done()
	return swig.Dcn_zero_grad(h)
}

func (d *DCN) UseBucketerGrads(ddp *Bucketer, first int) error {
	if err := ddp.checkLayer(d, first); err != nil {
		return err
	}
	h, done := acquireAll(d.ref(), ddp.ref())
	defer done()
	return swig.Bind_dcn_use_ddp_grads(h[0], h[1], int64(first))
}

func (d *DCN) addTo(list, h uintptr) error { return swig.Bind_param_list_add_dcn(list, h) }
