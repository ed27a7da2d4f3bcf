// The parts of the C API added to the Go binding last, each checked by value: library and
// device queries, the dense collectives at world 2, the plan's ranks per node, per-table
// optimizer states, dense optimizer state (Adam moments by hand), DDP external gradients
// (averaged in place), dense tensors in checkpoints and the non-finite policy.
package shardrec

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// onRanks runs body(rank) on one goroutine per rank of a new local group and fails the test
// with the first error.
func onRanks(t *testing.T, world int, body func(rank int, c *Comm) error) {
	t.Helper()
	comms, err := NewLocalGroup(world, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = body(r, comms[r])
		}(r)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	for r, e := range errs {
		if e != nil {
			t.Fatalf("rank %d: %v", r, e)
		}
	}
}

func TestVersionAndElementSizes(t *testing.T) {
	var major, minor, patch int
	if _, err := fmt.Sscanf(VersionString(), "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatal(err)
	}
	if got := Version(); got != major*10000+minor*100+patch {
		t.Fatalf("Version() = %d for %q", got, VersionString())
	}
	want := map[DType]int{DTypeFloat32: 4, DTypeFloat16: 2, DTypeBFloat16: 2, DTypeFloat64: 8,
		DTypeInt32: 4, DTypeInt64: 8, DTypeUint8: 1, DTypeFP8E4M3: 0, DTypeFP8E5M2: 0, DType(99): 0}
	for d, n := range want {
		if d.Size() != n {
			t.Errorf("DType(%d).Size() = %d, want %d", d, d.Size(), n)
		}
	}
}

func TestDevicesReportWhyTheyAreMissing(t *testing.T) {
	if err := DeviceCheck(DeviceHost, 0); err != nil {
		t.Fatal(err)
	}
	if CodeOf(DeviceCheck(DeviceCUDA, -1)) != ErrCodeInvalid {
		t.Fatal("negative device index accepted")
	}
	n, err := DeviceCount()
	if err != nil || n < 0 {
		t.Fatal(n, err)
	}
	if n > 0 {
		if err := DeviceCheck(DeviceCUDA, 0); err != nil {
			t.Fatal(err)
		}
		if p, err := DevicePluginPath(); err != nil || p == "" || p[0] != '/' {
			t.Fatal(p, err)
		}
		return
	}
	// No GPU (as on the CI machine): the check and the plugin path say why.
	for _, err := range []error{DeviceCheck(DeviceCUDA, 0), func() error {
		_, e := DevicePluginPath()
		return e
	}()} {
		code := CodeOf(err)
		if code != ErrCodeNoDevice && code != ErrCodeUnsupported {
			t.Fatalf("want ENODEVICE or EUNSUPPORTED, got %v", err)
		}
		if e := err.(*Error); e.Message == "" {
			t.Fatal("empty message")
		}
	}
}

func TestCollectivesAtWorldTwo(t *testing.T) {
	var mu sync.Mutex
	results := map[int][]float64{}
	onRanks(t, 2, func(rank int, c *Comm) error {
		r := float32(rank)
		all := make([]float32, 4)
		if err := Allgather(c, []float32{r + 1, 10 * (r + 1)}, all); err != nil {
			return err
		}
		b := []int64{-1, -1}
		if rank == 1 {
			b = []int64{7, 8}
		}
		if err := Broadcast(c, b, 1); err != nil {
			return err
		}
		mx := make([]float64, 2)
		if err := Allreduce(c, []float64{float64(rank), float64(5 - rank)}, mx, ReduceMax); err != nil {
			return err
		}
		sum := []int32{int32(rank) + 3}
		if err := Allreduce(c, sum, sum, ReduceSum); err != nil {
			return err
		}
		// Bad lengths are refused (in Go, after meeting the other rank in C's agreement).
		if CodeOf(Allgather(c, []float32{1, 2}, make([]float32, 3))) != ErrCodeInvalid {
			return fmt.Errorf("short allgather recv accepted")
		}
		if CodeOf(Allreduce(c, []float32{1}, make([]float32, 2), ReduceSum)) != ErrCodeInvalid {
			return fmt.Errorf("mismatched allreduce accepted")
		}
		mu.Lock()
		results[rank] = []float64{float64(all[0]), float64(all[1]), float64(all[2]),
			float64(all[3]), float64(b[0]), float64(b[1]), mx[0], mx[1], float64(sum[0])}
		mu.Unlock()
		return nil
	})
	want := []float64{1, 10, 2, 20, 7, 8, 1, 5, 7}
	for r := 0; r < 2; r++ {
		if !reflect.DeepEqual(results[r], want) {
			t.Errorf("rank %d: %v, want %v", r, results[r], want)
		}
	}
}

