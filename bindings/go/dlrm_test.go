// A small DLRM trained through the Go binding (bottom MLP, sharded embedding collection, dot
// interaction or DCN-v2 cross network, top MLP, BCE, Adam, gradient bucketer) at world 2 with
// ranks as goroutines,
// compared bit for bit with the same run in C (bindings/dlrm_ref/dlrm_ref.c, through
// examples/dlrm's model), whose losses and final dense parameters the file $SHARDREC_DLRM_REF
// holds. Also: the dense calls' errors, FSDP at world 1 and the dot interaction's definition.
package shardrec

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The contract with dlrm_ref.c: shapes, seeds, optimizers and batch formulas.
const (
	dlrmWorld = 2
	dlrmSteps = 4
	dlrmB     = 8
	dlrmND    = 4
	dlrmF     = 3
	dlrmD     = 4
	dlrmSeed  = 7
)

var dlrmRows = []int64{40, 30, 20}

func dlrmDense(step, g, j int) float32 { return float32((step*7+g*5+j*3)%17)/8.0 - 1.0 }
func dlrmID(step, g, f int) int64      { return int64(step*13+g*11+f*7) % dlrmRows[f] }
func dlrmLabel(step, g int) float32 {
	if (step*3+g*5)%3 == 0 {
		return 1
	}
	return 0
}

// dlrmRank is one rank's model, step for step as examples/dlrm/dlrm_model.c.
type dlrmRank struct {
	plan        *Plan
	mesh        *Mesh
	coll        *EmbeddingCollection
	bottom, top *MLP
	cross       *DCN // nil with the dot interaction
	ddp         *Bucketer
	opt         *DenseOptimizer
	nb, nc      int
	width       int64
}

// newDlrmRank returns the partly built rank with the error, so that Close frees what exists.
func newDlrmRank(world *Comm, dcn bool) (*dlrmRank, error) {
	r := &dlrmRank{}
	tables := make([]TableConfig, dlrmF)
	features := make([]FeatureConfig, dlrmF)
	for f := 0; f < dlrmF; f++ {
		tables[f] = TableConfig{Name: fmt.Sprintf("t%d", f), Rows: dlrmRows[f], Dim: dlrmD,
			Features: []int32{int32(f)}}
		features[f] = FeatureConfig{Name: fmt.Sprintf("c%d", f), PoolingFactor: 1}
	}
	var err error
	if r.plan, err = NewPlan(tables, features, Topology{WorldSize: dlrmWorld, BatchSize: dlrmB,
		Optimizer: OptimizerRowwiseAdagrad}, nil); err != nil {
		return r, err
	}
	if r.mesh, err = NewMesh(world, &MeshOptions{ShardingGroupSize: dlrmWorld}); err != nil {
		return r, err
	}
	sparse := DefaultOptimizer()
	sparse.Type = OptimizerRowwiseAdagrad
	sparse.LearningRate = 0.05
	if r.coll, err = r.mesh.NewEmbeddingCollection(r.plan, &sparse,
		&EmbeddingOptions{Seed: dlrmSeed}); err != nil {
		return r, err
	}
	if r.bottom, err = NewMLP(dlrmND, []int64{8, dlrmD}, nil, dlrmSeed, "bottom"); err != nil {
		return r, err
	}
	if dcn {
		r.width = (dlrmF + 1) * dlrmD
		if r.cross, err = NewDCN(r.width, 2, 4, dlrmSeed, "cross"); err != nil {
			return r, err
		}
		if r.nc, err = r.cross.NumTensors(); err != nil {
			return r, err
		}
	} else if r.width, err = DotInteractionWidth(dlrmF, dlrmD); err != nil {
		return r, err
	}
	if r.top, err = NewMLP(r.width, []int64{8, 1}, nil, dlrmSeed, "top"); err != nil {
		return r, err
	}
	var counts []int64
	for _, l := range r.layers() {
		n, err := l.NumTensors()
		if err != nil {
			return r, err
		}
		for i := 0; i < n; i++ {
			c, err := l.TensorCount(i)
			if err != nil {
				return r, err
			}
			counts = append(counts, c)
		}
	}
	if r.nb, err = r.bottom.NumTensors(); err != nil {
		return r, err
	}
	if r.ddp, err = NewBucketer(world, counts,
		&BucketerOptions{FirstBucketBytes: 256, BucketCapBytes: 512}); err != nil {
		return r, err
	}
	adam := DefaultOptimizer()
	adam.Type = OptimizerAdam
	adam.LearningRate = 0.01
	r.opt, err = NewDenseOptimizer(&adam)
	return r, err
}

