// The dense half of a model (shardrec/dense.h): MLPs, the DCN-v2 cross network, DLRM's dot
// interaction, sigmoid + BCE with logits, dense optimizers and the OpenBLAS thread count.

package shardrec

import (
	"fmt"
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
	addTo(list uintptr) error
}

// layer is what MLP and DCN share: a handle, the kind's calls and the kept forward input.
type layer struct {
	mu        sync.Mutex
	h         uintptr
	lastInput []float32 // read again by the backward: kept reachable until then
	lastBatch int64
	info      func(h uintptr, i int64, name *string, count []int64) error
	copyT     func(h uintptr, i int64, which int, buf []float32, toTensor int) error
	num       func(h uintptr, out []uint64) error
	bindT     func(h uintptr, i int64, param, grad uintptr) error
	// storage keeps the HostFloats of BindTensor reachable while the layer uses them.
	storage map[int][2]*HostFloats
}

func (l *layer) handle() uintptr {
	// A nil handle is 0, which the C call refuses as NULL (EINVAL), instead of a panic.
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h
}

func (l *layer) NumTensors() (int, error) {
	out := make([]uint64, 1)
	err := l.num(l.handle(), out)
	return int(out[0]), err
}

func (l *layer) TensorName(i int) (string, error) {
	var name string
	err := l.info(l.handle(), int64(i), &name, make([]int64, 1))
	return name, err
}

func (l *layer) TensorCount(i int) (int64, error) {
	var name string
	count := make([]int64, 1)
	err := l.info(l.handle(), int64(i), &name, count)
	return count[0], err
}