func TestPlanRanksPerNode(t *testing.T) {
	tables := []TableConfig{{Name: "t", Rows: 64, Dim: 8, Features: []int32{0}}}
	features := []FeatureConfig{{Name: "f"}}
	for _, c := range []struct{ perNode, want int }{{2, 2}, {0, 4}} {
		p, err := NewPlan(tables, features, Topology{WorldSize: 4, RanksPerNode: c.perNode}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.RanksPerNode()
		p.Close()
		if err != nil || got != c.want {
			t.Fatalf("RanksPerNode() = %d, %v; want %d", got, err, c.want)
		}
	}
}

func TestTableStatesFollowEachTablesOptimizer(t *testing.T) {
	adam := DefaultOptimizer()
	adam.Type = OptimizerAdam
	rowwise := DefaultOptimizer()
	rowwise.Type = OptimizerRowwiseAdagrad
	tables := []TableConfig{
		{Name: "a", Rows: 10, Dim: 4, Features: []int32{0}, Optimizer: &adam},
		{Name: "b", Rows: 6, Dim: 2, Features: []int32{1}},
	}
	coll := newWorld1Collection(t, tables, []FeatureConfig{{Name: "f0"}, {Name: "f1"}}, &rowwise)
	defer coll.Close()
	a, err := coll.TableStates("a")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, []TableState{{"momentum1", false}, {"momentum2", false}}) {
		t.Fatalf("table a states %v", a)
	}
	b, err := coll.TableStates("b")
	if err != nil || !reflect.DeepEqual(b, []TableState{{"momentum1", true}}) {
		t.Fatalf("table b states %v, %v", b, err)
	}
	if m2, err := coll.State("a", "momentum2"); err != nil || len(m2) != 40 {
		t.Fatalf("a.momentum2: %d values, %v", len(m2), err)
	}
	if m1, err := coll.State("b", "momentum1"); err != nil || len(m1) != 6 {
		t.Fatalf("b.momentum1: %d values, %v", len(m1), err)
	}
	if _, err := coll.TableStates("nope"); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("unknown table: %v", err)
	}
	// The collection-level list with two states (each name read into fresh memory).
	adamColl := newWorld1Collection(t, tables[:1], []FeatureConfig{{Name: "f0"}}, &adam)
	defer adamColl.Close()
	names, rowWise, err := adamColl.StateNames()
	if err != nil || !reflect.DeepEqual(names, []string{"momentum1", "momentum2"}) ||
		!reflect.DeepEqual(rowWise, []bool{false, false}) {
		t.Fatalf("StateNames: %v %v %v", names, rowWise, err)
	}
}

