// An FP8 table through the Go binding: set_weights encodes each row (the values change, within
// the documented E4M3 bound), and training it follows an fp32 table started from the same
// decoded weights within that bound while its updated rows are encoded again.
package shardrec

import (
	"math"
	"testing"
)

// rowBoundViolations counts the elements of got farther from want than 2^-4 of their row's
// largest magnitude (E4M3's bound, the row's scale being at most twice that magnitude / 448).
func rowBoundViolations(got, want []float32, dim int) int {
	bad := 0
	for r := 0; r+dim <= len(want); r += dim {
		amax := 0.0
		for _, v := range want[r : r+dim] {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		for c := r; c < r+dim; c++ {
			if math.Abs(float64(got[c]-want[c])) > amax/16 {
				bad++
			}
		}
	}
	return bad
}

func TestFP8TableEncodesRowsAndTrains(t *testing.T) {
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.3, Eps: 1e-8, Beta1: 0.9,
		Beta2: 0.999}
	features := []FeatureConfig{{Name: "f0"}}
	fp8 := TableConfig{Name: "a", Rows: 20, Dim: 8, Features: []int32{0}, DType: DTypeFP8E4M3}
	fp32 := fp8
	fp32.DType = DTypeFloat32
	c8 := newWorld1Collection(t, []TableConfig{fp8}, features, sgd)
	defer c8.Close()
	c32 := newWorld1Collection(t, []TableConfig{fp32}, features, sgd)
	defer c32.Close()
	w := make([]float32, 20*8)
	for i := range w {
		w[i] = pattern("a", i) * float32(1+i%5)
	}
	if err := c8.SetWeights("a", w); err != nil {
		t.Fatal(err)
	}
	decoded, err := c8.Weights("a")
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i := range w {
		if decoded[i] != w[i] {
			changed++
		}
	}
	if changed == 0 || rowBoundViolations(decoded, w, 8) != 0 {
		t.Fatalf("set_weights: %d values changed, %d beyond the bound", changed,
			rowBoundViolations(decoded, w, 8))
	}
	// The fp32 twin starts from the decoded rows; one SGD step on both.
	if err := c32.SetWeights("a", decoded); err != nil {
		t.Fatal(err)
	}
	batch := &KJT{BatchSize: 3, NumFeatures: 1, Lengths: []int32{2, 1, 3},
		Values: []int64{3, 19, 3, 0, 7, 11}}
	for _, c := range []*EmbeddingCollection{c8, c32} {
		out, err := c.ForwardAlloc(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Backward(out); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c8.Weights("a")
	if err != nil {
		t.Fatal(err)
	}
	want, err := c32.Weights("a")
	if err != nil {
		t.Fatal(err)
	}
	moved, off := 0, 0
	for i := range got {
		if want[i] != decoded[i] {
			moved++
			if got[i] != want[i] {
				off++
			}
		}
	}
	// The updated rows (ids 0, 3, 7, 11, 19) moved and were encoded again: most of their values
	// are no fp32 result, all within the bound of it.
	if moved == 0 || off == 0 || rowBoundViolations(got, want, 8) != 0 {
		t.Fatalf("after a step: %d moved, %d re-encoded, %d beyond the bound", moved, off,
			rowBoundViolations(got, want, 8))
	}
}
