package shardrec

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// closeRaceRounds is how many times each owning type races its Close against its calls.
const closeRaceRounds = 200

// raceClose runs rounds rounds of: open an object, run call in a loop on another goroutine, and
// Close the object from this goroutine once the loop has made a call or two. Close must return,
// and every call must succeed or, once the object is closed, return an *Error with
// ErrCodeInvalid (the loop stops there); nothing may crash the process. Every fourth round
// closes from two goroutines at once.
func raceClose(t *testing.T, rounds int, open func() (call func() error, close func() error)) {
	t.Helper()
	for round := 0; round < rounds; round++ {
		call, closeIt := open()
		started := make(chan struct{})
		result := make(chan error, 1)
		go func() {
			var err error
			for i := 0; err == nil; i++ {
				if i == 1 {
					close(started)
				}
				err = call()
			}
			if CodeOf(err) != ErrCodeInvalid {
				result <- fmt.Errorf("a call racing Close: %v, want nil or ErrCodeInvalid", err)
				return
			}
			result <- nil
		}()
		select {
		case <-started:
		case err := <-result:
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			t.Fatalf("round %d: the calls failed before Close", round)
		}
		// Vary where Close lands: at once, after a yield, or a little later.
		switch round % 3 {
		case 1:
			time.Sleep(0)
		case 2:
			time.Sleep(time.Duration(round%50) * time.Microsecond)
		}
		closers := 1
		if round%4 == 3 {
			closers = 2
		}
		closed := make(chan error, closers)
		for i := 0; i < closers; i++ {
			go func() { closed <- closeIt() }()
		}
		for i := 0; i < closers; i++ {
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("round %d: Close: %v", round, err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("round %d: Close did not return", round)
			}
		}
		select {
		case err := <-result:
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the calls did not stop after Close", round)
		}
	}
}

// raceBatch is a batch large enough that forward and backward take a while: Close has calls in
// flight to land on.
func raceBatch(rows int64) *KJT {
	k := &KJT{BatchSize: 256, NumFeatures: 2}
	for f := 0; f < 2; f++ {
		for b := 0; b < 256; b++ {
			k.Lengths = append(k.Lengths, 4)
			for j := 0; j < 4; j++ {
				k.Values = append(k.Values, int64(f*7919+b*31+j*977)%rows)
			}
		}
	}
	return k
}

func TestCloseWaitsForEmbeddingCallsInFlight(t *testing.T) {
	const rows = 4096
	tables := []TableConfig{{Name: "a", Rows: rows, Dim: 32, Features: []int32{0}},
		{Name: "b", Rows: rows, Dim: 16, Features: []int32{1}}}
	plan, err := NewPlan(tables, []FeatureConfig{{Name: "fa"}, {Name: "fb"}},
		Topology{WorldSize: 1, BatchSize: 256}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	k := raceBatch(rows)
	raceClose(t, closeRaceRounds, func() (func() error, func() error) {
		comms, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer comms[0].Close()
		coll, err := NewEmbeddingCollection(plan, comms[0], nil,
			&EmbeddingOptions{TableMemory: TableMemorySmallPages})
		if err != nil {
			t.Fatal(err)
		}
		n, err := coll.OutputSize(k)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, n)
		return func() error {
			if err := coll.Forward(k, out); err != nil {
				return err
			}
			return coll.Backward(out)
		}, coll.Close
	})
}

func TestCloseWaitsForCollectivesInFlight(t *testing.T) {
	buf := make([]float32, 1<<16)
	raceClose(t, closeRaceRounds, func() (func() error, func() error) {
		comms, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := comms[0]
		return func() error {
			if err := Allreduce(c, buf, buf, ReduceSum); err != nil {
				return err
			}
			return c.Barrier()
		}, c.Close
	})
}