func TestDenseOptimizerStateHoldsAdamMoments(t *testing.T) {
	mlp, err := NewMLP(2, []int64{1}, []Activation{ActivationNone}, 3, "m")
	if err != nil {
		t.Fatal(err)
	}
	defer mlp.Close()
	cfg := DefaultOptimizer()
	cfg.Type = OptimizerAdam
	cfg.LearningRate = 0.1
	opt, err := NewDenseOptimizer(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	if n, err := opt.StateCount(0, DenseMomentum1); err != nil || n != 0 {
		t.Fatalf("state before the first step: %d, %v", n, err)
	}
	// y = w . x + b with x = (1, 2), dy = 3: dw = (3, 6), db = 3.
	y := make([]float32, 1)
	if err := mlp.Forward([]float32{1, 2}, 1, y); err != nil {
		t.Fatal(err)
	}
	if err := mlp.Backward([]float32{3}, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := opt.Step(mlp); err != nil {
		t.Fatal(err)
	}
	grads := [][]float32{{3, 6}, {3}}
	for tensor, g := range grads {
		m, err1 := opt.State(tensor, DenseMomentum1)
		v, err2 := opt.State(tensor, DenseMomentum2)
		if err := firstErr(err1, err2); err != nil || len(m) != len(g) || len(v) != len(g) {
			t.Fatalf("tensor %d: %v %v %v", tensor, m, v, err)
		}
		for i := range g {
			if math.Abs(float64(m[i]-0.1*g[i])) > 1e-6 || math.Abs(float64(v[i]-0.001*g[i]*g[i])) > 1e-6 {
				t.Errorf("tensor %d element %d: m=%g v=%g for g=%g", tensor, i, m[i], v[i], g[i])
			}
		}
	}
	if err := opt.SetState(0, DenseMomentum1, []float32{0.5, -0.5}); err != nil {
		t.Fatal(err)
	}
	if m, _ := opt.State(0, DenseMomentum1); !reflect.DeepEqual(m, []float32{0.5, -0.5}) {
		t.Fatalf("SetState did not land: %v", m)
	}
	if CodeOf(opt.SetState(0, DenseMomentum1, make([]float32, 3))) != ErrCodeInvalid {
		t.Fatal("wrong-length state accepted")
	}
	if _, err := opt.StateCount(2, DenseMomentum1); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("tensor position out of range: %v", err)
	}
}

func TestExternalGradientsAreAveraged(t *testing.T) {
	var mu sync.Mutex
	results := map[int][]float32{}
	onRanks(t, 2, func(rank int, c *Comm) error {
		ddp, err := NewBucketer(c, []int64{3, 2}, nil)
		if err != nil {
			return err
		}
		defer ddp.Close()
		g, err := NewHostFloats(3)
		if err != nil {
			return err
		}
		defer g.Close()
		copy(g.Floats(), []float32{float32(rank), float32(2 * rank), 4})
		if err := ddp.SetExternal(0, g); err != nil {
			return err
		}
		wrong, _ := NewHostFloats(3)
		defer wrong.Close()
		if CodeOf(ddp.SetExternal(1, wrong)) != ErrCodeInvalid {
			return fmt.Errorf("external gradient of the wrong size accepted")
		}
		if err := firstErr(ddp.MarkReady(0), ddp.MarkReady(1), ddp.Finish()); err != nil {
			return err
		}
		mu.Lock()
		results[rank] = append([]float32(nil), g.Floats()...)
		mu.Unlock()
		return nil
	})
	for r := 0; r < 2; r++ {
		if !reflect.DeepEqual(results[r], []float32{0.5, 1, 4}) {
			t.Errorf("rank %d: %v", r, results[r])
		}
	}
}

func TestCheckpointCarriesDenseTensors(t *testing.T) {
	tables := []TableConfig{{Name: "t", Rows: 8, Dim: 4, Features: []int32{0}}}
	coll := newWorld1Collection(t, tables, []FeatureConfig{{Name: "f"}}, nil)
	defer coll.Close()
	dir := t.TempDir()
	params := []float32{1.5, -2, 3.25}
	if err := coll.SaveCheckpointWith(dir, &CheckpointOptions{
		Dense: []DenseTensor{{Name: "mlp.w", Data: params}}}); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, 3)
	if err := coll.LoadCheckpoint(dir, &CheckpointOptions{
		Dense: []DenseTensor{{Name: "mlp.w", Data: back}}}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, params) {
		t.Fatalf("loaded %v, saved %v", back, params)
	}
	if err := coll.LoadCheckpoint(dir, &CheckpointOptions{
		Dense: []DenseTensor{{Name: "mlp.w", Data: make([]float32, 2)}}}); err == nil {
		t.Fatal("a dense tensor of another size was loaded")
	}
	if CodeOf(coll.SaveCheckpointWith(dir, &CheckpointOptions{
		Dense: []DenseTensor{{Name: "a\nb", Data: params}}})) != ErrCodeInvalid {
		t.Fatal("a name with a newline was accepted")
	}
}

