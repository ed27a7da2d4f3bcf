// Dense optimizers (shardrec/dense.h): SGD, Adagrad and Adam/AdamW over the tensors of dense
// layers, with their state for checkpoints.

package shardrec

import (
	"runtime"

	"shardrec.dev/shardrec/internal/swig"
)

// DenseOptimizer applies SGD, Adagrad or Adam/AdamW (WeightDecayDecoupled) to dense layers,
// with the embedding optimizers' per-element rules; row-wise types and LAMB are refused. State
// is kept per tensor position: step over the same layers in the same order every time. One
// goroutine at a time, except Close, which is safe from any goroutine.
type DenseOptimizer struct {
	owned handleRef
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
	d := &DenseOptimizer{owned: handleRef{h: out[0]}}
	runtime.SetFinalizer(d, closeLeaked((*DenseOptimizer).Close))
	return d, nil
}

// ref is the optimizer's handle and lock; nil for a nil optimizer (its calls get
// ErrCodeInvalid).
func (d *DenseOptimizer) ref() *handleRef {
	if d == nil {
		return nil
	}
	return &d.owned
}

// Close destroys the optimizer. Idempotent, and safe from any goroutine: it waits for the calls
// in flight on other goroutines to return.
func (d *DenseOptimizer) Close() error {
	if d == nil {
		return nil
	}
	if h := d.owned.take(); h != 0 {
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
	refs := []*handleRef{d.ref()}
	for _, l := range layers {
		if l == nil {
			return &Error{Code: ErrCodeInvalid, Message: "nil layer in DenseOptimizer.Step"}
		}
		refs = append(refs, l.ref())
	}
	// The optimizer and every layer stay open from the list's first entry to the step's end.
	h, done := acquireAll(refs...)
	defer done()
	for i, l := range layers {
		if err := l.addTo(list, h[i+1]); err != nil {
			return err
		}
	}
	return swig.Bind_dense_optimizer_step(h[0], list)
}

// SetLearningRate sets the learning rate of the following steps.
func (d *DenseOptimizer) SetLearningRate(lr float32) error {
	h, done := d.ref().acquire()
	defer done()
	return swig.Dense_optimizer_set_learning_rate(h, lr)
}

// Steps returns the steps taken so far.
func (d *DenseOptimizer) Steps() (int64, error) {
	out := make([]int64, 1)
	h, done := d.ref().acquire()
	defer done()
	err := swig.Dense_optimizer_steps(h, out)
	return out[0], err
}

// SetSteps sets the step count (restoring a checkpoint).
func (d *DenseOptimizer) SetSteps(steps int64) error {
	h, done := d.ref().acquire()
	defer done()
	return swig.Dense_optimizer_set_steps(h, steps)
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
	h, done := d.ref().acquire()
	defer done()
	err := swig.Bind_dense_optimizer_state_count(h, int64(tensor), int(which), out)
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
	h, done := d.ref().acquire()
	defer done()
	err = swig.Bind_dense_optimizer_state_copy(h, int64(tensor), int(which), buf, n, 0)
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
	h, done := d.ref().acquire()
	defer done()
	err = swig.Bind_dense_optimizer_state_copy(h, int64(tensor), int(which), buf, n, 1)
	return err
}
