// Sharded embedding collections: forward/backward over Go slices (no copies), pipelined input
// distribution, and full-table weight and optimizer-state accessors.

package shardrec

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"shardrec.dev/shardrec/internal/swig"
)

// OptimizerType is a fused optimizer's update rule (shardrec_optimizer_type_t).
type OptimizerType int

// Optimizer types (shardrec/config.h).
const (
	OptimizerSGD                OptimizerType = 0
	OptimizerAdagrad            OptimizerType = 1
	OptimizerRowwiseAdagrad     OptimizerType = 2
	OptimizerAdam               OptimizerType = 3
	OptimizerPartialRowwiseAdam OptimizerType = 4
	OptimizerLAMB               OptimizerType = 5
)

// WeightDecayMode is how weight decay enters the update (shardrec_weight_decay_mode_t).
type WeightDecayMode int

// Weight decay modes (shardrec/config.h).
const (
	WeightDecayNone      WeightDecayMode = 0
	WeightDecayL2        WeightDecayMode = 1
	WeightDecayDecoupled WeightDecayMode = 2
)

// BoundsPolicy is what a collection does with an id outside its table (shardrec/embedding_options.h).
type BoundsPolicy int

// Bounds policies (shardrec/embedding_options.h).
const (
	BoundsError BoundsPolicy = 0
	BoundsClamp BoundsPolicy = 1
	BoundsSkip  BoundsPolicy = 2
)

// CommEncoding is how the floats of a collection's embedding collectives travel between ranks
// (shardrec_comm_encoding_t in shardrec/embedding_options.h, which documents the error of each).
type CommEncoding int

// Communication encodings (shardrec/embedding_options.h).
const (
	CommEncodingFP32 CommEncoding = 0 // exact (the default)
	CommEncodingFP16 CommEncoding = 1 // relative error <= 2^-11, saturates beyond +-65504
	CommEncodingBF16 CommEncoding = 2 // relative error <= 2^-8
)

// OptimizerConfig is the fused optimizer. Start from NewOptimizer or DefaultOptimizer (the C
// defaults): every field is passed to C as it is, and 0 is a valid value for most of them (beta1
// 0 keeps no momentum), so a literal's unset fields train with 0, not with the defaults
// (&OptimizerConfig{Type: OptimizerAdam, LearningRate: 0.05} is Adam with betas 0 and eps 0).
type OptimizerConfig struct {
	Type            OptimizerType
	LearningRate    float32
	Eps             float32
	Beta1, Beta2    float32
	WeightDecay     float32
	WeightDecayMode WeightDecayMode
	// StochasticRounding rounds FLOAT16/BFLOAT16 updates stochastically.
	StochasticRounding bool
}

// newNativeOptimizer is the C struct of opt (nil: the C defaults); the caller deletes it.
func newNativeOptimizer(opt *OptimizerConfig) (swig.Optimizer_config, error) {
	o := swig.NewOptimizer_config()
	if err := swig.Optimizer_config_init(o, uint(swig.OPTIMIZER_CONFIG_VERSION)); err != nil {
		swig.DeleteOptimizer_config(o)
		return nil, err
	}
	if opt != nil {
		o.SetXtype(int(opt.Type))
		o.SetLearning_rate(opt.LearningRate)
		o.SetEps(opt.Eps)
		o.SetBeta1(opt.Beta1)
		o.SetBeta2(opt.Beta2)
		o.SetWeight_decay(opt.WeightDecay)
		o.SetWeight_decay_mode(int(opt.WeightDecayMode))
		if opt.StochasticRounding {
			o.SetStochastic_rounding(1)
		}
	}
	return o, nil
}

// DefaultOptimizer is SGD with the library defaults (lr 0.01, eps 1e-8, betas 0.9/0.999).
func DefaultOptimizer() OptimizerConfig {
	return OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.01, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999}
}

