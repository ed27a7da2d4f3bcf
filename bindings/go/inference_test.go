// Serving through the Go binding: a checkpoint written by 2 ranks (table-, row- and
// column-wise shards) opened for inference equals the training forward (bit for bit but for the
// row-wise table's summation order), int8/int4 stay within their row-wise bound, lookups from 4 goroutines across a reload each see one whole
// version, a pinned snapshot keeps its version, Close waits for lookups in flight, and
// MLP/DCN.Infer equal Forward.
package shardrec

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const requestStep = 9 // the batches looked up: batch(9, rank, 1)

var servingDense = []float32{0.5, -1.25, 3, 7.75}

type servingFixture struct {
	dir1, dir2 string       // after 2 steps, after a third
	forward1   [2][]float32 // per rank, the third step's forward (on dir1's weights)
	weights1   [][]float32  // every table, full, at dir1
}

// trainForServing trains at world 2, saving after 2 steps and again after a third.
func trainForServing(t *testing.T) *servingFixture {
	t.Helper()
	root := t.TempDir()
	fx := &servingFixture{dir1: filepath.Join(root, "v1"), dir2: filepath.Join(root, "v2")}
	plan := testPlanFor(t, 2, OptimizerSGD)
	defer plan.Close()
	comms, err := NewLocalGroup(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	sgd := DefaultOptimizer()
	sgd.LearningRate = 0.5
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			errs[rank] = func() error {
				coll, err := NewEmbeddingCollection(plan, comms[rank], &sgd, &EmbeddingOptions{Seed: 11})
				if err != nil {
					return err
				}
				defer coll.Close()
				for s := 0; s < 2; s++ {
					if err := trainStep(coll, s, rank, 1); err != nil {
						return err
					}
				}
				dense := &CheckpointOptions{Dense: []DenseTensor{{Name: "dense.w", Data: servingDense}}}
				if err := coll.SaveCheckpointWith(fx.dir1, dense); err != nil {
					return err
				}
				var w [][]float32
				for _, name := range tableNames {
					tw, err := coll.Weights(name)
					if err != nil {
						return err
					}
					w = append(w, tw)
				}
				out, err := coll.ForwardAlloc(batch(requestStep, rank, 1))
				if err != nil {
					return err
				}
				fx.forward1[rank] = append([]float32(nil), out...)
				if rank == 0 {
					fx.weights1 = w
				}
				if err := coll.Backward(out); err != nil {
					return err
				}
				return coll.SaveCheckpoint(fx.dir2)
			}()
		}(r)
	}
	wg.Wait()
	for r, e := range errs {
		if e != nil {
			t.Fatalf("rank %d: %v", r, e)
		}
	}
	return fx
}

// servedEqualsForward compares an fp32 lookup with rank's training forward: bit for bit on t0
// (table-wise) and t2 (column-wise); t1 is row-wise, whose partial sums training added in
// another order (inference.h), so there a bag of n ids may differ by a few roundings.
func servedEqualsForward(got []float32, fx *servingFixture, rank int) bool {
	want := fx.forward1[rank]
	if len(got) != len(want) {
		return false
	}
	for b := 0; b < localBatch; b++ {
		ids := float64((requestStep*7 + rank*5 + 1*3 + b*11) % 4)
		for c := 0; c < 18; c++ {
			i := b*18 + c
			if c < 8 || c >= 12 {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					return false
				}
			} else if math.Abs(float64(got[i]-want[i])) > ids*1e-6*(1+math.Abs(float64(want[i]))) {
				return false
			}
		}
	}
	return true
}