func (l *layer) read(i, which int) ([]float32, error) {
	n, err := l.TensorCount(i)
	if err != nil {
		return nil, err
	}
	buf := make([]float32, n+1) // +1: a non-nil pointer for empty tensors
	if err := l.copyT(l.handle(), int64(i), which, buf, 0); err != nil {
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
	return l.copyT(l.handle(), int64(i), 0, buf, 1)
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
	if err := l.bindT(l.handle(), int64(i), addr[0], addr[1]); err != nil {
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
// goroutine at a time; Close (idempotent) frees it, a finalizer is the safety net.
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
	m := &MLP{layer: layer{h: out[0], lastBatch: -1, info: swig.Bind_mlp_tensor_info,
		copyT: swig.Bind_mlp_copy_tensor, num: swig.Mlp_num_tensors,
		bindT: swig.Bind_mlp_bind_storage}}
	dims := make([]int64, 2)
	if err := swig.Bind_mlp_dims(m.h, dims[:1], dims[1:]); err != nil {
		swig.Mlp_destroy(m.h)
		return nil, err
	}
	m.in, m.out = dims[0], dims[1]
	where := make([]int32, 2)
	if err := swig.Bind_mlp_device(m.h, where[:1], where[1:]); err != nil {
		swig.Mlp_destroy(m.h)
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
	runtime.SetFinalizer(m, closeLeaked("MLP", (*MLP).Close))
	return m, nil
}

// Close destroys the MLP; later calls fail with SHARDREC_EINVAL. Idempotent.
func (m *MLP) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	h := m.h
	m.h = 0
	m.lastInput = nil
	m.mu.Unlock()
	if h != 0 {
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
	err := swig.Mlp_forward(m.handle(), x, batch, y, batch*m.out)
	if err == nil {
		m.lastInput, m.lastBatch = x, batch
	}
	runtime.KeepAlive(m)
	return err
}

// Infer writes y[batch, out] from x[batch, in] for serving (shardrec_mlp_infer): the same
// values as Forward, bit for bit, without keeping anything for a backward. Any number of
// goroutines may call Infer on one MLP at once, each with its own y; no training call
// (Forward, Backward, an optimizer step) and no Close may run meanwhile (a training call seen
// running gives ErrCodeUsage). A CUDA MLP gives ErrCodeUnsupported.
func (m *MLP) Infer(x []float32, batch int64, y []float32) error {
	if err := firstErr(checkLen("x", x, batch*m.in), checkLen("y", y, batch*m.out)); err != nil {
		return err
	}
	err := swig.Mlp_infer(m.handle(), x, batch, y, batch*m.out)
	runtime.KeepAlive(m)
	return err
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
	err := swig.Bind_mlp_backward(m.handle(), dy, dx, ddp.handleOrZero(), int64(first))
	runtime.KeepAlive(m)
	runtime.KeepAlive(ddp)
	return err
}

func (m *MLP) ZeroGrad() error {
	defer runtime.KeepAlive(m)
	return swig.Mlp_zero_grad(m.handle())
}

func (m *MLP) UseBucketerGrads(ddp *Bucketer, first int) error {
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(ddp)
	if err := ddp.checkLayer(m, first); err != nil {
		return err
	}
	return swig.Bind_mlp_use_ddp_grads(m.handle(), ddp.handle(), int64(first))
}

func (m *MLP) addTo(list uintptr) error { return swig.Bind_param_list_add_mlp(list, m.handle()) }

// DCN is a low-rank DCN-v2 cross network over inputs of a fixed width:
// x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l. Tensors per layer: "<name>.<l>.V.weight",
// "<name>.<l>.W.weight", "<name>.<l>.W.bias". One goroutine at a time.
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
	d := &DCN{layer: layer{h: out[0], lastBatch: -1, info: swig.Bind_dcn_tensor_info,
		copyT: swig.Bind_dcn_copy_tensor, num: swig.Dcn_num_tensors,
		bindT: swig.Bind_dcn_bind_storage}, width: width}
	runtime.SetFinalizer(d, closeLeaked("DCN", (*DCN).Close))
	return d, nil
}

// Close destroys the cross network. Idempotent.
func (d *DCN) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	h := d.h
	d.h = 0
	d.lastInput = nil
	d.mu.Unlock()
	if h != 0 {
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
	err := swig.Dcn_forward(d.handle(), x0, batch, y, n)
	if err == nil {
		d.lastInput, d.lastBatch = x0, batch
	}
	runtime.KeepAlive(d)
	return err
}

// Infer writes y[batch, width] from x0[batch, width] for serving (shardrec_dcn_infer), as
// Forward bit for bit and from any number of goroutines at once, with MLP.Infer's rules.
func (d *DCN) Infer(x0 []float32, batch int64, y []float32) error {
	n := batch * d.width
	if err := firstErr(checkLen("x0", x0, n), checkLen("y", y, n)); err != nil {
		return err
	}
	err := swig.Dcn_infer(d.handle(), x0, batch, y, n)
	runtime.KeepAlive(d)
	return err
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
	err := swig.Bind_dcn_backward(d.handle(), dy, dx0, ddp.handleOrZero(), int64(first))
	runtime.KeepAlive(d)
	runtime.KeepAlive(ddp)
	return err
}

func (d *DCN) ZeroGrad() error {
	defer runtime.KeepAlive(d)
	return swig.Dcn_zero_grad(d.handle())
}

func (d *DCN) UseBucketerGrads(ddp *Bucketer, first int) error {
	defer runtime.KeepAlive(d)
	defer runtime.KeepAlive(ddp)
	if err := ddp.checkLayer(d, first); err != nil {
		return err
	}
	return swig.Bind_dcn_use_ddp_grads(d.handle(), ddp.handle(), int64(first))
}

func (d *DCN) addTo(list uintptr) error { return swig.Bind_param_list_add_dcn(list, d.handle()) }

// DenseOptimizer applies SGD, Adagrad or Adam/AdamW (WeightDecayDecoupled) to dense layers,
// with the embedding optimizers' per-element rules; row-wise types and LAMB are refused. State
// is kept per tensor position: step over the same layers in the same order every time. One
// goroutine at a time.
type DenseOptimizer struct {
	mu sync.Mutex
	h  uintptr
}

// NewDenseOptimizer creates an optimizer (nil opt: the C defaults, SGD).
func NewDenseOptimizer(opt *OptimizerConfig) (*DenseOptimizer, error) {
	o, err := newNativeOptimizer(opt)
	if err != nil {
		return nil, err
	}
	defer swig.DeleteOptimizer_config(o)
	out := make([]uintptr, 1)
	if err := swig.Dense_optimizer_create(out, o); err != nil {
		return nil, err
	}
	d := &DenseOptimizer{h: out[0]}
	runtime.SetFinalizer(d, closeLeaked("dense optimizer", (*DenseOptimizer).Close))
	return d, nil
}

func (d *DenseOptimizer) handle() uintptr {
	// A nil handle is 0, which the C call refuses as NULL (EINVAL), instead of a panic.
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.h
}

// Close destroys the optimizer. Idempotent.
func (d *DenseOptimizer) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	h := d.h
	d.h = 0
	d.mu.Unlock()
	if h != 0 {
		swig.Dense_optimizer_destroy(h)
	}
	runtime.SetFinalizer(d, nil)
	return nil
}

// Step updates every tensor of layers, in order, from its gradient.
func (d *DenseOptimizer) Step(layers ...DenseLayer) error {
	list := swig.Bind_param_list_new()
	if list == 0 {
		return &Error{Code: ErrCodeNoMemory, Message: "dense optimizer tensor list"}
	}
	defer swig.Bind_param_list_free(list)
	for _, l := range layers {
		if l == nil {
			return &Error{Code: ErrCodeInvalid, Message: "nil layer in DenseOptimizer.Step"}
		}
		if err := l.addTo(list); err != nil {
			return err
		}
	}
	err := swig.Bind_dense_optimizer_step(d.handle(), list)
	runtime.KeepAlive(d)
	runtime.KeepAlive(layers)
	return err
}

// SetLearningRate sets the learning rate of the following steps.
func (d *DenseOptimizer) SetLearningRate(lr float32) error {
	defer runtime.KeepAlive(d)
	return swig.Dense_optimizer_set_learning_rate(d.handle(), lr)
}

// Steps returns the steps taken so far.
func (d *DenseOptimizer) Steps() (int64, error) {
	out := make([]int64, 1)
	err := swig.Dense_optimizer_steps(d.handle(), out)
	runtime.KeepAlive(d)
	return out[0], err
}

// SetSteps sets the step count (restoring a checkpoint).
func (d *DenseOptimizer) SetSteps(steps int64) error {
	defer runtime.KeepAlive(d)
	return swig.Dense_optimizer_set_steps(d.handle(), steps)
}

// DenseState names one optimizer state of a dense tensor.
type DenseState int

// Dense optimizer states.
const (
	DenseMomentum1 DenseState = 0 // Adagrad's sum of squares, Adam's first moment
	DenseMomentum2 DenseState = 1 // Adam's second moment
)

// StateCount is the element count of state which of tensor position tensor (the order Step
// walks the layers' tensors in): 0 before the first step or when the type has no such state.
func (d *DenseOptimizer) StateCount(tensor int, which DenseState) (int64, error) {
	if tensor < 0 {
		return 0, &Error{Code: ErrCodeInvalid, Message: "tensor position must be >= 0"}
	}
	out := make([]int64, 1)
	err := swig.Bind_dense_optimizer_state_count(d.handle(), int64(tensor), int(which), out)
	runtime.KeepAlive(d)
	return out[0], err
}

// State returns a copy of state which of tensor position tensor (empty when there is none).
func (d *DenseOptimizer) State(tensor int, which DenseState) ([]float32, error) {
	n, err := d.StateCount(tensor, which)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	var buf []float32
	if n > 0 {
		buf = out
	}
	err = swig.Bind_dense_optimizer_state_copy(d.handle(), int64(tensor), int(which), buf, n, 0)
	runtime.KeepAlive(d)
	return out, err
}

// SetState overwrites state which of tensor position tensor (restoring a checkpoint); the state
// must exist (after the first step) and values must have its element count.
func (d *DenseOptimizer) SetState(tensor int, which DenseState, values []float32) error {
	n, err := d.StateCount(tensor, which)
	if err != nil {
		return err
	}
	if err := checkLen("values", values, n); err != nil {
		return err
	}
	var buf []float32
	if n > 0 {
		buf = values
	}
	err = swig.Bind_dense_optimizer_state_copy(d.handle(), int64(tensor), int(which), buf, n, 1)
	runtime.KeepAlive(d)
	return err
}