// layers are the model's dense layers in registration order.
func (r *dlrmRank) layers() []DenseLayer {
	if r.cross != nil {
		return []DenseLayer{r.bottom, r.cross, r.top}
	}
	return []DenseLayer{r.bottom, r.top}
}

func (r *dlrmRank) Close() {
	for _, c := range []interface{ Close() error }{r.opt, r.ddp, r.top, r.cross, r.bottom, r.coll,
		r.mesh, r.plan} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
}

func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *DenseOptimizer:
		return v == nil
	case *Bucketer:
		return v == nil
	case *MLP:
		return v == nil
	case *DCN:
		return v == nil
	case *EmbeddingCollection:
		return v == nil
	case *Mesh:
		return v == nil
	case *Plan:
		return v == nil
	}
	return false
}

func (r *dlrmRank) step(step, rank int) (float64, error) {
	x := make([]float32, dlrmB*dlrmND)
	labels := make([]float32, dlrmB)
	lengths := make([]int32, dlrmF*dlrmB)
	ids := make([]int64, dlrmF*dlrmB)
	for b := 0; b < dlrmB; b++ {
		g := rank*dlrmB + b
		for j := 0; j < dlrmND; j++ {
			x[b*dlrmND+j] = dlrmDense(step, g, j)
		}
		for f := 0; f < dlrmF; f++ {
			lengths[f*dlrmB+b] = 1
			ids[f*dlrmB+b] = dlrmID(step, g, f)
		}
		labels[b] = dlrmLabel(step, g)
	}
	botOut := make([]float32, dlrmB*dlrmD)
	embOut := make([]float32, dlrmB*dlrmF*dlrmD)
	inter := make([]float32, dlrmB*r.width)
	logits := make([]float32, dlrmB)
	dlogits := make([]float32, dlrmB)
	dInter := make([]float32, dlrmB*r.width)
	dBot := make([]float32, dlrmB*dlrmD)
	dEmb := make([]float32, dlrmB*dlrmF*dlrmD)
	const row = (dlrmF + 1) * dlrmD
	x0 := make([]float32, dlrmB*row)
	dX0 := make([]float32, dlrmB*row)
	var loss float64
	err := firstErr(r.bottom.UseBucketerGrads(r.ddp, 0), r.top.UseBucketerGrads(r.ddp, r.nb+r.nc))
	if err == nil && r.cross != nil {
		err = r.cross.UseBucketerGrads(r.ddp, r.nb)
	}
	if err == nil {
		err = firstErr(r.ddp.ZeroGrad(), r.bottom.Forward(x, dlrmB, botOut),
			r.coll.Forward(&KJT{BatchSize: dlrmB, NumFeatures: dlrmF, Lengths: lengths, Values: ids}, embOut))
	}
	if err != nil {
		return 0, err
	}
	if r.cross == nil {
		err = DotInteractionForward(botOut, embOut, dlrmB, dlrmF, dlrmD, inter)
	} else {
		for b := 0; b < dlrmB; b++ {
			copy(x0[b*row:b*row+dlrmD], botOut[b*dlrmD:(b+1)*dlrmD])
			copy(x0[b*row+dlrmD:(b+1)*row], embOut[b*dlrmF*dlrmD:(b+1)*dlrmF*dlrmD])
		}
		err = r.cross.Forward(x0, dlrmB, inter)
	}
	if err = firstErr(err, r.top.Forward(inter, dlrmB, logits)); err != nil {
		return 0, err
	}
	if loss, err = BCEWithLogits(logits, labels, dlrmB, dlogits); err != nil {
		return 0, err
	}
	if err = r.top.Backward(dlogits, dInter, r.ddp, r.nb+r.nc); err != nil {
		return 0, err
	}
	if r.cross == nil {
		err = DotInteractionBackward(botOut, embOut, dInter, dlrmB, dlrmF, dlrmD, dBot, dEmb)
	} else {
		err = r.cross.Backward(dInter, dX0, r.ddp, r.nb)
		for b := 0; b < dlrmB; b++ {
			copy(dBot[b*dlrmD:(b+1)*dlrmD], dX0[b*row:b*row+dlrmD])
			copy(dEmb[b*dlrmF*dlrmD:(b+1)*dlrmF*dlrmD], dX0[b*row+dlrmD:(b+1)*row])
		}
	}
	err = firstErr(err, r.coll.Backward(dEmb), r.bottom.Backward(dBot, nil, r.ddp, 0),
		r.ddp.Finish(), r.opt.Step(r.layers()...))
	if err != nil {
		return 0, err
	}
	_, err = r.mesh.Step(r.coll)
	return loss, err
}

