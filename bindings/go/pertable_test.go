// Tests of per-table optimizers, named features, output keys and offsets, and step timings
// through the Go binding: a collection mixing a row-wise Adagrad table and an SGD table trains
// each table exactly like a collection holding that table alone with that optimizer.
package shardrec

import (
	"math"
	"strings"
	"testing"
)

// pattern is the starting weight i of a table: a fixed function of the table's name.
func pattern(table string, i int) float32 {
	return float32((i*7+int(table[0])*13)%23)/23 - 0.5
}

// trainPattern sets every table's weights to pattern, then runs steps forward/backward steps
// on batch with the gradient of 0.5*|out|^2 (the output itself).
func trainPattern(t *testing.T, coll *EmbeddingCollection, tables []TableConfig, batch *KJT, steps int) {
	t.Helper()
	for _, tc := range tables {
		w := make([]float32, int(tc.Rows)*tc.Dim)
		for i := range w {
			w[i] = pattern(tc.Name, i)
		}
		if err := coll.SetWeights(tc.Name, w); err != nil {
			t.Fatal(err)
		}
	}
	for s := 0; s < steps; s++ {
		out, err := coll.ForwardAlloc(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := coll.Backward(out); err != nil {
			t.Fatal(err)
		}
	}
}

func newWorld1Collection(t *testing.T, tables []TableConfig, features []FeatureConfig,
	opt *OptimizerConfig) *EmbeddingCollection {
	t.Helper()
	topo := Topology{WorldSize: 1}
	if opt != nil {
		topo.Optimizer = opt.Type // the collection's optimizer is the plan's
	}
	plan, err := NewPlan(tables, features, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := NewEmbeddingCollection(plan, comms[0], opt, nil)
	comms[0].Close()
	if err != nil {
		t.Fatal(err)
	}
	return coll
}

func TestPerTableOptimizersEqualPerTableReferences(t *testing.T) {
	adagrad := &OptimizerConfig{Type: OptimizerRowwiseAdagrad, LearningRate: 0.1, Eps: 1e-8,
		Beta1: 0.9, Beta2: 0.999}
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.5, Eps: 1e-8, Beta1: 0.9,
		Beta2: 0.999}
	features := []FeatureConfig{{Name: "f0"}, {Name: "f1"}}
	tableA := TableConfig{Name: "a", Rows: 50, Dim: 8, FeatureNames: []string{"f0"},
		Optimizer: adagrad}
	tableB := TableConfig{Name: "b", Rows: 40, Dim: 4, Features: []int32{1}}
	mixed := newWorld1Collection(t, []TableConfig{tableA, tableB}, features, sgd)
	defer mixed.Close()
	batch := &KJT{BatchSize: 2, NumFeatures: 2, Lengths: []int32{2, 1, 1, 2},
		Values: []int64{3, 49, 3, 0, 17, 39}}
	trainPattern(t, mixed, []TableConfig{tableA, tableB}, batch, 3)

	// References: each table alone, trained with its optimizer as the collection default.
	refA := newWorld1Collection(t, []TableConfig{{Name: "a", Rows: 50, Dim: 8,
		Features: []int32{0}}}, features[:1], adagrad)
	defer refA.Close()
	trainPattern(t, refA, []TableConfig{tableA}, &KJT{BatchSize: 2, NumFeatures: 1,
		Lengths: []int32{2, 1}, Values: []int64{3, 49, 3}}, 3)
	refB := newWorld1Collection(t, []TableConfig{{Name: "b", Rows: 40, Dim: 4,
		Features: []int32{0}}}, features[1:], sgd)
	defer refB.Close()
	trainPattern(t, refB, []TableConfig{tableB}, &KJT{BatchSize: 2, NumFeatures: 1,
		Lengths: []int32{1, 2}, Values: []int64{0, 17, 39}}, 3)

	for _, c := range []struct {
		table string
		ref   *EmbeddingCollection
	}{{"a", refA}, {"b", refB}} {
		got, err := mixed.Weights(c.table)
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.ref.Weights(c.table)
		if err != nil {
			t.Fatal(err)
		}
		changed := false
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-6 {
				t.Fatalf("table %s weight %d: mixed %v, reference %v", c.table, i, got[i], want[i])
			}
			changed = changed || got[i] != pattern(c.table, i)
		}
		if !changed {
			t.Fatalf("table %s did not train", c.table)
		}
	}
	if o, err := mixed.TableOptimizer("a"); err != nil || o.Type != OptimizerRowwiseAdagrad {
		t.Fatalf("table a trains with %+v (%v), want row-wise Adagrad", o, err)
	}
	if o, err := mixed.TableOptimizer("b"); err != nil || o.Type != OptimizerSGD || o.LearningRate != 0.5 {
		t.Fatalf("table b trains with %+v (%v), want the collection's SGD at 0.5", o, err)
	}
}

