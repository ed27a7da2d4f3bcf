// The binding's own argument checks: a negative count or size that C would read as a huge
// unsigned one, and a nil tensor shape (which C would read as a scalar), are refused with
// ErrCodeInvalid naming them, in every call that takes them; nothing changes, and the calls
// that follow work. Leak warnings name every kind of handle by its Go type.
package shardrec

import (
	"strings"
	"testing"
)

func wantInvalid(t *testing.T, what string, err error, text string) {
	t.Helper()
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: %v, want ErrCodeInvalid containing %q", what, err, text)
	}
}

func TestNegativeCountsAndNilShapesAreRefusedNamingThem(t *testing.T) {
	coll, done := vbeCollection(t)
	defer done()
	k := batch(0, 0, 1)
	n, err := coll.OutputSize(k)
	if err != nil {
		t.Fatal(err)
	}
	dim, _ := coll.OutputDim()
	neg := *k
	neg.NumFeatures = -1
	const negative = "NumFeatures must be >= 0, got -1"
	wantInvalid(t, "Forward", coll.Forward(&neg, make([]float32, n)), negative)
	wantInvalid(t, "ForwardTensor", coll.ForwardTensor(&neg, make([]float32, n),
		[]int64{k.BatchSize, dim}), negative)
	wantInvalid(t, "InputDistStart", coll.InputDistStart(&neg), negative)
	vneg := vbeBatch(true, false)
	vneg.NumFeatures = -1
	_, err = coll.OutputSizeVBE(vneg)
	wantInvalid(t, "OutputSizeVBE", err, negative)
	wantInvalid(t, "ForwardVBE", coll.ForwardVBE(vneg, make([]float32, 64)), negative)
	_, err = coll.ForwardVBEAlloc(vneg)
	wantInvalid(t, "ForwardVBEAlloc", err, negative)
	wantInvalid(t, "ForwardVBETensor", coll.ForwardVBETensor(vneg, make([]float32, 4), []int64{4}),
		negative)
	wantInvalid(t, "InputDistStartVBE", coll.InputDistStartVBE(vneg), negative)

	// A nil shape: every *Tensor call, with a buffer of the right size for a 1-D view.
	const nilShape = "shape must not be nil"
	wantInvalid(t, "ForwardTensor", coll.ForwardTensor(k, make([]float32, n), nil), nilShape)
	vb := vbeBatch(true, false)
	vn, err := coll.OutputSizeVBE(vb)
	if err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "ForwardVBETensor", coll.ForwardVBETensor(vb, make([]float32, vn), nil), nilShape)
	out := make([]float32, n)
	if err := coll.Forward(k, out); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "BackwardTensor", coll.BackwardTensor(out, nil), nilShape)
	if err := coll.InputDistStart(k); err != nil {
		t.Fatal(err)
	}
	if err := coll.InputDistWait(); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "ForwardDistributedTensor", coll.ForwardDistributedTensor(out, nil), nilShape)

	// Nothing was half-done: a 1-D view of the same buffers trains one step.
	if err := coll.ForwardTensor(k, out, []int64{int64(n)}); err != nil {
		t.Fatal(err)
	}
	if err := coll.BackwardTensor(out, []int64{int64(n)}); err != nil {
		t.Fatal(err)
	}
	if steps, _ := coll.NumSteps(); steps != 1 {
		t.Fatalf("%d steps after one backward, want 1", steps)
	}

	// Serving: a negative NumFeatures and a negative tier cache size.
	inf, dir := servedFrom(t, coll)
	_, err = inf.Lookup(&neg, make([]float32, n))
	wantInvalid(t, "Lookup", err, negative)
	_, err = inf.LookupVBE(vneg, make([]float32, 64))
	wantInvalid(t, "LookupVBE", err, negative)
	_, err = OpenInference(dir, &InferenceOptions{Tiers: map[string]int64{"t0": -1}})
	wantInvalid(t, "InferenceOptions.Tiers", err, "tier cache bytes of table t0 must be >= 0, got -1")

	// Planning: negative sizes of the topology and constraints.
	features := []FeatureConfig{{Name: "f"}}
	tables := []TableConfig{{Name: "t", Rows: 10, Dim: 4, Features: []int32{0}}}
	_, err = NewPlan(tables, features, Topology{WorldSize: 1, MemoryBytesPerRank: []int64{-1}}, nil)
	wantInvalid(t, "MemoryBytesPerRank", err, "MemoryBytesPerRank[0] must be >= 0, got -1")
	_, err = NewPlan(tables, features, Topology{WorldSize: 1},
		[]TableConstraints{{Table: "t", TierCacheBytes: -1}})
	wantInvalid(t, "TierCacheBytes", err, "TierCacheBytes of table t must be >= 0, got -1")
}

func TestALeakedPlanIsNamedLikeEveryOtherHandle(t *testing.T) {
	leakWarning(t, func() {
		_ = testPlanFor(t, 1, OptimizerSGD) // dropped without Close
	}, "libshardrec: shardrec.Plan 0x")
}