// NewOptimizer is optimizer t at learning rate lr with the other defaults of DefaultOptimizer
// (Java's new Config.Optimizer().type(t).learningRate(lr), Rust's Optimizer::new(t, lr)).
func NewOptimizer(t OptimizerType, lr float32) *OptimizerConfig {
	o := DefaultOptimizer()
	o.Type = t
	o.LearningRate = lr
	return &o
}

// EmbeddingOptions are the collection options; zero values are the defaults.
type EmbeddingOptions struct {
	Seed         uint64
	BoundsPolicy BoundsPolicy
	NumThreads   int
	DPComm       *Comm
	// Wire encoding of the forward's return all-to-all, and of the backward's gradient
	// all-to-all and data-parallel all-reduce; the zero value is exact fp32.
	ForwardCommEncoding  CommEncoding
	BackwardCommEncoding CommEncoding
	// NonFinite is what a NaN or infinite per-id weight or output gradient does; the zero
	// value (NonFiniteCheck) rejects it like any bad input.
	NonFinite NonFinitePolicy
	// TableMemory is the page size of the table storage; the zero value is huge pages.
	TableMemory TableMemory
	// DeviceType is where the tables live: DeviceHost (the zero value). CUDA collections are
	// refused with ErrCodeUnsupported by this build (embedding_options.h); forwarded as given.
	DeviceType  DeviceType
	DeviceIndex int // CUDA ordinal; ignored on the host
	// Capacity hints of a GPU collection (embedding_options.h): the most samples and the most ids
	// (over all features) this rank passes to one forward. With both > 0 the per-step device
	// buffers are sized at creation; the zero value means unknown (they grow on demand).
	// Host collections ignore them; negative values are rejected.
	MaxBatchSize   int64
	MaxIdsPerBatch int64
}

// NonFinitePolicy is shardrec_non_finite_policy_t (shardrec/embedding_options.h).
type NonFinitePolicy int

// Non-finite policies.
const (
	NonFiniteCheck NonFinitePolicy = 0 // EINVAL naming the feature/sample; nothing changes
	NonFiniteAllow NonFinitePolicy = 1 // no check: non-finite values flow through
)

// TableMemory is shardrec_table_memory_t (shardrec/embedding_options.h).
type TableMemory int

// Table memory kinds.
const (
	TableMemoryHugePages  TableMemory = 0 // 2 MiB aligned, advised for transparent huge pages
	TableMemorySmallPages TableMemory = 1 // ordinary pages
)

// KJT is one rank's batch in keyed-jagged form, feature-major: Lengths[f*BatchSize+b] ids of
// feature f in sample b, all ids in Values in that order, optional per-id Weights.
type KJT struct {
	BatchSize   int64
	NumFeatures int
	Lengths     []int32
	Values      []int64
	Weights     []float32
}

// EmbeddingCollection is this rank's part of a sharded collection. One goroutine at a time.
type EmbeddingCollection struct {
	mu     sync.Mutex
	h      uintptr
	shapes map[string][2]int64
}

func (e *EmbeddingCollection) handle() uintptr {
	// A nil handle is 0, which the C call refuses as NULL (EINVAL), instead of a panic.
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h
}

// Close destroys the collection; later calls fail with SHARDREC_EINVAL. Idempotent.
func (e *EmbeddingCollection) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	h := e.h
	e.h = 0
	e.mu.Unlock()
	if h != 0 {
		swig.Embedding_destroy(h)
	}
	runtime.SetFinalizer(e, nil)
	return nil
}

// NewEmbeddingCollection is collective over comm: every rank passes the same plan. A nil
// optimizer means the plan's (Topology.Optimizer, default hyperparameters); a given one must
// be of that type unless every table has its own. nil options mean the defaults.
func NewEmbeddingCollection(plan *Plan, comm *Comm, opt *OptimizerConfig,
	opts *EmbeddingOptions) (*EmbeddingCollection, error) {
	return newEmbeddingCollection(plan, opt, opts, func(out []uintptr, o swig.Optimizer_config,
		eo swig.Embedding_options) error {
		err := swig.Embedding_create(out, plan.handle(), comm.handle(), o, eo)
		runtime.KeepAlive(comm)
		return err
	})
}