func TestCloseWaitsForPlanAndDenseCallsInFlight(t *testing.T) {
	plan := testPlan(t, 1)
	defer plan.Close()
	text, err := plan.JSON()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Plan", func(t *testing.T) {
		raceClose(t, closeRaceRounds, func() (func() error, func() error) {
			p, err := PlanFromJSON(text)
			if err != nil {
				t.Fatal(err)
			}
			return func() error {
				_, err := p.JSON()
				return err
			}, p.Close
		})
	})
	t.Run("MLP", func(t *testing.T) {
		const batch = 64
		x, y := make([]float32, batch*32), make([]float32, batch*8)
		raceClose(t, closeRaceRounds, func() (func() error, func() error) {
			m, err := NewMLP(32, []int64{64, 8}, nil, 1, "")
			if err != nil {
				t.Fatal(err)
			}
			return func() error {
				if err := m.Forward(x, batch, y); err != nil {
					return err
				}
				return m.Backward(y, x, nil, 0)
			}, m.Close
		})
	})
	// The optimizer holds the layer open from its tensor list to the step's end.
	t.Run("DenseOptimizerStepOfAClosingLayer", func(t *testing.T) {
		const batch = 16
		x, y := make([]float32, batch*8), make([]float32, batch*4)
		opt, err := NewDenseOptimizer(NewOptimizer(OptimizerAdam, 0.01))
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Close()
		raceClose(t, closeRaceRounds, func() (func() error, func() error) {
			m, err := NewMLP(8, []int64{16, 4}, nil, 1, "")
			if err != nil {
				t.Fatal(err)
			}
			return func() error {
				if err := m.Forward(x, batch, y); err != nil {
					return err
				}
				if err := m.Backward(y, nil, nil, 0); err != nil {
					return err
				}
				return opt.Step(m, m) // one layer twice: locked once
			}, m.Close
		})
	})
	t.Run("FSDP", func(t *testing.T) {
		raceClose(t, closeRaceRounds, func() (func() error, func() error) {
			comms, err := NewLocalGroup(1, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer comms[0].Close()
			f, err := NewFSDP(comms[0], []int64{1024}, make([]float32, 1024), nil)
			if err != nil {
				t.Fatal(err)
			}
			grad := make([]float32, 1024)
			return func() error {
				if _, err := f.Gather(0, -1); err != nil {
					return err
				}
				if err := f.Release(0); err != nil {
					return err
				}
				if err := f.AddGrad(0, grad); err != nil {
					return err
				}
				if err := f.ReduceGrad(0); err != nil {
					return err
				}
				return f.Step()
			}, f.Close
		})
	})
}

// A collective blocked on a peer that never comes holds Close until it ends; Abort, from another
// goroutine, ends it at once, also while that Close waits.
func TestAbortEndsACollectiveThatCloseWaitsFor(t *testing.T) {
	// The barrier must be blocked in C before Close starts: a slow start (Close first, then the
	// barrier refused as closed) is tried again with a longer head start.
	for _, ms := range []time.Duration{50, 500, 3000} {
		if abortWhileCloseWaits(t, ms*time.Millisecond) {
			return
		}
	}
	t.Fatal("the barrier never started before Close")
}

// abortWhileCloseWaits runs the scenario once; false when the barrier had not started before
// Close.
func abortWhileCloseWaits(t *testing.T, headStart time.Duration) bool {
	comms, err := NewLocalGroup(2, &CommOptions{TimeoutMs: 120000})
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	c := comms[0]
	barrier := make(chan error, 1)
	go func() { barrier <- c.Barrier() }() // rank 1 never enters it
	time.Sleep(headStart)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		berr := <-barrier
		if CodeOf(berr) == ErrCodeInvalid {
			return false // the barrier came after Close
		}
		t.Fatalf("Close returned (%v) while the barrier was blocked; the barrier: %v", err, berr)
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	if err := c.Abort(); err != nil {
		t.Fatalf("Abort while Close waits: %v", err)
	}
	for _, ch := range []chan error{barrier, closed} {
		select {
		case err := <-ch:
			if ch == barrier && CodeOf(err) != ErrCodeAborted {
				t.Fatalf("the blocked barrier after Abort: %v, want ErrCodeAborted", err)
			}
			if ch == closed && err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Abort did not end the barrier and the Close waiting for it")
		}
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Abort and Close took %v", d)
	}
	if err := c.Barrier(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Barrier after Close: %v, want ErrCodeInvalid", err)
	}
	if err := c.Abort(); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Abort after Close: %v, want ErrCodeInvalid", err)
	}
	return true
}

// A closed handle given where C takes NULL for "none" is refused, not read as "none": a closed
// Bucketer would leave a backward's gradients unsynchronised, a closed data-parallel
// communicator would train the data-parallel tables apart.
func TestClosedOptionalHandlesAreRefused(t *testing.T) {
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	ddp, err := NewBucketer(comms[0], []int64{3, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ddp.Close()
	m, err := NewMLP(2, []int64{1}, []Activation{ActivationNone}, 3, "m")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, y := []float32{1, 2}, make([]float32, 1)
	if err := m.Forward(x, 1, y); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward([]float32{1}, nil, ddp, 0); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("backward with a closed bucketer: %v", err)
	}
	// The same backward without one goes through.
	if err := m.Backward([]float32{1}, nil, nil, 0); err != nil {
		t.Fatal(err)
	}

	plan := testPlan(t, 1)
	defer plan.Close()
	dp, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	dp[0].Close()
	_, err = NewEmbeddingCollection(plan, comms[0], nil, &EmbeddingOptions{DPComm: dp[0]})
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "DPComm was closed") {
		t.Fatalf("a closed DPComm: %v", err)
	}
}