type dlrmReference struct {
	losses  [dlrmSteps][dlrmWorld]float64
	tensors map[string][]float32
	order   []string
}

// readDlrmReference reads the section of variant ("dot" or "dcn").
func readDlrmReference(t *testing.T, variant string) *dlrmReference {
	path := os.Getenv("SHARDREC_DLRM_REF")
	if path == "" {
		t.Fatal("SHARDREC_DLRM_REF must name the output of dlrm_ref (ctest sets it)")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ref := &dlrmReference{tensors: map[string][]float32{}}
	section := ""
	for _, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		p := strings.Fields(line)
		if p[0] == "variant" {
			section = p[1]
			continue
		}
		if p[0] != "world" && p[0] != "steps" && section != variant {
			continue
		}
		switch p[0] {
		case "world", "steps":
			want := map[string]int{"world": dlrmWorld, "steps": dlrmSteps}[p[0]]
			if p[1] != strconv.Itoa(want) {
				t.Fatalf("reference %s %s, the test runs %d", p[0], p[1], want)
			}
		case "loss":
			s, _ := strconv.Atoi(p[1])
			r, _ := strconv.Atoi(p[2])
			v, err := strconv.ParseFloat(p[3], 64)
			if err != nil {
				t.Fatal(err)
			}
			ref.losses[s][r] = v
		case "tensor":
			n, _ := strconv.Atoi(p[2])
			if len(p) != n+3 {
				t.Fatalf("tensor line %s has %d values, want %d", p[1], len(p)-3, n)
			}
			v := make([]float32, n)
			for k := range v {
				bits, err := strconv.ParseUint(p[3+k], 16, 32)
				if err != nil {
					t.Fatal(err)
				}
				v[k] = math.Float32frombits(uint32(bits))
			}
			ref.tensors[p[1]] = v
			ref.order = append(ref.order, p[1])
		}
	}
	return ref
}

func TestDlrmTrainsLikeTheCModelWithDot(t *testing.T) { testDlrmTrainsLikeTheCModel(t, "dot", 8) }
func TestDlrmTrainsLikeTheCModelWithDCN(t *testing.T) { testDlrmTrainsLikeTheCModel(t, "dcn", 14) }

