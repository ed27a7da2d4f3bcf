// VBE batches through the Go binding (VBEKJT): a serving lookup with inverse indices equals, bit
// for bit, the lookup of the expanded plain batch (fp32 and int8, weighted, on the handle and on
// a pinned snapshot); without them each feature's bags come feature-major; an inverse index out
// of range is refused naming the feature and sample; a training forward of the VBE batch equals
// the expanded batch's, and the backward that follows updates the tables as the expanded
// batch's does (within fp32 rounding of the gradient sums).
package shardrec

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// Feature f has f+1 bags (f0 one bag, as a user's feature) and vbeSamples output samples.
var vbeSizes = []int64{1, 2, 3}

const vbeSamples = 5

func vbeBagLen(f, k int) int     { return (f+k)%3 + 1 }
func vbeBagID(f, k, i int) int64 { return int64(f*7+k*11+i*5) % tableRows[f] }
func vbeInverse(f, b int) int64  { return int64(b+f) % vbeSizes[f] }
func vbeWeight(i int) float32    { return (float32(i%5) - 2) * 0.375 }
func vbeBits(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = math.Float32bits(x)
	}
	return out
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	ab, bb := vbeBits(a), vbeBits(b)
	for i := range ab {
		if ab[i] != bb[i] {
			return false
		}
	}
	return true
}

// vbeBatch is the VBE batch, with inverse indices or (feature-major) without.
func vbeBatch(inverse, weighted bool) *VBEKJT {
	v := &VBEKJT{KJT: KJT{BatchSize: 3, NumFeatures: 3}, FeatureBatchSizes: vbeSizes}
	for f := 0; f < 3; f++ {
		for k := 0; k < int(vbeSizes[f]); k++ {
			v.Lengths = append(v.Lengths, int32(vbeBagLen(f, k)))
			for i := 0; i < vbeBagLen(f, k); i++ {
				v.Values = append(v.Values, vbeBagID(f, k, i))
			}
		}
	}
	if weighted {
		for i := range v.Values {
			v.Weights = append(v.Weights, vbeWeight(i))
		}
	}
	if inverse {
		v.BatchSize = vbeSamples
		for f := 0; f < 3; f++ {
			for b := 0; b < vbeSamples; b++ {
				v.InverseIndices = append(v.InverseIndices, vbeInverse(f, b))
			}
		}
	}
	return v
}

// vbeExpanded is the plain batch whose bag (f, b) is bag vbeInverse(f, b) of feature f.
func vbeExpanded(weighted bool) *KJT {
	k := &KJT{BatchSize: vbeSamples, NumFeatures: 3}
	first := 0
	for f := 0; f < 3; f++ {
		for b := 0; b < vbeSamples; b++ {
			bag := int(vbeInverse(f, b))
			at := first
			for j := 0; j < bag; j++ {
				at += vbeBagLen(f, j)
			}
			k.Lengths = append(k.Lengths, int32(vbeBagLen(f, bag)))
			for i := 0; i < vbeBagLen(f, bag); i++ {
				k.Values = append(k.Values, vbeBagID(f, bag, i))
				if weighted {
					k.Weights = append(k.Weights, vbeWeight(at+i))
				}
			}
		}
		for j := 0; j < int(vbeSizes[f]); j++ {
			first += vbeBagLen(f, j)
		}
	}
	return k
}

func vbeCollection(t *testing.T) (*EmbeddingCollection, func()) {
	t.Helper()
	plan := testPlanFor(t, 1, OptimizerSGD)
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sgd := DefaultOptimizer()
	sgd.LearningRate = 0.5
	coll, err := NewEmbeddingCollection(plan, comms[0], &sgd, &EmbeddingOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	return coll, func() { coll.Close(); comms[0].Close(); plan.Close() }
}

// servedFrom saves coll's checkpoint into a temporary directory and opens it for serving with
// default options; the Inference is closed when the test ends.
func servedFrom(t *testing.T, coll *EmbeddingCollection) (*Inference, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := coll.SaveCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	inf, err := OpenInference(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inf.Close() })
	return inf, dir
}

func TestLookupVBEEqualsTheExpandedBatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	coll, done := vbeCollection(t)
	if err := coll.SaveCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	done()
	for _, storage := range []ServingStorage{ServingFP32, ServingInt8} {
		inf, err := OpenInference(dir, &InferenceOptions{DefaultStorage: storage})
		if err != nil {
			t.Fatal(err)
		}
		for _, weighted := range []bool{false, true} {
			plain := vbeExpanded(weighted)
			want := make([]float32, inf.OutputSize(plain))
			if _, err := inf.Lookup(plain, want); err != nil {
				t.Fatal(err)
			}
			v := vbeBatch(true, weighted)
			got, version, err := inf.LookupVBEAlloc(v)
			if err != nil || version != 1 || !sameBits(got, want) {
				t.Fatalf("storage %v weighted %v: %v, version %d, %v vs %v", storage, weighted, err,
					version, got, want)
			}
			snap, err := inf.Pin()
			if err != nil {
				t.Fatal(err)
			}
			pinned := make([]float32, len(want))
			if err := snap.LookupVBE(v, pinned); err != nil || !sameBits(pinned, want) {
				t.Fatalf("snapshot: %v", err)
			}
			snap.Close()
		}
		inf.Close()
	}
	inf, err := OpenInference(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	all := make([]float32, inf.OutputSize(vbeExpanded(false)))
	if _, err := inf.Lookup(vbeExpanded(false), all); err != nil {
		t.Fatal(err)
	}
	got, _, err := inf.LookupVBEAlloc(vbeBatch(false, false))
	if err != nil {
		t.Fatal(err)
	}
	width := 8 + 4 + 6
	if len(got) != 8+2*4+3*6 {
		t.Fatalf("feature-major output has %d floats", len(got))
	}
	at, col := 0, 0
	for f := 0; f < 3; f++ {
		for k := int64(0); k < vbeSizes[f]; k++ {
			b := 0
			for b < vbeSamples && vbeInverse(f, b) != k {
				b++
			}
			d := tableDims[f]
			if b == vbeSamples || !sameBits(got[at:at+d], all[b*width+col:b*width+col+d]) {
				t.Fatalf("feature %d bag %d", f, k)
			}
			at += d
		}
		col += tableDims[f]
	}
	bad := vbeBatch(true, false)
	bad.InverseIndices = append([]int64(nil), bad.InverseIndices...)
	bad.InverseIndices[2*vbeSamples+4] = 3 // feature f2 has 3 bags
	out := make([]float32, vbeSamples*width)
	_, err = inf.LookupVBE(bad, out)
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "f2") ||
		!strings.Contains(err.Error(), "sample 4") {
		t.Fatalf("bad inverse index: %v", err)
	}
	for _, x := range out {
		if x != 0 {
			t.Fatal("written on error")
		}
	}
}

func TestForwardVBEFollowsTheExpandedBatch(t *testing.T) {
	vbeColl, done1 := vbeCollection(t)
	defer done1()
	plainColl, done2 := vbeCollection(t)
	defer done2()
	before := map[string][]float32{}
	for _, name := range tableNames {
		w, err := plainColl.Weights(name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = w
	}
	got, err := vbeColl.ForwardVBEAlloc(vbeBatch(true, true))
	if err != nil {
		t.Fatal(err)
	}
	want, err := plainColl.ForwardAlloc(vbeExpanded(true))
	if err != nil {
		t.Fatal(err)
	}
	if !sameBits(got, want) {
		t.Fatalf("VBE forward %v, expanded %v", got, want)
	}
	grad := make([]float32, len(got))
	for i, x := range got {
		grad[i] = x * 0.25
	}
	if err := vbeColl.Backward(grad); err != nil {
		t.Fatal(err)
	}
	if err := plainColl.Backward(grad); err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, name := range tableNames {
		a, _ := vbeColl.Weights(name)
		b, _ := plainColl.Weights(name)
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-6*(1+math.Abs(float64(b[i]))) {
				t.Fatalf("table %s[%d]: %v vs %v", name, i, a[i], b[i])
			}
			moved = moved || a[i] != before[name][i]
		}
	}
	if !moved {
		t.Fatal("the backward moved nothing")
	}
}