func TestNonFinitePolicyReachesTheCollection(t *testing.T) {
	tables := []TableConfig{{Name: "t", Rows: 4, Dim: 2, Features: []int32{0}}}
	plan, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	nan := float32(math.NaN())
	batch := &KJT{BatchSize: 1, NumFeatures: 1, Lengths: []int32{1}, Values: []int64{0},
		Weights: []float32{nan}}
	for _, policy := range []NonFinitePolicy{NonFiniteCheck, NonFiniteAllow} {
		comms, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		coll, err := NewEmbeddingCollection(plan, comms[0], nil,
			&EmbeddingOptions{NonFinite: policy, TableMemory: TableMemorySmallPages})
		comms[0].Close()
		if err != nil {
			t.Fatal(err)
		}
		out, err := coll.ForwardAlloc(batch)
		coll.Close()
		if policy == NonFiniteCheck {
			if CodeOf(err) != ErrCodeInvalid {
				t.Fatalf("NaN weight with CHECK: %v", err)
			}
		} else if err != nil || !math.IsNaN(float64(out[0])) || !math.IsNaN(float64(out[1])) {
			t.Fatalf("NaN weight with ALLOW: %v, %v", out, err)
		}
	}
}

func TestEmbeddingDeviceIsForwarded(t *testing.T) {
	tables := []TableConfig{{Name: "t", Rows: 4, Dim: 2, Features: []int32{0}}}
	plan, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	_, err = NewEmbeddingCollection(plan, comms[0], nil, &EmbeddingOptions{DeviceType: DeviceCUDA})
	if code := CodeOf(err); code != ErrCodeUnsupported && code != ErrCodeNoDevice {
		t.Fatalf("CUDA collection: %v", err)
	}
}

// memoryStore is an in-process key-value store: what a launcher's store (etcd, Redis, ...)
// would provide.
type memoryStore struct {
	mu   sync.Mutex
	cond *sync.Cond
	m    map[string][]byte
	sets int
}

func newMemoryStore() *memoryStore {
	s := &memoryStore{m: map[string][]byte{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *memoryStore) Set(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets++
	s.m[key] = append([]byte(nil), value...)
	s.cond.Broadcast()
	return nil
}

func (s *memoryStore) Get(key string, timeoutMs int64) ([]byte, error) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	timer := time.AfterFunc(time.Until(deadline), func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if v, ok := s.m[key]; ok {
			return v, nil
		}
		if !time.Now().Before(deadline) {
			return nil, &Error{Code: ErrCodeTimeout, Message: "no key " + key}
		}
		s.cond.Wait()
	}
}

func TestCustomStoreRendezvousAtWorldTwo(t *testing.T) {
	store := newMemoryStore()
	results := make([][]float32, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			c, err := NewCommWithStore(store, 2, rank, &CommOptions{TimeoutMs: 20000})
			if err != nil {
				errs[rank] = err
				return
			}
			defer c.Close()
			if got, _ := c.Rank(); got != rank {
				errs[rank] = fmt.Errorf("rank %d reports %d", rank, got)
				return
			}
			v := []float32{float32(rank) + 1, 10}
			errs[rank] = Allreduce(c, v, v, ReduceSum)
			results[rank] = v
		}(r)
	}
	wg.Wait()
	for r := 0; r < 2; r++ {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if !reflect.DeepEqual(results[r], []float32{3, 20}) {
			t.Errorf("rank %d: %v", r, results[r])
		}
	}
	if store.sets < 2 {
		t.Fatalf("the store was not used (%d sets)", store.sets)
	}
}

