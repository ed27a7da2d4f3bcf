// A zero-size VBE batch (BatchSize 0) with inverse indices: a non-nil empty InverseIndices
// reaches C as a non-NULL pointer with 0 entries (docs/variable-batch.md), so the batch is
// accepted by the training forward and backward and by the serving lookups, each writing nothing;
// a nil InverseIndices stays "no inverse indices" (then BatchSize must be the largest B_f).
package shardrec

import (
	"strings"
	"testing"
)

// zeroVBE is a batch of no output samples whose features have bags (sizes) that no sample reads.
func zeroVBE(sizes []int64, inverse []int64) *VBEKJT {
	v := &VBEKJT{KJT: KJT{BatchSize: 0, NumFeatures: 3}, FeatureBatchSizes: sizes,
		InverseIndices: inverse}
	for f, n := range sizes {
		for k := 0; k < int(n); k++ {
			v.Lengths = append(v.Lengths, 1)
			v.Values = append(v.Values, int64(f+k)%tableRows[f])
		}
	}
	return v
}

func TestZeroSizeVBEBatchWithEmptyInverseIndices(t *testing.T) {
	coll, done := vbeCollection(t)
	defer done()
	for _, sizes := range [][]int64{{1, 2, 1}, {0, 0, 0}} {
		batch := zeroVBE(sizes, []int64{})
		n, err := coll.OutputSizeVBE(batch)
		if err != nil || n != 0 {
			t.Fatalf("sizes %v: OutputSizeVBE = %d, %v; want 0, nil", sizes, n, err)
		}
		out, err := coll.ForwardVBEAlloc(batch)
		if err != nil || len(out) != 0 {
			t.Fatalf("sizes %v: ForwardVBEAlloc = %d floats, %v; want 0, nil", sizes, len(out), err)
		}
		if err := coll.Backward([]float32{}); err != nil {
			t.Fatalf("sizes %v: Backward after the zero-size forward: %v", sizes, err)
		}
	}
	// nil is no inverse indices: BatchSize 0 is then not the largest feature batch size.
	if _, err := coll.OutputSizeVBE(zeroVBE([]int64{1, 2, 1}, nil)); CodeOf(err) != ErrCodeInvalid ||
		!strings.Contains(err.Error(), "inverse indices") {
		t.Fatalf("nil InverseIndices with BatchSize 0: %v, want ErrCodeInvalid about inverse indices", err)
	}
	inf, _ := servedFrom(t, coll)
	batch := zeroVBE([]int64{1, 2, 1}, []int64{})
	if n, err := inf.OutputSizeVBE(batch); err != nil || n != 0 {
		t.Fatalf("serving OutputSizeVBE = %d, %v; want 0, nil", n, err)
	}
	if _, err := inf.LookupVBE(batch, []float32{}); err != nil {
		t.Fatalf("serving LookupVBE of the zero-size batch: %v", err)
	}
	snap, err := inf.Pin()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if err := snap.LookupVBE(batch, []float32{}); err != nil {
		t.Fatalf("snapshot LookupVBE of the zero-size batch: %v", err)
	}
	if _, err := inf.LookupVBE(zeroVBE([]int64{1, 2, 1}, nil), []float32{}); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("serving LookupVBE with nil InverseIndices and BatchSize 0: %v, want ErrCodeInvalid", err)
	}
}
