// Optimizer state, per-table optimizers and what a collection reports about itself: the
// output layout and where its time went.

package shardrec

import "shardrec.dev/shardrec/internal/swig"

// StateNames lists the optimizer states ("momentum1", ...) and whether each is row-wise.
func (e *EmbeddingCollection) StateNames() ([]string, []bool, error) {
	h, done := e.ref().acquire()
	defer done()
	n := make([]uint64, 1)
	if err := swig.Embedding_num_states(h, n); err != nil {
		return nil, nil, err
	}
	names := make([]string, n[0])
	rowWise := make([]bool, n[0])
	for i := range names {
		var name string // not &names[i]: cgo refuses a pointer into memory holding Go pointers
		rw := make([]int32, 1)
		if err := swig.Embedding_state_info(h, int64(i), &name, rw); err != nil {
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
	h, done := e.ref().acquire()
	defer done()
	n := make([]uint64, 1)
	if err := swig.Embedding_table_num_states(h, table, n); err != nil {
		return nil, err
	}
	out := make([]TableState, n[0])
	for i := range out {
		// A fresh string each time: cgo refuses a pointer into memory that holds Go pointers.
		var name string
		rw := make([]int32, 1)
		if err := swig.Embedding_table_state_info(h, table, int64(i), &name, rw); err != nil {
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
	shape, _ := e.shape(table)
	size := shape[0] * shape[1]
	for _, s := range states {
		if s.Name == state && s.RowWise {
			size = shape[0]
		}
	}
	out := make([]float32, size)
	h, done := e.ref().acquire()
	defer done()
	return out, swig.Embedding_get_state(h, table, state, out)
}

// SetState replaces one optimizer state of table (collective).
func (e *EmbeddingCollection) SetState(table, state string, values []float32) error {
	if err := noNUL("table or state", table, state); err != nil {
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_set_state(h, table, state, values)
}

// Timings returns the seconds spent in collectives and in forward/backward overall.
func (e *EmbeddingCollection) Timings() (comm, total float64, err error) {
	c := make([]float64, 1)
	t := make([]float64, 1)
	h, done := e.ref().acquire()
	defer done()
	err = swig.Embedding_timings(h, c, t)
	return c[0], t[0], err
}

// SetTableLearningRate sets the learning rate of one table (per-table schedules); the other
// tables keep theirs.
func (e *EmbeddingCollection) SetTableLearningRate(table string, lr float32) error {
	if err := noNUL("table", table); err != nil {
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_set_table_learning_rate(h, table, lr)
}

// TableOptimizer is the optimizer table trains with (its own, or the collection's default),
// with its current learning rate.
func (e *EmbeddingCollection) TableOptimizer(table string) (OptimizerConfig, error) {
	if err := noNUL("table", table); err != nil {
		return OptimizerConfig{}, err
	}
	o := swig.NewOptimizer_config()
	defer swig.DeleteOptimizer_config(o)
	h, done := e.ref().acquire()
	defer done()
	if err := swig.Embedding_table_optimizer(h, table, o); err != nil {
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
	h, done := e.ref().acquire()
	defer done()
	n := make([]uint64, 1)
	if err := swig.Embedding_num_outputs(h, n); err != nil {
		return nil, err
	}
	out := make([]OutputBlock, n[0])
	for i := range out {
		// Locals: cgo rejects a pointer into a slice that already holds Go strings.
		var feature, table string
		offset := make([]int64, 1)
		width := make([]int64, 1)
		err := swig.Embedding_output_info(h, int64(i), &feature, &table, offset, width)
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
	if err := swig.Step_timings_init(t, uint(swig.STEP_TIMINGS_VERSION)); err != nil {
		return StepTimings{}, err
	}
	h, done := e.ref().acquire()
	defer done()
	if err := swig.Embedding_step_timings(h, t); err != nil {
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
