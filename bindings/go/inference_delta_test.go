// A dynamic table's delta export replayed into a serving handle opened from the checkpoint
// taken at the mark: the served rows are the trained ones, the evicted id reads zeros; after a
// checkpoint load the delta is Full and replaces the rows of a copy opened elsewhere.
package shardrec

import (
	"reflect"
	"testing"
)

func TestInferenceAppliesADynamicDelta(t *testing.T) {
	const dim = 4
	tables := []TableConfig{
		{Name: "dyn", Rows: 4, Dim: dim, Features: []int32{0},
			Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}},
		{Name: "fixed", Rows: 3, Dim: 2, Features: []int32{1}},
	}
	features := []FeatureConfig{{Name: "raw"}, {Name: "small"}}
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	coll := newWorld1Collection(t, tables, features, sgd)
	defer coll.Close()
	// One sample per id, each a bag of that id; the fixed feature reads row 0.
	request := func(ids []int64) *KJT {
		lengths := make([]int32, 2*len(ids))
		for i := range lengths {
			lengths[i] = 1
		}
		return &KJT{BatchSize: int64(len(ids)), NumFeatures: 2, Lengths: lengths,
			Values: append(append([]int64{}, ids...), make([]int64, len(ids))...)}
	}
	train := func(ids []int64) []float32 {
		t.Helper()
		out, err := coll.ForwardAlloc(request(ids))
		if err == nil {
			err = coll.Backward(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	train([]int64{10, 20, 30})
	dir := t.TempDir()
	if err := coll.DynamicMark("dyn"); err != nil {
		t.Fatal(err)
	}
	if err := coll.SaveCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	// 20 trains again, 40 and 50 arrive and 10 is evicted (LRU).
	train([]int64{20})
	train([]int64{40, 50})
	d, err := coll.DynamicDelta("dyn")
	if err != nil || !reflect.DeepEqual(d.Tombstones, []int64{10}) {
		t.Fatalf("delta %+v, %v", d, err)
	}
	// The training table now (a forward of known ids changes no weights; 10 is not asked).
	want, err := coll.ForwardAlloc(request([]int64{20, 30, 40, 50}))
	if err != nil {
		t.Fatal(err)
	}

	inf, err := OpenInference(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	before, _ := lookupAlloc(t, inf, request([]int64{10, 40}))
	if reflect.DeepEqual(before[:dim], make([]float32, dim)) {
		t.Fatal("id 10 reads zeros before the delta")
	}
	version, err := inf.ApplyDynamicDelta("dyn", d)
	if err != nil || version != 2 {
		t.Fatalf("apply: version %d, %v", version, err)
	}
	// The dynamic columns of each sample (the fixed table trained on since the checkpoint).
	got, v := lookupAlloc(t, inf, request([]int64{20, 30, 40, 50}))
	const width = dim + 2
	for i := 0; i < 4; i++ {
		if v != 2 || !reflect.DeepEqual(got[i*width:i*width+dim], want[i*width:i*width+dim]) {
			t.Fatalf("served sample %d after the delta (version %d): %v, training forward %v", i, v,
				got[i*width:i*width+dim], want[i*width:i*width+dim])
		}
	}
	gone, _ := lookupAlloc(t, inf, request([]int64{10}))
	if !reflect.DeepEqual(gone[:dim], make([]float32, dim)) {
		t.Fatalf("evicted id 10 reads %v, want zeros", gone[:dim])
	}
	// Bad deltas change nothing: a short row buffer, tombstones of a fixed table, a fixed
	// table's id out of range, an unknown table.
	bad := []struct {
		what       string
		table      string
		ids        []int64
		rows       []float32
		tombstones []int64
	}{
		{"short rows", "dyn", []int64{7}, make([]float32, dim-1), nil},
		{"tombstones of a fixed table", "fixed", nil, nil, []int64{1}},
		{"fixed id out of range", "fixed", []int64{3}, make([]float32, 2), nil},
	}
	for _, b := range bad {
		if _, err := inf.ApplyDelta(b.table, b.ids, b.rows, b.tombstones); CodeOf(err) != ErrCodeInvalid {
			t.Fatalf("%s: %v, want ErrCodeInvalid", b.what, err)
		}
	}
	if _, err := inf.ApplyDelta("nope", nil, nil, nil); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("unknown table: %v", err)
	}
	// A fixed table takes row updates.
	version, err = inf.ApplyDelta("fixed", []int64{0}, []float32{1.5, -2}, nil)
	if err != nil || version != 3 {
		t.Fatalf("fixed row update: version %d, %v", version, err)
	}
	fixed, _ := lookupAlloc(t, inf, request([]int64{20}))
	if !reflect.DeepEqual(fixed[dim:], []float32{1.5, -2}) ||
		!reflect.DeepEqual(fixed[:dim], want[:dim]) {
		t.Fatalf("after the fixed update: %v", fixed)
	}
}

// After a checkpoint load the delta is Full, and ApplyDynamicDelta makes its rows the served
// table's only rows: a copy opened from an older checkpoint (not the table at the mark) loses
// the id training no longer holds, which no tombstone names.
func TestInferenceAppliesAFullDelta(t *testing.T) {
	const dim = 4
	tables := []TableConfig{{Name: "dyn", Rows: 4, Dim: dim, Features: []int32{0},
		Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}}}
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	coll := newWorld1Collection(t, tables, []FeatureConfig{{Name: "raw"}}, sgd)
	defer coll.Close()
	request := func(ids []int64) *KJT {
		lengths := make([]int32, len(ids))
		for i := range lengths {
			lengths[i] = 1
		}
		return &KJT{BatchSize: int64(len(ids)), NumFeatures: 1, Lengths: lengths, Values: ids}
	}
	train := func(ids []int64) {
		t.Helper()
		out, err := coll.ForwardAlloc(request(ids))
		if err == nil {
			err = coll.Backward(out)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	older, newer := t.TempDir(), t.TempDir()
	train([]int64{10, 20, 30})
	if err := coll.SaveCheckpoint(older); err != nil {
		t.Fatal(err)
	}
	train([]int64{40, 50}) // 10 is evicted (LRU)
	if err := coll.SaveCheckpoint(newer); err != nil {
		t.Fatal(err)
	}
	if err := coll.DynamicMark("dyn"); err != nil {
		t.Fatal(err)
	}
	if err := coll.LoadCheckpoint(newer, nil); err != nil {
		t.Fatal(err)
	}
	d, err := coll.DynamicDelta("dyn")
	if err != nil || !d.Full || !reflect.DeepEqual(d.IDs, []int64{20, 30, 40, 50}) ||
		len(d.Tombstones) != 0 {
		t.Fatalf("delta after a load %+v, %v", d, err)
	}
	inf, err := OpenInference(older, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	if _, err := inf.ApplyDynamicDelta("dyn", d); err != nil {
		t.Fatal(err)
	}
	if info, err := inf.Table(0); err != nil || info.Rows != 4 {
		t.Fatalf("served table %+v, %v: want the 4 rows training holds", info, err)
	}
	asked := []int64{10, 20, 30, 40, 50}
	if err := coll.SetTraining(false); err != nil {
		t.Fatal(err)
	}
	want, err := coll.ForwardAlloc(request(asked))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := lookupAlloc(t, inf, request(asked))
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(got[:dim], make([]float32, dim)) {
		t.Fatalf("served %v, training %v (id 10 must read zeros)", got, want)
	}
	// A mark starts an ordinary period again.
	if err := coll.DynamicMark("dyn"); err != nil {
		t.Fatal(err)
	}
	if d, err := coll.DynamicDelta("dyn"); err != nil || d.Full || len(d.IDs) != 0 {
		t.Fatalf("delta after a mark %+v, %v", d, err)
	}
}