func testDlrmTrainsLikeTheCModel(t *testing.T, variant string, numTensors int) {
	ref := readDlrmReference(t, variant)
	if len(ref.order) != numTensors {
		t.Fatalf("%s reference has %d tensors, want %d", variant, len(ref.order), numTensors)
	}
	if err := SetBlasThreads(1); err != nil {
		t.Fatal(err)
	}
	if n, err := BlasThreads(); err != nil || n != 1 {
		t.Fatalf("BlasThreads() = %d, %v", n, err)
	}
	comms, err := NewLocalGroup(dlrmWorld, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	var got [dlrmSteps][dlrmWorld]float64
	gotTensors := map[string][]float32{}
	var stats BucketerStats
	errs := make([]error, dlrmWorld)
	var wg sync.WaitGroup
	for rank := 0; rank < dlrmWorld; rank++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			m, err := newDlrmRank(comms[rank], variant == "dcn")
			defer m.Close()
			if err != nil {
				errs[rank] = err
				return
			}
			for s := 0; s < dlrmSteps; s++ {
				if got[s][rank], err = m.step(s, rank); err != nil {
					errs[rank] = fmt.Errorf("step %d: %w", s, err)
					return
				}
			}
			if rank != 0 {
				return
			}
			for _, l := range m.layers() {
				n, _ := l.NumTensors()
				for i := 0; i < n; i++ {
					name, err := l.TensorName(i)
					if err != nil {
						errs[rank] = err
						return
					}
					if gotTensors[name], err = l.Param(i); err != nil {
						errs[rank] = err
						return
					}
				}
			}
			stats, errs[rank] = m.ddp.Stats()
		}(rank)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if stats.Steps != dlrmSteps || stats.Buckets < 2 {
		t.Errorf("bucketer stats %+v: want %d steps and several buckets", stats, dlrmSteps)
	}
	for s := 0; s < dlrmSteps; s++ {
		for r := 0; r < dlrmWorld; r++ {
			if math.Float64bits(got[s][r]) != math.Float64bits(ref.losses[s][r]) {
				t.Errorf("%s loss of step %d rank %d: C %.17g, Go %.17g", variant, s, r, ref.losses[s][r],
					got[s][r])
			}
		}
	}
	for _, name := range ref.order {
		want, have := ref.tensors[name], gotTensors[name]
		if len(have) != len(want) {
			t.Errorf("tensor %s: %d values, C has %d", name, len(have), len(want))
			continue
		}
		for k := range want {
			if math.Float32bits(have[k]) != math.Float32bits(want[k]) {
				t.Errorf("%s tensor %s[%d]: C %g, Go %g", variant, name, k, want[k], have[k])
				break
			}
		}
	}
}