// served1 is what version 1 serves for rank's request (the reference of later checks).
func served1(t *testing.T, fx *servingFixture, rank int) []float32 {
	t.Helper()
	inf, err := OpenInference(fx.dir1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	out, _ := lookupAlloc(t, inf, batch(requestStep, rank, 1))
	return out
}

func lookupAlloc(t *testing.T, inf *Inference, k *KJT) ([]float32, uint64) {
	t.Helper()
	out := make([]float32, inf.OutputSize(k))
	v, err := inf.Lookup(k, out)
	if err != nil {
		t.Fatal(err)
	}
	// A batch no output can hold sizes to 0 (it was -60 for BatchSize -5, and a wrapped 0 or a
	// wrong positive size for a huge one), which Lookup refuses.
	for _, bs := range []int64{-5, 1 << 62} {
		bad := *k
		bad.BatchSize = bs
		if n := inf.OutputSize(&bad); n != 0 {
			t.Fatalf("OutputSize of BatchSize %d: %d", bs, n)
		}
	}
	return out, v
}

func TestInference(t *testing.T) {
	fx := trainForServing(t)
	t.Run("FP32EqualsTheTrainingForward", func(t *testing.T) { testServingFP32(t, fx) })
	t.Run("Int8Int4WithinTheirBound", func(t *testing.T) { testServingQuantized(t, fx) })
	t.Run("RowScalesOfQuantizedTables", func(t *testing.T) { testServingRowScales(t, fx) })
	t.Run("FP8RowsAndScales", func(t *testing.T) { testServingFP8(t, fx) })
	t.Run("ReloadUnderConcurrentLookups", func(t *testing.T) { testServingReload(t, fx) })
	t.Run("BadRequestsAreRefused", func(t *testing.T) { testServingErrors(t, fx) })
	t.Run("CloseWaitsForLookupsInFlight", func(t *testing.T) { testServingClose(t, fx) })
}

func testServingClose(t *testing.T, fx *servingFixture) {
	want := [2][]float32{served1(t, fx, 0), served1(t, fx, 1)}
	inf, err := OpenInference(fx.dir1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			k := batch(requestStep, g%2, 1)
			out := make([]float32, inf.OutputSize(k))
			for {
				if _, err := inf.Lookup(k, out); err != nil {
					errs[g] = err
					return
				}
				if !reflect.DeepEqual(out, want[g%2]) {
					errs[g] = &Error{Code: ErrCodeGeneric, Message: "wrong output"}
					return
				}
			}
		}(g)
	}
	time.Sleep(20 * time.Millisecond)
	inf.Close()
	wg.Wait()
	for g, err := range errs {
		if CodeOf(err) != ErrCodeInvalid { // closed, never a crash
			t.Fatalf("goroutine %d: %v", g, err)
		}
	}
}

func testServingFP32(t *testing.T, fx *servingFixture) {
	inf, err := OpenInference(fx.dir1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	v, _ := inf.Version()
	n, _ := inf.NumTables()
	f, _ := inf.NumFeatures()
	d, _ := inf.OutputDim()
	seq, err := inf.IsSequence()
	if v != 1 || n != 3 || f != 3 || d != 18 || seq || err != nil {
		t.Fatalf("version %d tables %d features %d dim %d sequence %v (%v)", v, n, f, d, seq, err)
	}
	for i := range tableNames {
		got, err := inf.Table(i)
		want := InferenceTable{tableNames[i], tableRows[i], int32(tableDims[i]), ServingFP32}
		if err != nil || got != want {
			t.Fatalf("table %d: %+v, want %+v (%v)", i, got, want, err)
		}
	}
	for r := 0; r < 2; r++ {
		out, v := lookupAlloc(t, inf, batch(requestStep, r, 1))
		if v != 1 || !servedEqualsForward(out, fx, r) {
			t.Fatalf("rank %d (version %d): lookup %v, forward %v", r, v, out, fx.forward1[r])
		}
	}
	dense, dv, err := inf.DenseTensor("dense.w")
	if err != nil || dv != 1 || !reflect.DeepEqual(dense, servingDense) {
		t.Fatalf("dense tensor %v version %d (%v)", dense, dv, err)
	}
	snap, err := inf.Pin()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	view, err := snap.DenseTensor("dense.w")
	if err != nil || !reflect.DeepEqual(view, servingDense) {
		t.Fatalf("snapshot dense tensor %v (%v)", view, err)
	}
	if _, err := snap.DenseTensor("missing"); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("missing dense tensor: %v", err)
	}
	want, _ := lookupAlloc(t, inf, batch(requestStep, 1, 1))
	out := make([]float32, snap.OutputSize(batch(requestStep, 1, 1)))
	if err := snap.Lookup(batch(requestStep, 1, 1), out); err != nil || !reflect.DeepEqual(out, want) {
		t.Fatalf("snapshot lookup %v (%v)", out, err)
	}
}

