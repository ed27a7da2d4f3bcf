// Evaluation mode and SCORE eviction through the Go binding: an evaluation forward reads known
// rows and zeros and changes nothing; the caller's scores choose the row that leaves.
package shardrec

import (
	"math"
	"reflect"
	"testing"
)

func TestDynamicEvaluationAndScores(t *testing.T) {
	const dim = 4
	tables := []TableConfig{
		{Name: "dyn", Rows: 4, Dim: dim, Features: []int32{0},
			Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}},
		{Name: "scored", Rows: 2, Dim: dim, Features: []int32{1},
			Dynamic: &DynamicTableConfig{Eviction: EvictionScore}},
	}
	features := []FeatureConfig{{Name: "a"}, {Name: "b"}}
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	coll := newWorld1Collection(t, tables, features, sgd)
	defer coll.Close()
	// One sample: a bag of a for "dyn", a bag of b for "scored".
	forward := func(a, b []int64) ([]float32, error) {
		return coll.ForwardAlloc(&KJT{BatchSize: 1, NumFeatures: 2,
			Lengths: []int32{int32(len(a)), int32(len(b))}, Values: append(append([]int64{}, a...), b...)})
	}
	train := func(a, b []int64) {
		t.Helper()
		out, err := forward(a, b)
		if err == nil {
			err = coll.Backward(out)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stats := func() DynamicTableStats {
		t.Helper()
		s, err := coll.DynamicStats("dyn")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	train([]int64{10}, []int64{1, 2})
	before := stats()
	if on, err := coll.IsTraining(); err != nil || !on {
		t.Fatalf("a new collection trains: %v, %v", on, err)
	}
	// Evaluation: 10 reads its row, twice the same; 30 reads zeros; nothing changes.
	if err := coll.SetTraining(false); err != nil {
		t.Fatal(err)
	}
	if on, err := coll.IsTraining(); err != nil || on {
		t.Fatalf("after SetTraining(false): %v, %v", on, err)
	}
	known, err := forward([]int64{10}, nil)
	if err != nil || reflect.DeepEqual(known[:dim], make([]float32, dim)) {
		t.Fatalf("known id in evaluation: %v, %v", known, err)
	}
	unknown, err := forward([]int64{30}, nil)
	if err != nil || !reflect.DeepEqual(unknown[:dim], make([]float32, dim)) {
		t.Fatalf("unknown id in evaluation: %v, %v", unknown, err)
	}
	if err := coll.Backward(unknown); CodeOf(err) != ErrCodeUsage {
		t.Fatalf("backward of an evaluation forward: %v, want ErrCodeUsage", err)
	}
	again, _ := forward([]int64{10}, nil)
	if s := stats(); s != before || !reflect.DeepEqual(again, known) {
		t.Fatalf("evaluation changed the table: %+v -> %+v, %v -> %v", before, s, known, again)
	}
	if err := coll.SetTraining(true); err != nil {
		t.Fatal(err)
	}
	train([]int64{30}, nil)
	if s := stats(); s.Size != 2 || s.TotalInserted != 2 {
		t.Fatalf("training again inserts: %+v", s)
	}

	// Scores: 1 keeps 5, 2 gets -1, 99 has no row (not counted). A new id evicts 2.
	n, err := coll.DynamicSetScores("scored", []int64{1, 2, 99}, []float64{5, -1, 3})
	if err != nil || n != 2 {
		t.Fatalf("set scores: %d, %v", n, err)
	}
	if err := coll.DynamicMark("scored"); err != nil {
		t.Fatal(err)
	}
	train(nil, []int64{3})
	d, err := coll.DynamicDelta("scored")
	if err != nil || !reflect.DeepEqual(d.IDs, []int64{3}) ||
		!reflect.DeepEqual(d.Tombstones, []int64{2}) {
		t.Fatalf("the lowest score did not leave: %+v, %v", d, err)
	}
	// Refused, nothing set: a non-finite score, lengths that differ, a table not SCORE.
	refused := map[string]func() error{
		"NaN score": func() error {
			_, err := coll.DynamicSetScores("scored", []int64{1}, []float64{math.NaN()})
			return err
		},
		"lengths that differ": func() error {
			_, err := coll.DynamicSetScores("scored", []int64{1, 3}, []float64{1})
			return err
		},
		"an LRU table": func() error {
			_, err := coll.DynamicSetScores("dyn", []int64{10}, []float64{1})
			return err
		},
	}
	for what, call := range refused {
		if err := call(); CodeOf(err) != ErrCodeInvalid {
			t.Fatalf("%s: %v, want ErrCodeInvalid", what, err)
		}
	}
	if _, err := coll.DynamicSetScores("nope", nil, nil); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("an unknown table: %v", err)
	}
	if err := coll.SetTraining(false); err != nil {
		t.Fatal(err)
	}
}
