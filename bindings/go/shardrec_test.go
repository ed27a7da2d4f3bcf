// Tests of the Go binding: exactness of sharded training through the binding (2 ranks as
// goroutines vs. world size 1 on the concatenated batch), errors carrying the C status and
// message, and Close semantics.
package shardrec

import (
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	tableNames = []string{"t0", "t1", "t2"}
	tableRows  = []int64{40, 30, 50}
	tableDims  = []int{8, 4, 6}
)

const localBatch = 4

// testPlan is the fixture plan, made for Adagrad (the training tests' optimizer).
func testPlan(t *testing.T, world int) *Plan {
	t.Helper()
	return testPlanFor(t, world, OptimizerAdagrad)
}

func testPlanFor(t *testing.T, world int, optimizer OptimizerType) *Plan {
	t.Helper()
	features := []FeatureConfig{{Name: "f0"}, {Name: "f1"}, {Name: "f2"}}
	var tables []TableConfig
	for i := range tableNames {
		tables = append(tables, TableConfig{Name: tableNames[i], Rows: tableRows[i], Dim: tableDims[i],
			Features: []int32{int32(i)}})
	}
	var constraints []TableConstraints
	if world == 2 {
		constraints = []TableConstraints{
			{Table: "t0", ShardingTypes: []ShardingType{TableWise}, Ranks: []int32{1}},
			{Table: "t1", ShardingTypes: []ShardingType{RowWise}},
			{Table: "t2", ShardingTypes: []ShardingType{ColumnWise}, Ranks: []int32{0, 1}},
		}
	}
	plan, err := NewPlan(tables, features,
		Topology{WorldSize: world, BatchSize: localBatch, Optimizer: optimizer}, constraints)
	if err != nil {
		t.Fatalf("NewPlan(%d): %v", world, err)
	}
	return plan
}

// batch concatenates the deterministic batches of ranks [first, first+ranks) at a step.
func batch(step, first, ranks int) *KJT {
	k := &KJT{BatchSize: int64(localBatch * ranks), NumFeatures: 3}
	for f := 0; f < 3; f++ {
		for r := first; r < first+ranks; r++ {
			for b := 0; b < localBatch; b++ {
				n := (step*7 + r*5 + f*3 + b*11) % 4
				k.Lengths = append(k.Lengths, int32(n))
				for j := 0; j < n; j++ {
					k.Values = append(k.Values, int64(step*13+r*17+f*19+b*23+j*29)%tableRows[f])
				}
			}
		}
	}
	return k
}

// trainStep runs forward and backward of the loss mean(0.5*|out|^2) on the batch of ranks
// [first, first+ranks) at step.
func trainStep(coll *EmbeddingCollection, step, first, ranks int) error {
	k := batch(step, first, ranks)
	out, err := coll.ForwardAlloc(k)
	if err != nil {
		return err
	}
	for i := range out {
		out[i] /= float32(k.BatchSize)
	}
	return coll.Backward(out)
}

// trainSteps trains `steps` steps on the batch of ranks [first, first+ranks) and returns every
// table's weights afterwards.
func trainSteps(t *testing.T, coll *EmbeddingCollection, steps, first, ranks int) [][]float32 {
	for s := 0; s < steps; s++ {
		if err := trainStep(coll, s, first, ranks); err != nil {
			t.Errorf("train step %d: %v", s, err)
			return nil
		}
	}
	var weights [][]float32
	for _, name := range tableNames {
		w, err := coll.Weights(name)
		if err != nil {
			t.Errorf("weights: %v", err)
			return nil
		}
		weights = append(weights, w)
	}
	return weights
}

func adagrad() *OptimizerConfig {
	o := DefaultOptimizer()
	o.Type = OptimizerAdagrad
	o.LearningRate = 0.1
	return &o
}