func testServingQuantized(t *testing.T, fx *servingFixture) {
	inf, err := OpenInference(fx.dir1, &InferenceOptions{DefaultStorage: ServingInt8,
		TableStorage: map[string]ServingStorage{"t1": ServingInt4}})
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	want := []ServingStorage{ServingInt8, ServingInt4, ServingInt8}
	levels := []float64{255, 15, 255}
	halfScale := make([]float64, 3) // per table, the widest row's scale / 2
	for ti := range tableNames {
		if got, _ := inf.Table(ti); got.Storage != want[ti] {
			t.Fatalf("table %d stored as %d", ti, got.Storage)
		}
		dim := tableDims[ti]
		for row := 0; row < int(tableRows[ti]); row++ {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, v := range fx.weights1[ti][row*dim : (row+1)*dim] {
				lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
			}
			halfScale[ti] = math.Max(halfScale[ti], (hi-lo)/levels[ti]/2)
		}
	}
	for r := 0; r < 2; r++ {
		got, _ := lookupAlloc(t, inf, batch(requestStep, r, 1))
		differs := false
		for b := 0; b < localBatch; b++ {
			offset := 0
			for f := 0; f < 3; f++ {
				ids := float64((requestStep*7 + r*5 + f*3 + b*11) % 4)
				for d := 0; d < tableDims[f]; d++ {
					i := b*18 + offset + d
					e := math.Abs(float64(got[i] - fx.forward1[r][i]))
					if e > ids*halfScale[f]*(1+1e-5)+1e-6 {
						t.Fatalf("rank %d sample %d feature %d: error %g over %g", r, b, f, e, ids*halfScale[f])
					}
					differs = differs || e > 0
				}
				offset += tableDims[f]
			}
		}
		if !differs {
			t.Fatal("quantized lookups read exactly the fp32 values")
		}
	}
}

func testServingReload(t *testing.T, fx *servingFixture) {
	served := [2][]float32{served1(t, fx, 0), served1(t, fx, 1)}
	var forward2 [2][]float32
	v2, err := OpenInference(fx.dir2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		forward2[r], _ = lookupAlloc(t, v2, batch(requestStep, r, 1))
	}
	v2.Close()
	inf, err := OpenInference(fx.dir1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	before, err := inf.Pin()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	var reloaded atomic.Bool
	var newer atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			k := batch(requestStep, rank, 1)
			out := make([]float32, inf.OutputSize(k))
			// Until the reload is done, then 20 more requests on the new version.
			for after := 0; after < 20; {
				done := reloaded.Load()
				v, err := inf.Lookup(k, out)
				want := served[rank]
				if v == 2 {
					want = forward2[rank]
					newer.Add(1)
				}
				if err != nil || !reflect.DeepEqual(out, want) {
					errs <- "version mixed or failed lookup"
					return
				}
				if done {
					after++
				}
			}
		}(g % 2)
	}
	time.Sleep(20 * time.Millisecond)
	err = inf.Reload(fx.dir2)
	reloaded.Store(true) // the readers stop even when the reload failed
	wg.Wait()
	close(errs)
	if err != nil {
		t.Fatal(err)
	}
	for e := range errs {
		t.Fatal(e)
	}
	if v, _ := inf.Version(); v != 2 || newer.Load() < 80 {
		t.Fatalf("version %d after the reload, %d lookups on it", v, newer.Load())
	}
	out := make([]float32, before.OutputSize(batch(requestStep, 0, 1)))
	if err := before.Lookup(batch(requestStep, 0, 1), out); err != nil || !reflect.DeepEqual(out, served[0]) {
		t.Fatalf("pinned snapshot after the reload: %v", err)
	}
	if v, _ := before.Version(); v != 1 {
		t.Fatalf("pinned snapshot has version %d", v)
	}
	file := filepath.Join(filepath.Dir(fx.dir2), "v2.srv")
	if err := inf.Save(file); err != nil {
		t.Fatal(err)
	}
	mapped, err := OpenInference(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	if got, _ := lookupAlloc(t, mapped, batch(requestStep, 1, 1)); !reflect.DeepEqual(got, forward2[1]) {
		t.Fatal("the serving file answers differently")
	}
}