// newEmbeddingCollection fills the C structs from opt and opts, runs create and wraps the
// handle it returns.
func newEmbeddingCollection(plan *Plan, opt *OptimizerConfig, opts *EmbeddingOptions,
	create func(out []uintptr, o swig.Optimizer_config, eo swig.Embedding_options) error) (*EmbeddingCollection, error) {
	// No optimizer: a NULL one, so the collection trains with the plan's.
	var o swig.Optimizer_config = swig.SwigcptrOptimizer_config(0)
	if opt != nil {
		var err error
		if o, err = newNativeOptimizer(opt); err != nil {
			return nil, err
		}
		defer swig.DeleteOptimizer_config(o)
	}
	eo := swig.NewEmbedding_options()
	defer swig.DeleteEmbedding_options(eo)
	if err := swig.Embedding_options_init(eo, uint(swig.EMBEDDING_OPTIONS_VERSION)); err != nil {
		return nil, err
	}
	if opts != nil {
		eo.SetSeed(opts.Seed)
		eo.SetBounds_policy(int(opts.BoundsPolicy))
		eo.SetNum_threads(opts.NumThreads)
		if opts.DPComm != nil {
			eo.SetDp_comm(opts.DPComm.handle())
		}
		eo.SetForward_comm_encoding(int(opts.ForwardCommEncoding))
		eo.SetBackward_comm_encoding(int(opts.BackwardCommEncoding))
		eo.SetNon_finite(int(opts.NonFinite))
		eo.SetTable_memory(int(opts.TableMemory))
		eo.SetDevice_type(int(opts.DeviceType))
		eo.SetDevice_index(opts.DeviceIndex)
		eo.SetMax_batch_size(opts.MaxBatchSize)
		eo.SetMax_ids_per_batch(opts.MaxIdsPerBatch)
	}
	shapes := map[string][2]int64{}
	n, err := plan.NumTables()
	if err != nil {
		return nil, err
	}
	for t := 0; t < n; t++ {
		name, err := plan.TableName(t)
		if err != nil {
			return nil, err
		}
		rows, dim, err := plan.TableShape(t)
		if err != nil {
			return nil, err
		}
		shapes[name] = [2]int64{rows, int64(dim)}
	}
	out := make([]uintptr, 1)
	err = create(out, o, eo)
	runtime.KeepAlive(plan)
	runtime.KeepAlive(opts)
	if err != nil {
		return nil, err
	}
	e := &EmbeddingCollection{h: out[0], shapes: shapes}
	runtime.SetFinalizer(e, closeLeaked("embedding collection", (*EmbeddingCollection).Close))
	return e, nil
}

// OutputDim is the width of one output row.
func (e *EmbeddingCollection) OutputDim() (int64, error) {
	out := make([]int64, 1)
	err := swig.Embedding_output_dim(e.handle(), out)
	runtime.KeepAlive(e)
	return out[0], err
}

// IsSequence reports whether outputs have one row per id.
func (e *EmbeddingCollection) IsSequence() (bool, error) {
	out := make([]int32, 1)
	err := swig.Embedding_is_sequence(e.handle(), out)
	runtime.KeepAlive(e)
	return out[0] != 0, err
}

// errNilBatch is what a call given a nil *KJT returns. A collective call still makes its call
// with a batch the library refuses (batch size -1), which it reports to the other ranks in the
// same call, so they return an error too instead of waiting for this rank.
func errNilBatch() error {
	return &Error{Code: ErrCodeInvalid, Message: "batch must not be nil"}
}

// refusedBatch stands in for a nil batch in a collective call (see errNilBatch).
var refusedBatch = &KJT{BatchSize: -1}

