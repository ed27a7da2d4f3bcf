// The delta export of a dynamic table through the Go binding: mark, train, and the delta's rows
// equal what a forward reads, with a tombstone for the id LRU eviction removed.
package shardrec

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// safetensor is one tensor of a safetensors header.
type safetensor struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets [2]int  `json:"data_offsets"`
}

// readSafetensors returns a safetensors file's tensors, its metadata and its data section.
func readSafetensors(t *testing.T, path string) (map[string]safetensor, map[string]string, []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil || len(raw) < 8 {
		t.Fatalf("read %s: %v", path, err)
	}
	n := binary.LittleEndian.Uint64(raw)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	tensors := map[string]safetensor{}
	meta := map[string]string{}
	for k, v := range header {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &meta); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var st safetensor
		if err := json.Unmarshal(v, &st); err != nil {
			t.Fatal(err)
		}
		tensors[k] = st
	}
	return tensors, meta, raw[8+n:]
}

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
	// The table's export keyed by id (no new call): ids 20, 30, 40, 50 (10 left), and the
	// delta's rows are its rows of those ids.
	path := filepath.Join(t.TempDir(), "dyn.safetensors")
	// With the optimizer state too (keyed by the same ids), and imported back: a table import
	// of its own rows changes nothing.
	if err := coll.ExportTable("dyn", path, true); err != nil {
		t.Fatalf("export with optimizer state: %v", err)
	}
	if err := coll.ImportTable("dyn", path, true); err != nil {
		t.Fatalf("import of the table's own export: %v", err)
	}
	if err := coll.ExportTable("dyn", path, false); err != nil {
		t.Fatal(err)
	}
	tensors, meta, data := readSafetensors(t, path)
	ids, weights := tensors["ids"], tensors["weights"]
	if meta["format"] != "shardrec-dynamic-table" || ids.DType != "I64" || weights.DType != "F32" ||
		!reflect.DeepEqual(weights.Shape, []int64{4, dim}) {
		t.Fatalf("export header: %+v %+v", tensors, meta)
	}
	exported := map[int64][]float32{}
	for i := 0; i < 4; i++ {
		id := int64(binary.LittleEndian.Uint64(data[ids.DataOffsets[0]+8*i:]))
		row := make([]float32, dim)
		for c := range row {
			at := weights.DataOffsets[0] + 4*(i*dim+c)
			row[c] = math.Float32frombits(binary.LittleEndian.Uint32(data[at:]))
		}
		exported[id] = row
	}
	if _, ok := exported[10]; ok || len(exported) != 4 {
		t.Fatalf("exported ids: %v", exported)
	}
	for i, id := range d.IDs {
		if !reflect.DeepEqual(exported[id], d.Row(i)) {
			t.Fatalf("exported row of %d: %v, delta %v", id, exported[id], d.Row(i))
		}
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

// At world 2 the delta is collective: a row-wise table's changes on both ranks' shards, the
// same on both, whose rows equal what each rank's forward reads.
func TestDynamicDeltaGathersBothRanks(t *testing.T) {
	const dim = 4
	tables := []TableConfig{{Name: "dyn", Rows: 64, Dim: dim, Features: []int32{0},
		Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}}}
	features := []FeatureConfig{{Name: "raw"}}
	constraints := []TableConstraints{{Table: "dyn", ShardingTypes: []ShardingType{RowWise}}}
	plan, err := NewPlan(tables, features, Topology{WorldSize: 2}, constraints)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	deltas := make([]*DynamicDelta, 2)
	onRanks(t, 2, func(rank int, c *Comm) error {
		coll, err := NewEmbeddingCollection(plan, c, sgd, nil)
		if err != nil {
			return err
		}
		defer coll.Close()
		forward := func(ids []int64, train bool) ([]float32, error) {
			lengths := make([]int32, len(ids))
			for i := range lengths {
				lengths[i] = 1
			}
			out, err := coll.ForwardAlloc(&KJT{BatchSize: int64(len(ids)), NumFeatures: 1,
				Lengths: lengths, Values: ids})
			if err == nil && train {
				err = coll.Backward(out)
			}
			return out, err
		}
		first := [][]int64{{1, 2, 3}, {101, 102, 103}}
		second := [][]int64{{7, 1 << 60}, {-5, 2}}
		if _, err := forward(first[rank], true); err != nil {
			return err
		}
		if err := coll.DynamicMark("dyn"); err != nil {
			return err
		}
		if _, err := forward(second[rank], true); err != nil {
			return err
		}
		d, err := coll.DynamicDelta("dyn")
		if err != nil {
			return err
		}
		deltas[rank] = d
		out, err := forward(d.IDs, false)
		if err != nil {
			return err
		}
		for i := range d.IDs {
			if !reflect.DeepEqual(d.Row(i), out[i*dim:(i+1)*dim]) {
				t.Errorf("rank %d: row of id %d %v, forward reads %v", rank, d.IDs[i], d.Row(i),
					out[i*dim:(i+1)*dim])
			}
		}
		return nil
	})
	if !reflect.DeepEqual(deltas[0].IDs, []int64{-5, 2, 7, 1 << 60}) ||
		len(deltas[0].Tombstones) != 0 || !reflect.DeepEqual(deltas[0], deltas[1]) {
		t.Fatalf("deltas of ranks 0 and 1: %+v and %+v", deltas[0], deltas[1])
	}
}