func testServingErrors(t *testing.T, fx *servingFixture) {
	inf, err := OpenInference(fx.dir1, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := &KJT{BatchSize: 1, NumFeatures: 3, Lengths: []int32{1, 0, 0}, Values: []int64{1000}}
	_, err = inf.Lookup(bad, make([]float32, 18))
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "1000") {
		t.Fatalf("out-of-range id: %v", err)
	}
	if _, err := inf.Lookup(nil, nil); CodeOf(err) != ErrCodeInvalid || inf.OutputSize(nil) != 0 {
		t.Fatalf("nil batch: %v", err)
	}
	if s, err := inf.Pin(); err != nil {
		t.Fatal(err)
	} else {
		if err := s.Lookup(nil, nil); CodeOf(err) != ErrCodeInvalid {
			t.Fatalf("nil batch on a snapshot: %v", err)
		}
		s.Close()
	}
	if err := inf.Reload(filepath.Join(fx.dir1, "nope")); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("reload of a missing path: %v", err)
	}
	inf.Close()
	inf.Close()
	if _, err := inf.Version(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("use after Close: %v", err)
	}
	if _, err := OpenInference(fx.dir1, &InferenceOptions{Device: DeviceCUDA}); CodeOf(err) != ErrCodeUnsupported {
		t.Fatalf("device inference: %v", err)
	}
}

func TestMLPAndDCNInferEqualForwardFromGoroutines(t *testing.T) {
	const batch = 5
	mlp, err := NewMLP(6, []int64{8, 3}, nil, 21, "top")
	if err != nil {
		t.Fatal(err)
	}
	defer mlp.Close()
	x := make([]float32, batch*6)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.7))
	}
	want := make([]float32, batch*3)
	if err := mlp.Forward(x, batch, want); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([][]float32, 4)
	errs := make([]error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			got[g] = make([]float32, batch*3)
			for k := 0; k < 50 && errs[g] == nil; k++ {
				errs[g] = mlp.Infer(x, batch, got[g])
			}
		}(g)
	}
	wg.Wait()
	for g := range got {
		if errs[g] != nil || !reflect.DeepEqual(got[g], want) {
			t.Fatalf("goroutine %d: %v (%v), want %v", g, got[g], errs[g], want)
		}
	}
	dcn, err := NewDCN(4, 2, 2, 3, "cross")
	if err != nil {
		t.Fatal(err)
	}
	defer dcn.Close()
	x0 := []float32{1, -2, 0.5, 3, 0.25, 4, -1, 2}
	fwd, inf := make([]float32, 8), make([]float32, 8)
	if err := firstErr(dcn.Forward(x0, 2, fwd), dcn.Infer(x0, 2, inf)); err != nil || !reflect.DeepEqual(fwd, inf) {
		t.Fatalf("DCN infer %v, forward %v (%v)", inf, fwd, err)
	}
}