type failingStore struct{}

func (failingStore) Set(string, []byte) error {
	return &Error{Code: ErrCodeIO, Message: "store down"}
}

func (failingStore) Get(string, int64) ([]byte, error) { return nil, errors.New("store down") }

func TestStoreErrorsCarryTheirCode(t *testing.T) {
	_, err := NewCommWithStore(failingStore{}, 2, 0, &CommOptions{TimeoutMs: 2000})
	// The rendezvous fails as a whole (EREMOTE); the message names the store's own code.
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrCodeRemote ||
		!strings.Contains(e.Message, fmt.Sprintf("returned code %d", ErrCodeIO)) {
		t.Fatalf("failing store: %v", err)
	}
	if CodeOf(func() error { _, err := NewCommWithStore(nil, 1, 0, nil); return err }()) != ErrCodeInvalid {
		t.Fatal("nil store accepted")
	}
}

func TestTensorViewsMatchThePlainCalls(t *testing.T) {
	tables := []TableConfig{{Name: "t", Rows: 4, Dim: 3, Features: []int32{0}}}
	plan, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	sgd := DefaultOptimizer()
	sgd.LearningRate = 0.5
	colls := make([]*EmbeddingCollection, 2)
	for i := range colls {
		comms, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		colls[i], err = NewEmbeddingCollection(plan, comms[0], &sgd, &EmbeddingOptions{Seed: 5})
		comms[0].Close()
		if err != nil {
			t.Fatal(err)
		}
		defer colls[i].Close()
	}
	plain, viewed := colls[0], colls[1]
	batch := &KJT{BatchSize: 2, NumFeatures: 1, Lengths: []int32{2, 1}, Values: []int64{0, 3, 1}}
	want, err := plain.ForwardAlloc(batch)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 6)
	if err := viewed.ForwardTensor(batch, got, []int64{2, 3}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ForwardTensor %v, Forward %v", got, want)
	}
	if err := firstErr(plain.Backward(want), viewed.BackwardTensor(got, []int64{2, 3})); err != nil {
		t.Fatal(err)
	}
	w1, _ := plain.Weights("t")
	w2, _ := viewed.Weights("t")
	if !reflect.DeepEqual(w1, w2) {
		t.Fatalf("weights after BackwardTensor differ: %v vs %v", w2, w1)
	}
	if err := viewed.Synchronize(); err != nil { // a host collection: nothing queued
		t.Fatal(err)
	}
	if err := firstErr(viewed.InputDistStart(batch), viewed.InputDistWait()); err != nil {
		t.Fatal(err)
	}
	dist := make([]float32, 6)
	if err := viewed.ForwardDistributedTensor(dist, []int64{6}); err != nil {
		t.Fatal(err)
	}
	again, _ := viewed.ForwardAlloc(batch)
	if !reflect.DeepEqual(dist, again) {
		t.Fatalf("ForwardDistributedTensor %v, Forward %v", dist, again)
	}
	// A last extent other than the output width: refused by the library.
	if CodeOf(viewed.ForwardTensor(batch, make([]float32, 6), []int64{3, 2})) != ErrCodeInvalid {
		t.Fatal("wrong output width accepted")
	}
	// A shape that does not match the buffer: refused before the call.
	if CodeOf(viewed.ForwardTensor(batch, make([]float32, 6), []int64{2, 4})) != ErrCodeInvalid {
		t.Fatal("shape/buffer mismatch accepted")
	}
}

