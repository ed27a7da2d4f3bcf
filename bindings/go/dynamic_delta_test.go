// The delta export of a dynamic table through the Go binding: mark, train, and the delta's rows
// equal what a forward reads, with a tombstone for the id LRU eviction removed.
package shardrec

import (
	"reflect"
	"testing"
)

func TestDynamicDeltaAfterMark(t *testing.T) {
	const capacity, dim = 4, 4
	tables := []TableConfig{
		{Name: "dyn", Rows: capacity, Dim: dim, Features: []int32{0},
			Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}},
		{Name: "fixed", Rows: 3, Dim: 2, Features: []int32{1}},
	}
	features := []FeatureConfig{{Name: "raw"}, {Name: "small"}}
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	coll := newWorld1Collection(t, tables, features, sgd)
	defer coll.Close()

	// One sample per id of `ids`, each a bag of that one id; the fixed feature reads row 0.
	forward := func(ids []int64, train bool) []float32 {
		t.Helper()
		n := len(ids)
		lengths := make([]int32, 2*n)
		for i := range lengths {
			lengths[i] = 1
		}
		values := append(append([]int64{}, ids...), make([]int64, n)...)
		out, err := coll.ForwardAlloc(&KJT{BatchSize: int64(n), NumFeatures: 2, Lengths: lengths,
			Values: values})
		if err != nil {
			t.Fatal(err)
		}
		if train {
			if err := coll.Backward(out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	if _, err := coll.DynamicDelta("dyn"); CodeOf(err) != ErrCodeUsage {
		t.Fatalf("delta before any mark: %v, want ErrCodeUsage", err)
	}

	forward([]int64{10, 20, 30}, true)
	if err := coll.DynamicMark("dyn"); err != nil {
		t.Fatal(err)
	}
	d, err := coll.DynamicDelta("dyn")
	if err != nil || len(d.IDs) != 0 || len(d.Tombstones) != 0 || d.Dim != dim {
		t.Fatalf("delta right after the mark: %+v, %v", d, err)
	}
	// 20 trains again; 40 takes the free slot and 50 evicts the row seen longest ago, 10
	// (10 and 30 tie on last sight: the smaller id leaves).
	forward([]int64{20}, true)
	forward([]int64{40, 50}, true)
	d, err = coll.DynamicDelta("dyn")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.IDs, []int64{20, 40, 50}) || !reflect.DeepEqual(d.Tombstones, []int64{10}) {
		t.Fatalf("delta ids %v tombstones %v, want [20 40 50] and [10]", d.IDs, d.Tombstones)
	}
	if len(d.Rows) != 3*dim {
		t.Fatalf("%d row values for 3 rows of %d", len(d.Rows), dim)
	}
	// The rows are the table's current rows: what a forward of those ids reads (a forward of
	// known ids changes no weights).
	out := forward(d.IDs, false)
	width := dim + 2
	for i := range d.IDs {
		if !reflect.DeepEqual(d.Row(i), out[i*width:i*width+dim]) {
			t.Fatalf("row of id %d: %v, forward reads %v", d.IDs[i], d.Row(i), out[i*width:i*width+dim])
		}
	}
	// The marks stay: asking again gives the same delta plus nothing new.
	again, err := coll.DynamicDelta("dyn")
	if err != nil || !reflect.DeepEqual(again.IDs, d.IDs) || !reflect.DeepEqual(again.Rows, d.Rows) {
		t.Fatalf("second delta differs: %+v, %v", again, err)
	}
	if err := coll.DynamicMark("fixed"); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("mark of a fixed table: %v", err)
	}
	if _, err := coll.DynamicDelta("fixed"); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("delta of a fixed table: %v", err)
	}
	if _, err := coll.DynamicDelta("nope"); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("delta of an unknown table: %v", err)
	}
}
