// (*Inference).RowScales: an int8/int4 table's per-row scale and bias are the row-wise
// quantization of the trained rows; an fp32 table and a row out of range are refused.
package shardrec

import (
	"errors"
	"testing"
)

func testServingRowScales(t *testing.T, fx *servingFixture) {
	inf, err := OpenInference(fx.dir1, &InferenceOptions{DefaultStorage: ServingInt8,
		TableStorage: map[string]ServingStorage{"t1": ServingInt4, "t2": ServingFP32}})
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	levels := []float32{255, 15}
	for ti := 0; ti < 2; ti++ {
		dim := tableDims[ti]
		ids := make([]int64, tableRows[ti])
		for i := range ids {
			ids[i] = int64(i)
		}
		scales, biases, version, err := inf.RowScales(tableNames[ti], ids)
		if err != nil {
			t.Fatal(err)
		}
		if version != 1 || len(scales) != len(ids) || len(biases) != len(ids) {
			t.Fatalf("version %d, %d scales, %d biases", version, len(scales), len(biases))
		}
		for row := range ids {
			w := fx.weights1[ti][row*dim : (row+1)*dim]
			lo, hi := w[0], w[0]
			for _, v := range w {
				if v < lo {
					lo = v
				}
				if v > hi {
					hi = v
				}
			}
			if scales[row] != (hi-lo)/levels[ti] || biases[row] != lo {
				t.Fatalf("table %s row %d: scale %g bias %g, want %g and %g", tableNames[ti], row,
					scales[row], biases[row], (hi-lo)/levels[ti], lo)
			}
		}
	}
	if _, _, _, err := inf.RowScales(tableNames[2], []int64{0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an fp32 table's scales: %v", err)
	}
	if _, _, _, err := inf.RowScales(tableNames[0], []int64{tableRows[0]}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a row out of range: %v", err)
	}
	if _, _, _, err := inf.RowScales("nope", []int64{0}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown table: %v", err)
	}
}