func TestLayersComputeWithBoundStorage(t *testing.T) {
	mlp, err := NewMLP(2, []int64{1}, []Activation{ActivationNone}, 3, "m")
	if err != nil {
		t.Fatal(err)
	}
	defer mlp.Close()
	w, _ := NewHostFloats(2)
	b, _ := NewHostFloats(1)
	dw, _ := NewHostFloats(2)
	defer w.Close()
	defer b.Close()
	defer dw.Close()
	copy(w.Floats(), []float32{1, 2})
	b.Floats()[0] = 0.5
	if err := firstErr(mlp.BindTensor(0, w, dw), mlp.BindTensor(1, b, nil)); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, 1)
	if err := mlp.Forward([]float32{3, 4}, 1, y); err != nil {
		t.Fatal(err)
	}
	if y[0] != 1*3+2*4+0.5 {
		t.Fatalf("forward with bound parameters: %v", y)
	}
	if err := mlp.Backward([]float32{1}, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dw.Floats(), []float32{3, 4}) {
		t.Fatalf("bound gradient %v", dw.Floats())
	}
	if err := mlp.SetParam(1, []float32{-1}); err != nil || b.Floats()[0] != -1 {
		t.Fatalf("SetParam did not write the bound storage: %v %v", b.Floats(), err)
	}
	if CodeOf(mlp.BindTensor(0, dw, b)) != ErrCodeInvalid {
		t.Fatal("storage of the wrong size accepted")
	}
}

func TestSyncHookAveragesTheReplicas(t *testing.T) {
	tables := []TableConfig{{Name: "t", Rows: 4, Dim: 2, Features: []int32{0}}}
	plan, err := NewPlan(tables, []FeatureConfig{{Name: "f"}}, Topology{WorldSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	var mu sync.Mutex
	results := map[int][]float32{}
	onRanks(t, 2, func(rank int, world *Comm) error {
		// Sharding groups of 1: two replicas of the whole collection.
		mesh, err := NewMesh(world, &MeshOptions{ShardingGroupSize: 1})
		if err != nil {
			return err
		}
		defer mesh.Close()
		replicas, err := mesh.ReplicaComm()
		if err != nil {
			return err
		}
		defer replicas.Close()
		coll, err := mesh.NewEmbeddingCollection(plan, nil, nil)
		if err != nil {
			return err
		}
		defer coll.Close()
		calls := 0
		if err := mesh.SetSyncHook(func(b *SyncBuffer) error {
			calls++
			f := b.Float32()
			if f == nil {
				return fmt.Errorf("a %d-element buffer of dtype %d", b.Count, b.DType)
			}
			return Allreduce(replicas, f, f, ReduceAvg)
		}); err != nil {
			return err
		}
		w := make([]float32, 8)
		for i := range w {
			w[i] = float32(rank + 1)
		}
		if err := firstErr(coll.SetWeights("t", w), mesh.Sync(coll, SyncWeightsOnly)); err != nil {
			return err
		}
		if calls == 0 {
			return fmt.Errorf("the hook was not called")
		}
		// A failing hook fails the sync with a message naming it.
		if err := mesh.SetSyncHook(func(*SyncBuffer) error {
			return &Error{Code: ErrCodeIO, Message: "hook down"}
		}); err != nil {
			return err
		}
		if err := mesh.Sync(coll, SyncWeightsOnly); err == nil || !strings.Contains(err.Error(), "sync hook") {
			return fmt.Errorf("failing hook: %v", err)
		}
		if err := mesh.SetSyncHook(nil); err != nil {
			return err
		}
		got, err := coll.Weights("t")
		mu.Lock()
		results[rank] = got
		mu.Unlock()
		return err
	})
	for r := 0; r < 2; r++ {
		for i, v := range results[r] {
			if v != 1.5 {
				t.Fatalf("rank %d weight %d = %g, want the replica average 1.5", r, i, v)
			}
		}
	}
}