// OutputSize is the number of floats of the forward output of batch.
func (e *EmbeddingCollection) OutputSize(batch *KJT) (int, error) {
	if batch == nil {
		return 0, errNilBatch()
	}
	dim, err := e.OutputDim()
	if err != nil {
		return 0, err
	}
	seq, err := e.IsSequence()
	if err != nil {
		return 0, err
	}
	rows := len(batch.Values)
	if !seq {
		// Checked here, before ForwardAlloc allocates rows x dim floats (a negative or huge size
		// panicked in make); the C call checks the batch again. Lengths holds BatchSize x
		// NumFeatures entries, compared by division so that no product can overflow.
		b, n, nf := batch.BatchSize, len(batch.Lengths), batch.NumFeatures
		matches := (nf == 0 && n == 0) || (nf > 0 && n%nf == 0 && int64(n/nf) == b)
		if b < 0 || !matches {
			return 0, &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"batch: %d lengths for BatchSize %d x NumFeatures %d", len(batch.Lengths),
				batch.BatchSize, batch.NumFeatures)}
		}
		rows = int(b)
	}
	return rows * int(dim), nil
}

// Forward writes the output of this rank's batch into out (collective).
func (e *EmbeddingCollection) Forward(batch *KJT, out []float32) error {
	defer runtime.KeepAlive(e)
	if batch == nil {
		_ = e.Forward(refusedBatch, out)
		return errNilBatch()
	}
	return swig.Bind_embedding_forward(e.handle(), batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, out)
}

// shapeElements is the element count of a tensor shape (an error for a negative extent or an
// overflow).
func shapeElements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/d) {
			return 0, &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf("bad tensor shape %v", shape)}
		}
		n *= d
	}
	return n, nil
}

// refusedShape is the shape the tensor calls pass with no buffer when this rank refuses its
// buffer or shape: the native helper finds the mismatch and makes the call with no view, which
// the library refuses on this rank and reports to the others in the same collective call
// (docs/semantics.md), so the ranks stay in step instead of the others' call pairing with this
// rank's next one.
var refusedShape = []int64{1}

// checkShape checks that buf holds exactly the elements of shape.
func checkShape(what string, buf []float32, shape []int64) error {
	n, err := shapeElements(shape)
	if err != nil {
		return err
	}
	return checkLen(what, buf, n)
}

