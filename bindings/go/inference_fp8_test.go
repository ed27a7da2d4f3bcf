// FP8 serving storage through the Go binding: every table reads back as ServingFP8E4M3 or
// ServingFP8E5M2, and each row's scale (RowScales, bias 0) is the power of two the encoder
// picks: the row's largest magnitude over it lies in [fit/2, fit] (fit = 464 for E4M3, 61440
// for E5M2: the largest magnitude that rounds to the format's largest finite value).
package shardrec

import (
	"math"
	"testing"
)

func testServingFP8(t *testing.T, fx *servingFixture) {
	for _, c := range []struct {
		storage ServingStorage
		fit     float64
	}{{ServingFP8E4M3, 464}, {ServingFP8E5M2, 61440}} {
		inf, err := OpenInference(fx.dir1, &InferenceOptions{DefaultStorage: c.storage})
		if err != nil {
			t.Fatal(err)
		}
		for ti := range tableNames {
			if got, _ := inf.Table(ti); got.Storage != c.storage {
				t.Fatalf("%v: table %d stored as %v", c.storage, ti, got.Storage)
			}
			dim := tableDims[ti]
			ids := make([]int64, tableRows[ti])
			for i := range ids {
				ids[i] = int64(i)
			}
			scales, biases, _, err := inf.RowScales(tableNames[ti], ids)
			if err != nil {
				t.Fatal(err)
			}
			for row := range ids {
				amax := 0.0
				for _, v := range fx.weights1[ti][row*dim : (row+1)*dim] {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				s := float64(scales[row])
				frac, _ := math.Frexp(s)
				if biases[row] != 0 || frac != 0.5 || (amax > 0 && (amax/s > c.fit || amax/s < c.fit/2)) {
					t.Fatalf("%v table %d row %d: scale %g bias %g for largest magnitude %g",
						c.storage, ti, row, s, biases[row], amax)
				}
			}
		}
		inf.Close()
	}
}