func TestDenseMisuseCarriesStatusAndMessage(t *testing.T) {
	var e *Error
	if _, err := NewMLP(4, []int64{0}, nil, 1, "m"); !errors.As(err, &e) ||
		e.Code != ErrCodeInvalid || e.Message == "" {
		t.Fatalf("zero width: %v", err)
	}
	if _, err := NewMLP(4, []int64{2}, []Activation{}, 1, "m"); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("activation count: %v", err)
	}
	m, err := NewMLP(2, []int64{3, 1}, nil, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if name, _ := m.TensorName(0); name != "mlp.0.weight" {
		t.Errorf("tensor 0 is %q", name)
	}
	if err := m.Forward(make([]float32, 3), 2, make([]float32, 2)); CodeOf(err) != ErrCodeInvalid {
		t.Errorf("short x: %v", err)
	}
	if err := m.Backward(nil, nil, nil, 0); CodeOf(err) != ErrCodeUsage {
		t.Errorf("backward before forward: %v", err)
	}
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	ddp, err := NewBucketer(comms[0], []int64{3, 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ddp.Close()
	if err := ddp.MarkReady(1); err != nil {
		t.Fatal(err)
	}
	if err := ddp.MarkReady(1); CodeOf(err) != ErrCodeUsage {
		t.Errorf("marked twice: %v", err)
	}
	if err := ddp.Finish(); CodeOf(err) != ErrCodeUsage || !strings.Contains(err.Error(), "0") {
		t.Errorf("gradient 0 missing: %v", err)
	}
	if b, err := ddp.Bucket(0); err != nil || len(b) != 2 || b[0] != 1 || b[1] != 0 {
		t.Errorf("bucket 0 = %v, %v; want [1 0]", b, err)
	}
	small, err := NewMLP(1, []int64{2}, nil, 1, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := small.UseBucketerGrads(ddp, 0); CodeOf(err) != ErrCodeInvalid {
		t.Errorf("gradient sizes 3, 2 for tensors of 2, 2: %v", err)
	}
	m.Close()
	if err := m.ZeroGrad(); CodeOf(err) != ErrCodeInvalid {
		t.Errorf("use after Close: %v", err)
	}
}

func TestFSDPStepAtWorldOneIsSGD(t *testing.T) {
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	opt := DefaultOptimizer()
	opt.LearningRate = 0.5
	f, err := NewFSDP(comms[0], []int64{3, 2}, []float32{1, 2, 3, 4, 5}, &opt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	full, err := f.Gather(0, 1)
	if err != nil || fmt.Sprint(full) != "[1 2 3]" {
		t.Fatalf("gather 0 = %v, %v", full, err)
	}
	full, err = f.Gather(1, -1)
	if err != nil || fmt.Sprint(full) != "[4 5]" {
		t.Fatalf("gather 1 = %v, %v", full, err)
	}
	err = firstErr(f.Release(0), f.Release(1), f.AddGrad(0, []float32{2, 0, -2}),
		f.AddGrad(1, []float32{1, 1}), f.ReduceGrad(0), f.ReduceGrad(1), f.Step())
	if err != nil {
		t.Fatal(err)
	}
	s0, _, err0 := f.Shard(0)
	s1, off, err1 := f.Shard(1)
	if err0 != nil || err1 != nil || fmt.Sprint(s0) != "[0 2 4]" || fmt.Sprint(s1) != "[3.5 4.5]" ||
		off != 0 {
		t.Errorf("shards %v %v (offset %d), %v %v", s0, s1, off, err0, err1)
	}
	cur, peak, err := f.Memory()
	if err != nil || peak < cur || peak <= 0 {
		t.Errorf("memory %d / %d, %v", cur, peak, err)
	}
	if err := f.AddGrad(0, []float32{1}); CodeOf(err) != ErrCodeInvalid {
		t.Errorf("short grad: %v", err)
	}
}

func TestDotInteractionAndBCE(t *testing.T) {
	width, err := DotInteractionWidth(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, width)
	if err := DotInteractionForward([]float32{1, 2}, []float32{3, 4, 5, 6}, 1, 2, 2, out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != "[1 2 11 17 39]" {
		t.Errorf("dot interaction = %v", out)
	}
	dl := make([]float32, 2)
	loss, err := BCEWithLogits([]float32{0, 0}, []float32{1, 0}, 2, dl)
	if err != nil || math.Abs(loss-math.Log(2)) > 1e-12 || dl[0] != -0.25 || dl[1] != 0.25 {
		t.Errorf("bce = %v %v, %v", loss, dl, err)
	}
	if _, err := BCEWithLogits([]float32{0}, []float32{0.5}, 1, nil); CodeOf(err) != ErrCodeInvalid {
		t.Errorf("label 0.5: %v", err)
	}
}

func TestNoSyncStepsOnlyAccumulate(t *testing.T) {
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	ddp, err := NewBucketer(comms[0], []int64{2, 2}, &BucketerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ddp.Close()
	m, err := NewMLP(1, []int64{2}, []Activation{ActivationNone}, 3, "m")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := firstErr(m.UseBucketerGrads(ddp, 0), ddp.ZeroGrad(), ddp.SetSync(false)); err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 2; step++ {
		err := firstErr(m.Forward([]float32{1}, 1, make([]float32, 2)),
			m.Backward([]float32{1, 2}, nil, ddp, 0), ddp.Finish())
		if err != nil {
			t.Fatal(err)
		}
	}
	if st, err := ddp.Stats(); err != nil || st.Steps != 0 {
		t.Errorf("no_sync steps are not synced steps: %+v, %v", st, err)
	}
	if g, err := m.Grad(1); err != nil || fmt.Sprint(g) != "[2 4]" {
		t.Errorf("bias gradients accumulate: %v, %v", g, err)
	}
	err = firstErr(ddp.SetSync(true), ddp.MarkReady(0), ddp.MarkReady(1), ddp.Finish(),
		m.UseBucketerGrads(ddp, 0))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ddp.Stats(); err != nil || st.Steps != 1 {
		t.Errorf("synced step: %+v, %v", st, err)
	}
	if g, err := m.Grad(1); err != nil || fmt.Sprint(g) != "[2 4]" {
		t.Errorf("world 1: the average is the sum: %v, %v", g, err)
	}
}