// A mesh checkpoint call with a nil or closed mesh is refused: C takes a NULL mesh as a 1D
// checkpoint, which a mesh collection's ranks must not write.
func TestMeshCheckpointWithAClosedMeshIsRefused(t *testing.T) {
	coll := testWorld1Collection(t)
	defer coll.Close()
	var nilMesh *Mesh
	if err := nilMesh.SaveCheckpoint(coll, t.TempDir()); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("save with a nil mesh: %v", err)
	}
	if err := nilMesh.LoadCheckpoint(coll, t.TempDir(), nil); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("load with a nil mesh: %v", err)
	}
}

// Creation is collective: a rank given a nil plan fails with its peers at once (they name it),
// and the next creation pairs up on every rank (before, the peers waited, and the retry met
// their first create).
func TestANilPlanOnOneRankFailsEveryRankTogether(t *testing.T) {
	plan := testPlan(t, 2)
	defer plan.Close()
	onRanks(t, 2, func(rank int, c *Comm) error {
		p := plan
		if rank == 1 {
			p = nil
		}
		start := time.Now()
		if _, err := NewEmbeddingCollection(p, c, nil, nil); CodeOf(err) != ErrCodeInvalid {
			return fmt.Errorf("the refused create: %v", err)
		} else if rank == 0 && !strings.Contains(err.Error(), "rank 1 rejected") {
			return fmt.Errorf("rank 0 does not name rank 1: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			return fmt.Errorf("the refused create took %v", d)
		}
		coll, err := NewEmbeddingCollection(plan, c, nil, nil)
		if err != nil {
			return fmt.Errorf("the next create: %v", err)
		}
		return coll.Close()
	})
}

// The same for the FSDP: a rank whose arguments Go refuses still meets its peers in C's
// agreement, so every rank fails at once, and the next creation pairs up.
func TestARefusedFSDPOnOneRankFailsEveryRankTogether(t *testing.T) {
	counts := []int64{3, 2}
	onRanks(t, 2, func(rank int, c *Comm) error {
		initial := make([]float32, 5)
		if rank == 1 {
			initial = initial[:4]
		}
		start := time.Now()
		if _, err := NewFSDP(c, counts, initial, nil); CodeOf(err) != ErrCodeInvalid {
			return fmt.Errorf("the refused create: %v", err)
		} else if rank == 0 && !strings.Contains(err.Error(), "rank 1 refused") {
			return fmt.Errorf("rank 0 does not name rank 1: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			return fmt.Errorf("the refused create took %v", d)
		}
		f, err := NewFSDP(c, counts, make([]float32, 5), nil)
		if err != nil {
			return fmt.Errorf("the next create: %v", err)
		}
		return f.Close()
	})
}

// A raw collective Go refuses (slices of different lengths) still meets its peers in C's
// agreement: the other rank fails at once naming it (it waited out its timeout before), and the
// next collective pairs up.
func TestARawCollectiveRefusedInGoFailsEveryRankTogether(t *testing.T) {
	onRanks(t, 2, func(rank int, c *Comm) error {
		send := []float32{1, 2, 3, 4}
		recv := make([]float32, 4)
		if rank == 1 {
			recv = recv[:2]
		}
		start := time.Now()
		err := Allreduce(c, send, recv, ReduceSum)
		if CodeOf(err) != ErrCodeInvalid {
			return fmt.Errorf("the refused allreduce: %v", err)
		}
		if rank == 0 && !strings.Contains(err.Error(), "rank 1 refused its allreduce") {
			return fmt.Errorf("rank 0 does not name rank 1: %v", err)
		}
		if rank == 1 && !strings.Contains(err.Error(), "recv has 2 elements") {
			return fmt.Errorf("rank 1 does not give its own reason: %v", err)
		}
		all := make([]float32, 3)
		err = Allgather(c, send[:rank+1], all[:2+rank]) // rank 1's recv is one short
		if CodeOf(err) != ErrCodeInvalid {
			return fmt.Errorf("the refused allgather: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			return fmt.Errorf("the refused collectives took %v", d)
		}
		sum := []float32{1}
		if err := Allreduce(c, sum, sum, ReduceSum); err != nil || sum[0] != 2 {
			return fmt.Errorf("the next allreduce: %v (sum %v)", err, sum[0])
		}
		return nil
	})
}
