// A dynamic table trained on raw 64-bit ids (beyond 2^53, negative, the extremes) through the
// Go binding: admission at the second sight, LRU eviction at capacity, the stats read back.
package shardrec

import (
	"errors"
	"math"
	"testing"
)

func TestDynamicTableTrainsOnRawIDs(t *testing.T) {
	const capacity, dim = 4, 4
	tables := []TableConfig{
		{Name: "dyn", Rows: capacity, Dim: dim, Features: []int32{0},
			Dynamic: &DynamicTableConfig{Eviction: EvictionLRU, AdmissionThreshold: 2}},
		{Name: "fixed", Rows: 3, Dim: 2, Features: []int32{1}},
	}
	features := []FeatureConfig{{Name: "raw"}, {Name: "small"}}
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	coll := newWorld1Collection(t, tables, features, sgd)
	defer coll.Close()

	// 2^53 and 2^53+1 are one float64 apart from nothing: they must stay two rows.
	a, b, c := int64(1)<<53, int64(1)<<53+1, int64(-7)
	d, e := int64(math.MinInt64), int64(math.MaxInt64)
	step := func(ids []int64) []float32 {
		t.Helper()
		batch := &KJT{BatchSize: 1, NumFeatures: 2, Lengths: []int32{int32(len(ids)), 1},
			Values: append(append([]int64{}, ids...), 2)}
		out, err := coll.ForwardAlloc(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := coll.Backward(out); err != nil {
			t.Fatal(err)
		}
		return out[:dim]
	}
	stats := func() DynamicTableStats {
		t.Helper()
		s, err := coll.DynamicStats("dyn")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// First sight: below the threshold, no row, the bag reads as zeros.
	out := step([]int64{a, b, c})
	for _, v := range out {
		if v != 0 {
			t.Fatalf("ids below the admission threshold read %v, want zeros", out)
		}
	}
	if s := stats(); s.Size != 0 || s.Capacity != capacity || s.LastRejectedAdmission != 3 {
		t.Fatalf("after the first sight: %+v", s)
	}
	// Second sight: three rows, initialised (not zero).
	out = step([]int64{a, b, c})
	nonzero := false
	for _, v := range out {
		nonzero = nonzero || v != 0
	}
	if !nonzero {
		t.Fatalf("admitted rows read zeros")
	}
	s := stats()
	if s.Size != 3 || s.LastInserted != 3 || s.LastEvicted != 0 || s.MetadataBytes == 0 {
		t.Fatalf("after admission: %+v", s)
	}
	// Two new ids seen twice each in one bag: one free slot, one LRU victim among a, b, c.
	step([]int64{d, d, e, e})
	s = stats()
	want := DynamicTableStats{Size: capacity, Capacity: capacity, LoadFactor: 1, LastInserted: 2,
		LastEvicted: 1, TotalInserted: 5, TotalEvicted: 1, TotalRejectedAdmission: 3,
		MetadataBytes: s.MetadataBytes, CapacityBytes: s.CapacityBytes, LastAdmitted: 2,
		TotalAdmitted: 5}
	if s != want {
		t.Fatalf("at capacity: %+v, want %+v", s, want)
	}
	// A fixed table has no dynamic stats; an unknown table is not found.
	var ferr *Error
	if _, err := coll.DynamicStats("fixed"); !errors.As(err, &ferr) || ferr.Code != ErrCodeInvalid {
		t.Fatalf("fixed table: %v", err)
	}
	if _, err := coll.DynamicStats("nope"); !errors.As(err, &ferr) || ferr.Code != ErrCodeNotFound {
		t.Fatalf("unknown table: %v", err)
	}
}

func TestDynamicTableConfigIsValidated(t *testing.T) {
	tables := []TableConfig{{Name: "dyn", Rows: 8, Dim: 4, Features: []int32{0},
		Dynamic: &DynamicTableConfig{Eviction: EvictionTTL}}} // TTL needs TTLSteps >= 1
	if _, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil); err == nil {
		t.Fatal("a TTL table without TTLSteps was accepted")
	}
	tables[0].Dynamic.TTLSteps = 5
	plan, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan.Close()
}

// A capacity in bytes (Rows 0): the planner's slots are those whose row (SGD: no state) and
// metadata fit; the stats report both figures; rows and bytes together are refused.
func TestDynamicTableCapacityInBytes(t *testing.T) {
	const dim = 4
	dyn := &DynamicTableConfig{Eviction: EvictionLRU, CapacityBytes: 1600}
	tables := []TableConfig{{Name: "dyn", Rows: 0, Dim: dim, Features: []int32{0}, Dynamic: dyn}}
	features := []FeatureConfig{{Name: "f"}}
	coll := newWorld1Collection(t, tables, features, &OptimizerConfig{Type: OptimizerSGD})
	defer coll.Close()
	s, err := coll.DynamicStats("dyn")
	if err != nil {
		t.Fatal(err)
	}
	perSlot := 4*dim + int64(s.MetadataBytes)/s.Capacity
	if s.Capacity <= 0 || s.Capacity != 1600/perSlot ||
		s.CapacityBytes != uint64((s.Capacity+1)*4*dim)+s.MetadataBytes {
		t.Fatalf("capacity from 1600 bytes: %+v", s)
	}
	tables[0].Rows = 8
	var ferr *Error
	if _, err := NewPlan(tables, features, Topology{WorldSize: 1}, nil); !errors.As(err, &ferr) ||
		ferr.Code != ErrCodeInvalid {
		t.Fatalf("rows and bytes both: %v", err)
	}
}

// Decaying admission counts: with AdmissionThreshold 2 an id seen once per step gets a row at its
// second step, but with AdmissionDecaySteps 1 its count halves before every step and it never
// does; a negative decay is refused.
func TestDynamicTableAdmissionDecay(t *testing.T) {
	admittedAfter := func(decay int64) int64 {
		t.Helper()
		tables := []TableConfig{{Name: "dyn", Rows: 8, Dim: 4, Features: []int32{0},
			Dynamic: &DynamicTableConfig{AdmissionThreshold: 2, AdmissionDecaySteps: decay}}}
		coll := newWorld1Collection(t, tables, []FeatureConfig{{Name: "f"}},
			&OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1})
		defer coll.Close()
		for step := 0; step < 3; step++ {
			batch := &KJT{BatchSize: 1, NumFeatures: 1, Lengths: []int32{1},
				Values: []int64{int64(1) << 60}}
			out, err := coll.ForwardAlloc(batch)
			if err != nil {
				t.Fatal(err)
			}
			if err := coll.Backward(out); err != nil {
				t.Fatal(err)
			}
		}
		s, err := coll.DynamicStats("dyn")
		if err != nil {
			t.Fatal(err)
		}
		return s.Size
	}
	if n := admittedAfter(0); n != 1 {
		t.Fatalf("without decay: %d rows, want 1", n)
	}
	if n := admittedAfter(1); n != 0 {
		t.Fatalf("with decay 1: %d rows, want 0", n)
	}
	tables := []TableConfig{{Name: "dyn", Rows: 8, Dim: 4, Features: []int32{0},
		Dynamic: &DynamicTableConfig{AdmissionThreshold: 2, AdmissionDecaySteps: -1}}}
	var ferr *Error
	if _, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil); !errors.As(err, &ferr) ||
		ferr.Code != ErrCodeInvalid {
		t.Fatalf("negative decay: %v", err)
	}
}