func TestOptimizerOtherThanThePlansIsRejected(t *testing.T) {
	plan, err := NewPlan([]TableConfig{{Name: "t", Rows: 10, Dim: 4, Features: []int32{0}}},
		[]FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1, Optimizer: OptimizerAdam}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	sgd := DefaultOptimizer()
	_, err = NewEmbeddingCollection(plan, comms[0], &sgd, nil)
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "adam") {
		t.Fatalf("an SGD collection over an Adam plan: %v, want ErrCodeInvalid naming adam", err)
	}
	coll, err := NewEmbeddingCollection(plan, comms[0], nil, nil) // the plan's optimizer
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	if o, err := coll.TableOptimizer("t"); err != nil || o.Type != OptimizerAdam {
		t.Fatalf("a collection without an optimizer trains with %+v (%v), want the plan's Adam", o, err)
	}
}

func TestTableLearningRatesOutputsAndTimings(t *testing.T) {
	adagrad := &OptimizerConfig{Type: OptimizerAdagrad, LearningRate: 0.1, Eps: 1e-8,
		Beta1: 0.9, Beta2: 0.999}
	features := []FeatureConfig{{Name: "user"}, {Name: "item"}, {Name: "shop"}}
	tables := []TableConfig{
		{Name: "users", Rows: 30, Dim: 8, FeatureNames: []string{"user"}, Optimizer: adagrad},
		{Name: "items", Rows: 20, Dim: 4, Features: []int32{1, 2}},
	}
	coll := newWorld1Collection(t, tables, features, nil)
	defer coll.Close()

	blocks, err := coll.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	want := []OutputBlock{{"user", "users", 0, 8}, {"item", "items", 8, 4},
		{"shop", "items", 12, 4}}
	if len(blocks) != len(want) {
		t.Fatalf("outputs %v, want %v", blocks, want)
	}
	for i := range want {
		if blocks[i] != want[i] {
			t.Fatalf("output %d: %+v, want %+v", i, blocks[i], want[i])
		}
	}
	if dim, _ := coll.OutputDim(); dim != 16 {
		t.Fatalf("output dim %d, want 16 (the blocks' widths)", dim)
	}

	if err := coll.SetTableLearningRate("users", 0.25); err != nil {
		t.Fatal(err)
	}
	users, err := coll.TableOptimizer("users")
	if err != nil || users.Type != OptimizerAdagrad || users.LearningRate != 0.25 {
		t.Fatalf("users optimizer %+v, %v; want Adagrad at 0.25", users, err)
	}
	items, err := coll.TableOptimizer("items")
	if err != nil || items.Type != OptimizerSGD || items.LearningRate != DefaultOptimizer().LearningRate {
		t.Fatalf("items optimizer %+v, %v; want the default SGD", items, err)
	}
	if err := coll.SetTableLearningRate("nope", 0.1); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("unknown table: %v, want ErrCodeNotFound", err)
	}

	batch := &KJT{BatchSize: 3, NumFeatures: 3, Lengths: []int32{1, 1, 1, 1, 1, 1, 1, 1, 1},
		Values: []int64{0, 1, 2, 3, 4, 5, 6, 7, 8}}
	for s := 0; s < 4; s++ {
		out, err := coll.ForwardAlloc(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := coll.Backward(out); err != nil {
			t.Fatal(err)
		}
	}
	tm, err := coll.StepTimings()
	if err != nil {
		t.Fatal(err)
	}
	if tm.Forwards != 4 || tm.Backwards != 4 || tm.Samples != 12 || tm.TotalSeconds <= 0 ||
		tm.SamplesPerSecond() <= 0 {
		t.Fatalf("timings %+v", tm)
	}
}

// NewOptimizer keeps the library's defaults beside the type and rate it is given (a struct
// literal would pass its unset betas and eps as 0): the collection reports them back.
func TestNewOptimizerKeepsTheDefaults(t *testing.T) {
	opt := NewOptimizer(OptimizerAdam, 0.05)
	want := DefaultOptimizer()
	want.Type, want.LearningRate = OptimizerAdam, 0.05
	if *opt != want {
		t.Fatalf("NewOptimizer(Adam, 0.05) = %+v, want %+v", *opt, want)
	}
	tables := []TableConfig{{Name: "t", Rows: 8, Dim: 4, Features: []int32{0}, Optimizer: opt}}
	coll := newWorld1Collection(t, tables, []FeatureConfig{{Name: "f0"}}, opt)
	defer coll.Close()
	got, err := coll.TableOptimizer("t")
	if err != nil || got.Beta1 != 0.9 || got.Beta2 != 0.999 || got.Eps != 1e-8 ||
		got.LearningRate != 0.05 || got.Type != OptimizerAdam {
		t.Fatalf("the collection trains with %+v (%v), want Adam at 0.05 with the defaults", got, err)
	}
}