// singleRank returns every table's weights before and after `steps` steps at world size 1 on
// the concatenated batches of two ranks (Adagrad, seed 7).
func singleRank(t *testing.T, steps int) (initial, trained [][]float32) {
	plan1 := testPlan(t, 1)
	defer plan1.Close()
	comms1, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms1[0].Close()
	coll1, err := NewEmbeddingCollection(plan1, comms1[0], adagrad(), &EmbeddingOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer coll1.Close()
	initial = trainSteps(t, coll1, 0, 0, 2)
	return initial, trainSteps(t, coll1, steps, 0, 2)
}

// onTwoRanks runs body on a world-2 collection of the test plan per rank (goroutines; Adagrad,
// seed 7) and returns what each rank's body returned.
func onTwoRanks(t *testing.T, body func(rank int, coll *EmbeddingCollection) [][]float32) [][][]float32 {
	plan2 := testPlan(t, 2)
	defer plan2.Close()
	comms, err := NewLocalGroup(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	results := make([][][]float32, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			coll, err := NewEmbeddingCollection(plan2, comms[rank], adagrad(), &EmbeddingOptions{Seed: 7})
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return
			}
			defer coll.Close()
			results[rank] = body(rank, coll)
		}(r)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	return results
}

func TestTwoRankShardedTrainingEqualsSingleRank(t *testing.T) {
	const steps = 4
	initial, single := singleRank(t, steps)
	results := onTwoRanks(t, func(rank int, coll *EmbeddingCollection) [][]float32 {
		return trainSteps(t, coll, steps, rank, 1)
	})
	if t.Failed() {
		return
	}
	for i, name := range tableNames {
		if len(results[0][i]) != int(tableRows[i])*tableDims[i] {
			t.Fatalf("%s: %d weights", name, len(results[0][i]))
		}
		changed := false
		for j, want := range single[i] {
			got := results[0][i][j]
			if math.Abs(float64(got-want)) > 1e-5*math.Max(1, math.Abs(float64(want))) {
				t.Fatalf("%s[%d]: sharded %g, single %g", name, j, got, want)
			}
			changed = changed || initial[i][j] != want
		}
		if !changed {
			t.Errorf("%s: training changed nothing", name)
		}
	}
}

func TestMixedPlanShardsAsConstrained(t *testing.T) {
	plan := testPlan(t, 2)
	defer plan.Close()
	typ, _, err := plan.TableSharding(0)
	if err != nil || typ != TableWise {
		t.Fatalf("t0 sharding %d, %v", typ, err)
	}
	shard, err := plan.Shard(0, 0)
	if err != nil || shard.Rank != 1 {
		t.Fatalf("t0 shard %+v, %v", shard, err)
	}
	typ, n, err := plan.TableSharding(2)
	if err != nil || typ != ColumnWise || n != 2 {
		t.Fatalf("t2 sharding %d x%d, %v", typ, n, err)
	}
	text, err := plan.JSON()
	if err != nil {
		t.Fatal(err)
	}
	copy, err := PlanFromJSON(text)
	if err != nil {
		t.Fatal(err)
	}
	defer copy.Close()
	h1, _ := plan.Hash()
	h2, _ := copy.Hash()
	if h1 != h2 {
		t.Fatalf("hash %x != %x", h1, h2)
	}
}

// testWorld1Collection is a world-1 collection of testPlan with the default optimizer and
// options (its plan and communicator closed: the collection keeps what it needs).
func testWorld1Collection(t *testing.T) *EmbeddingCollection {
	t.Helper()
	plan := testPlan(t, 1)
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	coll, err := NewEmbeddingCollection(plan, comms[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return coll
}

func TestOutOfRangeIdReturnsEinvalWithTheCMessage(t *testing.T) {
	coll := testWorld1Collection(t)
	defer coll.Close()
	bad := &KJT{BatchSize: 1, NumFeatures: 3, Lengths: []int32{1, 1, 1}, Values: []int64{0, 987654, 0}}
	_, err := coll.ForwardAlloc(bad)
	e, ok := err.(*Error)
	if !ok || e.Code != ErrCodeInvalid || e.CodeName() != "SHARDREC_EINVAL" {
		t.Fatalf("want *Error EINVAL, got %T %v", err, err)
	}
	if !strings.Contains(e.Message, "987654") {
		t.Fatalf("message does not name the id: %q", e.Message)
	}
	plan := testPlan(t, 1)
	defer plan.Close()
	if _, err := plan.FindTable("nope"); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("FindTable: %v", err)
	}
}

func TestUseAfterCloseFailsAndCloseIsIdempotent(t *testing.T) {
	plan := testPlan(t, 1)
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := NewEmbeddingCollection(plan, comms[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	coll.Close()
	coll.Close()
	// The C message says the handle was NULL; the binding adds why that happens in Go.
	closed := func(err error) bool {
		return CodeOf(err) == ErrCodeInvalid && strings.Contains(err.Error(), "nil or was closed")
	}
	if _, err := coll.NumSteps(); !closed(err) {
		t.Fatalf("NumSteps after Close: %v", err)
	}
	if _, err := coll.DynamicStats("t0"); !closed(err) {
		t.Fatalf("DynamicStats after Close: %v", err)
	}
	plan.Close()
	if _, err := plan.NumTables(); !closed(err) {
		t.Fatalf("NumTables after Close: %v", err)
	}
	comms[0].Close()
	if _, err := comms[0].Rank(); !closed(err) {
		t.Fatalf("Rank after Close: %v", err)
	}
}

func TestNilHandlesAreRefusedWithoutAPanic(t *testing.T) {
	var plan *Plan
	var comm *Comm
	var coll *EmbeddingCollection
	if _, err := NewEmbeddingCollection(plan, comm, nil, nil); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("a nil plan and communicator: %v", err)
	}
	if _, err := plan.NumTables(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("NumTables of a nil plan: %v", err)
	}
	if _, err := comm.Rank(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Rank of a nil communicator: %v", err)
	}
	if _, err := coll.NumSteps(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("NumSteps of a nil collection: %v", err)
	}
	var inf *Inference
	if _, err := inf.Version(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Version of a nil inference handle: %v", err)
	}
	if _, err := inf.Lookup(&KJT{}, nil); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Lookup of a nil inference handle: %v", err)
	}
	var snap *InferenceSnapshot
	if _, err := snap.Version(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Version of a nil snapshot: %v", err)
	}
	if inf.Close() != nil || snap.Close() != nil || inf.OutputSize(&KJT{}) != 0 {
		t.Fatal("Close or OutputSize of nil serving handles")
	}
}

// A string with a NUL byte would reach C cut at the NUL, naming another file or table: refused.
func TestStringsWithANULAreRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenInference(dir+"\x00/elsewhere", nil); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("OpenInference of a path with a NUL: %v", err)
	} else if !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("the message does not say why: %v", err)
	}
	plan := testPlan(t, 1)
	defer plan.Close()
	if _, err := plan.FindTable("t0\x00"); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("FindTable of a name with a NUL: %v", err)
	}
	coll := onOneRank(t, plan)
	defer coll.Close()
	name, _ := plan.TableName(0)
	if _, err := coll.Weights(name + "\x00x"); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Weights of a table name with a NUL: %v", err)
	}
	if err := coll.SaveCheckpoint(dir + "/ck\x00"); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("SaveCheckpoint into a path with a NUL: %v", err)
	}
	if err := coll.SaveCheckpoint(dir + "/ck"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/ck"); err != nil {
		t.Fatal(err)
	}
	_, badTable := NewPlan([]TableConfig{{Name: "a\x00b", Rows: 4, Dim: 4}}, nil, Topology{WorldSize: 1}, nil)
	if CodeOf(badTable) != ErrCodeInvalid {
		t.Fatalf("a table name with a NUL: %v", badTable)
	}
	// The bind address used to reach C cut at the NUL ("127.0.0.1") and be used.
	if _, err := NewLocalGroup(1, &CommOptions{BindAddress: "127.0.0.1\x00junk"}); CodeOf(err) != ErrCodeInvalid ||
		!strings.Contains(err.Error(), "NUL") {
		t.Fatalf("a bind address with a NUL: %v", err)
	}
}