// ForwardTensor is Forward into a tensor of extents shape (at most 4; with 2 or more, the last
// is the output width): the library checks the shape against the output
// (shardrec_embedding_forward_tensor). out holds exactly the shape's element count.
func (e *EmbeddingCollection) ForwardTensor(batch *KJT, out []float32, shape []int64) error {
	defer runtime.KeepAlive(e)
	if batch == nil {
		_ = e.ForwardTensor(refusedBatch, out, shape)
		return errNilBatch()
	}
	if err := checkShape("out", out, shape); err != nil {
		// Refused together: no view, which the library refuses on every rank in this call.
		_ = swig.Bind_embedding_forward_tensor(e.handle(), batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_forward_tensor(e.handle(), batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, out, shape)
}

// ForwardDistributedTensor is ForwardDistributed into a tensor of extents shape.
func (e *EmbeddingCollection) ForwardDistributedTensor(out []float32, shape []int64) error {
	defer runtime.KeepAlive(e)
	if err := checkShape("out", out, shape); err != nil {
		_ = swig.Bind_embedding_forward_distributed_tensor(e.handle(), nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_forward_distributed_tensor(e.handle(), out, shape)
}

// BackwardTensor is Backward with the gradient as a tensor of extents shape.
func (e *EmbeddingCollection) BackwardTensor(grad []float32, shape []int64) error {
	defer runtime.KeepAlive(e)
	if err := checkShape("grad", grad, shape); err != nil {
		_ = swig.Bind_embedding_backward_tensor(e.handle(), nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_backward_tensor(e.handle(), grad, shape)
}

// Synchronize waits for the device work a GPU collection's stream-ordered calls left queued and
// returns what it found (shardrec_embedding_synchronize); nil at once for a host collection, whose
// calls (all of them from Go: Go passes host memory) return with their work done.
func (e *EmbeddingCollection) Synchronize() error {
	defer runtime.KeepAlive(e)
	return swig.Embedding_synchronize(e.handle())
}

// ForwardAlloc is Forward into a new slice of the right size.
func (e *EmbeddingCollection) ForwardAlloc(batch *KJT) ([]float32, error) {
	if batch == nil {
		return nil, e.Forward(nil, nil)
	}
	n, err := e.OutputSize(batch)
	if err != nil {
		// The forward is collective: the C call refuses the batch on every rank together, where
		// returning here alone would leave the other ranks waiting in the exchange.
		if ferr := e.Forward(batch, nil); ferr != nil {
			return nil, ferr
		}
		return nil, err
	}
	out := make([]float32, n)
	return out, e.Forward(batch, out)
}

// InputDistStart starts the pipelined input distribution of batch (collective).
func (e *EmbeddingCollection) InputDistStart(batch *KJT) error {
	defer runtime.KeepAlive(e)
	if batch == nil {
		_ = e.InputDistStart(refusedBatch)
		return errNilBatch()
	}
	return swig.Bind_embedding_input_dist_start(e.handle(), batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights)
}

// InputDistWait waits for the started input distribution.
func (e *EmbeddingCollection) InputDistWait() error {
	defer runtime.KeepAlive(e)
	return swig.Embedding_input_dist_wait(e.handle())
}

// ForwardDistributed runs lookup and output distribution of the waited batch.
func (e *EmbeddingCollection) ForwardDistributed(out []float32) error {
	defer runtime.KeepAlive(e)
	return swig.Embedding_forward_distributed(e.handle(), out)
}

// Backward applies the gradient of the last forward's output (collective).
func (e *EmbeddingCollection) Backward(grad []float32) error {
	defer runtime.KeepAlive(e)
	return swig.Embedding_backward(e.handle(), grad)
}

// SetLearningRate sets the rate of the following backward calls.
func (e *EmbeddingCollection) SetLearningRate(lr float32) error {
	defer runtime.KeepAlive(e)
	return swig.Embedding_set_learning_rate(e.handle(), lr)
}

// NumSteps is the number of optimizer steps taken.
func (e *EmbeddingCollection) NumSteps() (int64, error) {
	out := make([]int64, 1)
	err := swig.Embedding_num_steps(e.handle(), out)
	runtime.KeepAlive(e)
	return out[0], err
}

// SetNumSteps sets the step counter.
func (e *EmbeddingCollection) SetNumSteps(steps int64) error {
	defer runtime.KeepAlive(e)
	return swig.Embedding_set_num_steps(e.handle(), steps)
}

// GetWeights copies the full [rows, dim] weights of table into out (collective).
func (e *EmbeddingCollection) GetWeights(table string, out []float32) error {
	if err := noNUL("table", table); err != nil {
		return err
	}
	defer runtime.KeepAlive(e)
	return swig.Embedding_get_weights(e.handle(), table, out)
}

// Weights returns the full weights of table (collective).
func (e *EmbeddingCollection) Weights(table string) ([]float32, error) {
	if err := noNUL("table", table); err != nil {
		return nil, err
	}
	shape, ok := e.shapes[table]
	if !ok {
		// Let the library name the unknown table.
		return nil, e.GetWeights(table, nil)
	}
	out := make([]float32, shape[0]*shape[1])
	return out, e.GetWeights(table, out)
}

// SetWeights replaces the weights of table (collective; same values on every rank).
func (e *EmbeddingCollection) SetWeights(table string, weights []float32) error {
	if err := noNUL("table", table); err != nil {
		return err
	}
	defer runtime.KeepAlive(e)
	return swig.Embedding_set_weights(e.handle(), table, weights)
}

// StateNames lists the optimizer states ("momentum1", ...) and whether each is row-wise.
func (e *EmbeddingCollection) StateNames() ([]string, []bool, error) {
	defer runtime.KeepAlive(e)
	n := make([]uint64, 1)
	if err := swig.Embedding_num_states(e.handle(), n); err != nil {
		return nil, nil, err
	}
	names := make([]string, n[0])
	rowWise := make([]bool, n[0])
	for i := range names {
		var name string // not &names[i]: cgo refuses a pointer into memory holding Go pointers
		rw := make([]int32, 1)
		if err := swig.Embedding_state_info(e.handle(), int64(i), &name, rw); err != nil {
			return nil, nil, err
		}
		names[i], rowWise[i] = name, rw[0] != 0
	}
	return names, rowWise, nil
}

// TableState is one optimizer state of a table: its name and whether it holds one value per
// row ([rows]) rather than one per element ([rows, dim]).
type TableState struct {
	Name    string
	RowWise bool
}

// TableStates lists the states of the optimizer table trains with (its own or the default),
// in order: the names State and SetState accept for that table.
func (e *EmbeddingCollection) TableStates(table string) ([]TableState, error) {
	if err := noNUL("table", table); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(e)
	n := make([]uint64, 1)
	if err := swig.Embedding_table_num_states(e.handle(), table, n); err != nil {
		return nil, err
	}
	out := make([]TableState, n[0])
	for i := range out {
		// A fresh string each time: cgo refuses a pointer into memory that holds Go pointers.
		var name string
		rw := make([]int32, 1)
		if err := swig.Embedding_table_state_info(e.handle(), table, int64(i), &name, rw); err != nil {
			return nil, err
		}
		out[i] = TableState{Name: name, RowWise: rw[0] != 0}
	}
	return out, nil
}

// State returns one full optimizer state of table (collective).
func (e *EmbeddingCollection) State(table, state string) ([]float32, error) {
	if err := noNUL("table or state", table, state); err != nil {
		return nil, err
	}
	states, err := e.TableStates(table)
	if err != nil {
		return nil, err
	}
	shape := e.shapes[table]
	size := shape[0] * shape[1]
	for _, s := range states {
		if s.Name == state && s.RowWise {
			size = shape[0]
		}
	}
	out := make([]float32, size)
	err = swig.Embedding_get_state(e.handle(), table, state, out)
	runtime.KeepAlive(e)
	return out, err
}

// SetState replaces one optimizer state of table (collective).
func (e *EmbeddingCollection) SetState(table, state string, values []float32) error {
	if err := noNUL("table or state", table, state); err != nil {
		return err
	}
	defer runtime.KeepAlive(e)
	return swig.Embedding_set_state(e.handle(), table, state, values)
}

// Timings returns the seconds spent in collectives and in forward/backward overall.
func (e *EmbeddingCollection) Timings() (comm, total float64, err error) {
	c := make([]float64, 1)
	t := make([]float64, 1)
	err = swig.Embedding_timings(e.handle(), c, t)
	runtime.KeepAlive(e)
	return c[0], t[0], err
}

// SetTableLearningRate sets the learning rate of one table (per-table schedules); the other
// tables keep theirs.
func (e *EmbeddingCollection) SetTableLearningRate(table string, lr float32) error {
	if err := noNUL("table", table); err != nil {
		return err
	}
	defer runtime.KeepAlive(e)
	return swig.Embedding_set_table_learning_rate(e.handle(), table, lr)
}

// TableOptimizer is the optimizer table trains with (its own, or the collection's default),
// with its current learning rate.
func (e *EmbeddingCollection) TableOptimizer(table string) (OptimizerConfig, error) {
	if err := noNUL("table", table); err != nil {
		return OptimizerConfig{}, err
	}
	o := swig.NewOptimizer_config()
	defer swig.DeleteOptimizer_config(o)
	defer runtime.KeepAlive(e)
	if err := swig.Embedding_table_optimizer(e.handle(), table, o); err != nil {
		return OptimizerConfig{}, err
	}
	return OptimizerConfig{
		Type: OptimizerType(o.GetXtype()), LearningRate: o.GetLearning_rate(), Eps: o.GetEps(),
		Beta1: o.GetBeta1(), Beta2: o.GetBeta2(), WeightDecay: o.GetWeight_decay(),
		WeightDecayMode:    WeightDecayMode(o.GetWeight_decay_mode()),
		StochasticRounding: o.GetStochastic_rounding() != 0,
	}, nil
}

// OutputBlock is where one feature's embedding sits in an output row (TorchRec's KeyedTensor
// keys and offsets): columns [Offset, Offset+Width) of the row, from table Table.
type OutputBlock struct {
	Feature string
	Table   string
	Offset  int64
	Width   int64
}

// Outputs lists the blocks of an output row in order.
func (e *EmbeddingCollection) Outputs() ([]OutputBlock, error) {
	defer runtime.KeepAlive(e)
	n := make([]uint64, 1)
	if err := swig.Embedding_num_outputs(e.handle(), n); err != nil {
		return nil, err
	}
	out := make([]OutputBlock, n[0])
	for i := range out {
		// Locals: cgo rejects a pointer into a slice that already holds Go strings.
		var feature, table string
		offset := make([]int64, 1)
		width := make([]int64, 1)
		err := swig.Embedding_output_info(e.handle(), int64(i), &feature, &table, offset, width)
		if err != nil {
			return nil, err
		}
		out[i] = OutputBlock{Feature: feature, Table: table, Offset: offset[0], Width: width[0]}
	}
	return out, nil
}

// StepTimings is where this rank's time went since the collection was created (seconds).
type StepTimings struct {
	Forwards, Backwards, Samples int64
	TotalSeconds                 float64 // inside the collection's step calls
	CollectiveSeconds            float64 // inside or waiting for collectives
	InputDistSeconds             float64
	LookupSeconds                float64
	OutputDistSeconds            float64
	BackwardSeconds              float64
	// Part of CollectiveSeconds in the collectives that carry embeddings or their gradients
	// (what CommEncoding shrinks).
	EmbeddingCommSeconds float64
}

// SamplesPerSecond is Samples / TotalSeconds (0 before the first step).
func (t StepTimings) SamplesPerSecond() float64 {
	if t.TotalSeconds <= 0 {
		return 0
	}
	return float64(t.Samples) / t.TotalSeconds
}

// StepTimings returns the per-phase timings, for progress lines.
func (e *EmbeddingCollection) StepTimings() (StepTimings, error) {
	t := swig.NewStep_timings()
	defer swig.DeleteStep_timings(t)
	defer runtime.KeepAlive(e)
	if err := swig.Step_timings_init(t, uint(swig.STEP_TIMINGS_VERSION)); err != nil {
		return StepTimings{}, err
	}
	if err := swig.Embedding_step_timings(e.handle(), t); err != nil {
		return StepTimings{}, err
	}
	return StepTimings{
		Forwards: t.GetForwards(), Backwards: t.GetBackwards(), Samples: t.GetSamples(),
		TotalSeconds: t.GetTotal_seconds(), CollectiveSeconds: t.GetCollective_seconds(),
		InputDistSeconds: t.GetInput_dist_seconds(), LookupSeconds: t.GetLookup_seconds(),
		OutputDistSeconds: t.GetOutput_dist_seconds(), BackwardSeconds: t.GetBackward_seconds(),
		EmbeddingCommSeconds: t.GetEmbedding_comm_seconds(),
	}, nil
}

// String describes the collection for logs.
func (e *EmbeddingCollection) String() string {
	return fmt.Sprintf("EmbeddingCollection(%d tables)", len(e.shapes))
}
