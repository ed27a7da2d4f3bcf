// Sharded embedding collections: forward/backward over Go slices (no copies), pipelined input
// distribution, and full-table weight and optimizer-state accessors.

package shardrec

import (
	"fmt"
	"math"
	"runtime"

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
	// FP8 in 32-value blocks with a shared power-of-two scale; error <= max(2^-4 |x|, 2^-17 x the
	// block's largest magnitude) (E4M3), max(2^-3 |x|, 2^-31 x the block's largest) (E5M2).
	CommEncodingFP8E4M3 CommEncoding = 3
	CommEncodingFP8E5M2 CommEncoding = 4
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
	// StochasticRounding rounds FLOAT16/BFLOAT16/FP8 updates stochastically.
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
	// DeviceType is where the tables live: DeviceHost (the zero value) or DeviceCUDA, forwarded
	// as given (embedding_options.h): a CUDA collection needs the CUDA plugin and a GPU, else
	// creation fails with ErrCodeNoDevice (ErrCodeUnsupported from a library built without CUDA
	// while SHARDREC_CUDA_PLUGIN is unset). Buffers from Go are host memory.
	DeviceType  DeviceType
	DeviceIndex int // CUDA ordinal; ignored on the host
	// Capacity hints of a GPU collection (embedding_options.h): the most samples and the most ids
	// (over all features) this rank passes to one forward. With both > 0 the per-step device
	// buffers are sized at creation; the zero value means unknown (they grow on demand).
	// Host collections ignore them; negative values are rejected.
	MaxBatchSize   int64
	MaxIdsPerBatch int64
	// Tiers makes tables tiered on this rank (TableTier, docs/disk-tier.md): their rows on local
	// disk under a DRAM cache, bit-identical to memory. Empty: every table in memory.
	Tiers []TableTier
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

// EmbeddingCollection is this rank's part of a sharded collection. One goroutine at a time,
// except Close, which is safe from any goroutine.
type EmbeddingCollection struct {
	owned  handleRef
	shapes map[string][2]int64
}

// ref is the collection's handle and lock; nil for a nil collection, whose calls pass the C API
// a NULL handle (ErrCodeInvalid) instead of panicking.
func (e *EmbeddingCollection) ref() *handleRef {
	if e == nil {
		return nil
	}
	return &e.owned
}

// Close destroys the collection; later calls fail with SHARDREC_EINVAL. Idempotent, and safe
// from any goroutine: it waits for the calls in flight on other goroutines to return. A
// collective call blocked on a peer returns at the communicator's timeout or when the
// communicator is aborted (Comm.Abort): to close promptly, abort first.
func (e *EmbeddingCollection) Close() error {
	if e == nil {
		return nil
	}
	if h := e.owned.take(); h != 0 {
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
	return newEmbeddingCollection(plan, comm.ref(), opt, opts, func(out []uintptr, comm, plan uintptr,
		o swig.Optimizer_config, eo swig.Embedding_options) error {
		return swig.Embedding_create(out, plan, comm, o, eo)
	})
}

// newEmbeddingCollection fills the C structs from opt and opts, runs create with the handles of
// plan and of owner (the communicator or the mesh) and wraps the handle it returns.
func newEmbeddingCollection(plan *Plan, owner *handleRef, opt *OptimizerConfig,
	opts *EmbeddingOptions, create func(out []uintptr, owner, plan uintptr,
		o swig.Optimizer_config, eo swig.Embedding_options) error) (*EmbeddingCollection, error) {
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
	var dpComm *handleRef
	if opts != nil {
		eo.SetSeed(opts.Seed)
		eo.SetBounds_policy(int(opts.BoundsPolicy))
		eo.SetNum_threads(opts.NumThreads)
		dpComm = opts.DPComm.ref()
		eo.SetForward_comm_encoding(int(opts.ForwardCommEncoding))
		eo.SetBackward_comm_encoding(int(opts.BackwardCommEncoding))
		eo.SetNon_finite(int(opts.NonFinite))
		eo.SetTable_memory(int(opts.TableMemory))
		eo.SetDevice_type(int(opts.DeviceType))
		eo.SetDevice_index(opts.DeviceIndex)
		eo.SetMax_batch_size(opts.MaxBatchSize)
		eo.SetMax_ids_per_batch(opts.MaxIdsPerBatch)
		if len(opts.Tiers) > 0 {
			tiers, err := applyTiers(opts.Tiers, eo)
			if err != nil {
				return nil, err
			}
			// Read by the create call below.
			defer swig.Bind_tiers_free(tiers)
		}
	}
	shapes, refused := tableShapes(plan)
	out := make([]uintptr, 1)
	// The plan, the communicator or mesh and the data-parallel communicator stay open until
	// create returns; the shapes above were read before, each call with its own lock.
	h, done := acquireAll(owner, plan.ref(), dpComm)
	if refused == nil {
		refused = closedArgument("the options' DPComm", dpComm, h[2])
	}
	planHandle := h[1]
	if refused != nil {
		// Creation is collective: this rank still meets its peers' agreement, with a NULL plan
		// that C refuses on every rank together (else the peers wait, and this rank's next
		// create would meet their first).
		planHandle = 0
	} else if dpComm != nil {
		eo.SetDp_comm(h[2])
	}
	err := create(out, h[0], planHandle, o, eo)
	done()
	if refused != nil {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	e := &EmbeddingCollection{owned: handleRef{h: out[0]}, shapes: shapes}
	runtime.SetFinalizer(e, closeLeaked((*EmbeddingCollection).Close))
	return e, nil
}

// tableShapes reads each table's rows and width from the plan (an error for a nil or closed
// plan).
func tableShapes(plan *Plan) (map[string][2]int64, error) {
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
	return shapes, nil
}

// OutputDim is the width of one output row.
func (e *EmbeddingCollection) OutputDim() (int64, error) {
	out := make([]int64, 1)
	h, done := e.ref().acquire()
	defer done()
	err := swig.Embedding_output_dim(h, out)
	return out[0], err
}

// IsSequence reports whether outputs have one row per id.
func (e *EmbeddingCollection) IsSequence() (bool, error) {
	out := make([]int32, 1)
	h, done := e.ref().acquire()
	defer done()
	err := swig.Embedding_is_sequence(h, out)
	return out[0] != 0, err
}

// errNilBatch is what a call given a nil *KJT returns. A collective call still makes its call
// with a batch the library refuses (batch size -1), which it reports to the other ranks in the
// same call, so they return an error too instead of waiting for this rank.
func errNilBatch() error {
	return &Error{Code: ErrCodeInvalid, Message: "batch must not be nil"}
}

// refusedBatch stands in for a nil batch in a collective call (see errNilBatch), or for one that
// check refuses.
var refusedBatch = &KJT{BatchSize: -1}

// check refuses a nil batch and a negative NumFeatures, which would reach C as a huge size_t; the
// library checks everything else.
func (b *KJT) check() error {
	if b == nil {
		return errNilBatch()
	}
	return nonNegative("batch: NumFeatures", int64(b.NumFeatures))
}

// OutputSize is the number of floats of the forward output of batch.
func (e *EmbeddingCollection) OutputSize(batch *KJT) (int, error) {
	if err := batch.check(); err != nil {
		return 0, err
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
	if err := batch.check(); err != nil {
		_ = e.Forward(refusedBatch, out)
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Bind_embedding_forward(h, batch.BatchSize, int64(batch.NumFeatures),
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

// checkShape checks that buf holds exactly the elements of shape. A nil shape is refused (as
// Java refuses a null one): an empty shape is a scalar (C's ndim 0, one element), so nil would
// silently mean one too, never the 1-D view of buf that a caller leaving it out has in mind.
func checkShape(what string, buf []float32, shape []int64) error {
	if shape == nil {
		return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
			"shape must not be nil (%s as a 1-D tensor: []int64{%d}; a scalar: []int64{})", what,
			len(buf))}
	}
	n, err := shapeElements(shape)
	if err != nil {
		return err
	}
	return checkLen(what, buf, n)
}

// ForwardTensor is Forward into a tensor of extents shape (at most 4; with 2 or more, the last
// is the output width): the library checks the shape against the output
// (shardrec_embedding_forward_tensor). out holds exactly the shape's element count. Every
// *Tensor call refuses a nil shape (ErrCodeInvalid, on every rank): []int64{} is a scalar and
// []int64{int64(len(out))} a 1-D view.
func (e *EmbeddingCollection) ForwardTensor(batch *KJT, out []float32, shape []int64) error {
	if err := batch.check(); err != nil {
		_ = e.ForwardTensor(refusedBatch, out, shape)
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	if err := checkShape("out", out, shape); err != nil {
		// Refused together: no view, which the library refuses on every rank in this call.
		_ = swig.Bind_embedding_forward_tensor(h, batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_forward_tensor(h, batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, out, shape)
}

// ForwardDistributedTensor is ForwardDistributed into a tensor of extents shape.
func (e *EmbeddingCollection) ForwardDistributedTensor(out []float32, shape []int64) error {
	h, done := e.ref().acquire()
	defer done()
	if err := checkShape("out", out, shape); err != nil {
		_ = swig.Bind_embedding_forward_distributed_tensor(h, nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_forward_distributed_tensor(h, out, shape)
}

// BackwardTensor is Backward with the gradient as a tensor of extents shape.
func (e *EmbeddingCollection) BackwardTensor(grad []float32, shape []int64) error {
	h, done := e.ref().acquire()
	defer done()
	if err := checkShape("grad", grad, shape); err != nil {
		_ = swig.Bind_embedding_backward_tensor(h, nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_backward_tensor(h, grad, shape)
}

// Synchronize waits for the device work a GPU collection's stream-ordered calls left queued and
// returns what it found (shardrec_embedding_synchronize); nil at once for a host collection, whose
// calls (all of them from Go: Go passes host memory) return with their work done.
func (e *EmbeddingCollection) Synchronize() error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_synchronize(h)
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
	if err := batch.check(); err != nil {
		_ = e.InputDistStart(refusedBatch)
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Bind_embedding_input_dist_start(h, batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights)
}

// InputDistWait waits for the started input distribution.
func (e *EmbeddingCollection) InputDistWait() error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_input_dist_wait(h)
}

// ForwardDistributed runs lookup and output distribution of the waited batch.
func (e *EmbeddingCollection) ForwardDistributed(out []float32) error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_forward_distributed(h, out)
}

// Backward applies the gradient of the last forward's output (collective).
func (e *EmbeddingCollection) Backward(grad []float32) error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_backward(h, grad)
}

// SetLearningRate sets the rate of the following backward calls.
func (e *EmbeddingCollection) SetLearningRate(lr float32) error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_set_learning_rate(h, lr)
}

// NumSteps is the number of optimizer steps taken.
func (e *EmbeddingCollection) NumSteps() (int64, error) {
	out := make([]int64, 1)
	h, done := e.ref().acquire()
	defer done()
	err := swig.Embedding_num_steps(h, out)
	return out[0], err
}

// SetNumSteps sets the step counter.
func (e *EmbeddingCollection) SetNumSteps(steps int64) error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_set_num_steps(h, steps)
}

// GetWeights copies the full [rows, dim] weights of table into out (collective).
func (e *EmbeddingCollection) GetWeights(table string, out []float32) error {
	if err := noNUL("table", table); err != nil {
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_get_weights(h, table, out)
}

// Weights returns the full weights of table (collective).
func (e *EmbeddingCollection) Weights(table string) ([]float32, error) {
	if err := noNUL("table", table); err != nil {
		return nil, err
	}
	shape, ok := e.shape(table)
	if !ok {
		// Let the library name the unknown table (or refuse a nil collection).
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
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_set_weights(h, table, weights)
}

// shape is the (rows, dim) of table, from the plan the collection was created with.
func (e *EmbeddingCollection) shape(table string) ([2]int64, bool) {
	if e == nil {
		return [2]int64{}, false
	}
	s, ok := e.shapes[table]
	return s, ok
}

// String describes the collection for logs.
func (e *EmbeddingCollection) String() string {
	if e == nil {
		return "EmbeddingCollection(nil)"
	}
	return fmt.Sprintf("EmbeddingCollection(%d tables)", len(e.shapes))
}