// A negative index reached C as a huge unsigned one ("table index 18446744073709551615 is out of
// range"); it is refused here, named as given.
func TestNegativeIndicesAreNamedAsGiven(t *testing.T) {
	plan := testPlan(t, 1)
	defer plan.Close()
	_, e1 := plan.TableName(-1)
	_, e2 := plan.FeatureName(-1)
	_, _, e3 := plan.TableShape(-2)
	_, _, e4 := plan.TableSharding(-1)
	_, e5 := plan.Shard(0, -1)
	for i, err := range []error{e1, e2, e3, e4, e5} {
		if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "is negative") {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// onOneRank is a collection of a world-1 plan on a communicator of its own (the collection keeps
// the communicator alive).
func onOneRank(t *testing.T, plan *Plan) *EmbeddingCollection {
	t.Helper()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	coll, err := NewEmbeddingCollection(plan, comms[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return coll
}

func TestWrongOutputSizeIsRejected(t *testing.T) {
	plan := testPlan(t, 1)
	defer plan.Close()
	coll := onOneRank(t, plan)
	defer coll.Close()
	k := batch(0, 0, 1)
	n, _ := coll.OutputSize(k)
	if err := coll.Forward(k, make([]float32, n+1)); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("oversized out: %v", err)
	}
	if err := coll.Forward(k, make([]float32, n)); err != nil {
		t.Fatal(err)
	}
	if err := coll.Backward(make([]float32, n-1)); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("short grad: %v", err)
	}
}

// Sizes no buffer can have are errors, never a panic inside the binding: a negative BatchSize
// (make panicked on it in ForwardAlloc; OutputSize gave a negative size), a local group too
// large to allocate, and Close on a nil object.
func TestImpossibleSizesAreErrorsNotPanics(t *testing.T) {
	for _, n := range []int{-1, 0, 1025, 1 << 40} {
		if _, err := NewLocalGroup(n, nil); CodeOf(err) != ErrCodeInvalid ||
			!strings.Contains(err.Error(), strconv.Itoa(n)) {
			t.Fatalf("NewLocalGroup(%d): %v, want ErrCodeInvalid naming the size", n, err)
		}
	}
	coll := testWorld1Collection(t)
	defer coll.Close()
	for _, b := range []int64{-1, 1 << 62} {
		batch := &KJT{BatchSize: b, NumFeatures: 3, Lengths: []int32{1, 1, 1}, Values: []int64{0, 1, 2}}
		if n, err := coll.OutputSize(batch); CodeOf(err) != ErrCodeInvalid {
			t.Fatalf("OutputSize(BatchSize %d) = %d, %v; want ErrCodeInvalid", b, n, err)
		}
		if _, err := coll.ForwardAlloc(batch); CodeOf(err) != ErrCodeInvalid {
			t.Fatalf("ForwardAlloc(BatchSize %d): %v, want ErrCodeInvalid", b, err)
		}
	}
	_, err := NewPlan([]TableConfig{{Name: "wide", Rows: 4, Dim: 1 << 40, Features: []int32{0}}},
		[]FeatureConfig{{Name: "f0"}}, Topology{WorldSize: 1}, nil)
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "1099511627776") {
		t.Fatalf("a dim beyond int32: %v, want ErrCodeInvalid naming it", err)
	}
	var nilColl *EmbeddingCollection
	var nilComm *Comm
	var nilPlan *Plan
	if nilColl.Close() != nil || nilComm.Close() != nil || nilPlan.Close() != nil {
		t.Fatal("Close on a nil object failed")
	}
}
