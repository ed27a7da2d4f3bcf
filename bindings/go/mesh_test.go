// Tests of the 2D mesh binding: 2 replicas x 2-way sharding (4 ranks as goroutines) trained
// with SGD and a sync every step equals world size 1 on the global batch; errors and Close.
package shardrec

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

const (
	meshWorld = 4
	meshSteps = 3
)

func sgd() *OptimizerConfig {
	o := DefaultOptimizer()
	o.LearningRate = 0.5
	return &o
}

type meshRankResult struct {
	coords      MeshCoords
	stats       SyncStats
	description string
	shardSize   int
	replicaSize int
	weights     [][]float32
}

// trainMeshRank forms the 2 x 2 mesh on one rank, trains with a sync after every step and
// returns what the rank observed.
func trainMeshRank(plan *Plan, world *Comm, rank int) (*meshRankResult, error) {
	mesh, err := NewMesh(world, &MeshOptions{ShardingGroupSize: 2})
	if err != nil {
		return nil, err
	}
	defer mesh.Close()
	coll, err := mesh.NewEmbeddingCollection(plan, sgd(), &EmbeddingOptions{Seed: 7})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	for s := 0; s < meshSteps; s++ {
		if err := trainStep(coll, s, rank, 1); err != nil {
			return nil, err
		}
		synced, err := mesh.Step(coll)
		if err != nil {
			return nil, err
		}
		if !synced {
			return nil, &Error{Code: ErrCodeInternal, Message: "interval 1 did not sync"}
		}
	}
	res := &meshRankResult{}
	if res.coords, err = mesh.Coords(); err != nil {
		return nil, err
	}
	if res.stats, err = mesh.SyncStats(); err != nil {
		return nil, err
	}
	if res.description, err = mesh.Describe(); err != nil {
		return nil, err
	}
	for _, get := range []struct {
		comm func() (*Comm, error)
		size *int
	}{{mesh.ShardingComm, &res.shardSize}, {mesh.ReplicaComm, &res.replicaSize}} {
		c, err := get.comm()
		if err != nil {
			return nil, err
		}
		*get.size, err = c.Size()
		c.Close()
		if err != nil {
			return nil, err
		}
	}
	for _, name := range tableNames {
		w, err := coll.Weights(name)
		if err != nil {
			return nil, err
		}
		res.weights = append(res.weights, w)
	}
	return res, nil
}

func TestTwoReplicasOfTwoWayShardingEqualOneRankOnTheGlobalBatch(t *testing.T) {
	plan1 := testPlanFor(t, 1, OptimizerSGD)
	defer plan1.Close()
	comms1, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms1[0].Close()
	coll1, err := NewEmbeddingCollection(plan1, comms1[0], sgd(), &EmbeddingOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer coll1.Close()
	initial := trainSteps(t, coll1, 0, 0, meshWorld)
	single := trainSteps(t, coll1, meshSteps, 0, meshWorld)
	if initial == nil || single == nil {
		t.FailNow()
	}

	plan2 := testPlanFor(t, 2, OptimizerSGD)
	defer plan2.Close()
	world, err := NewLocalGroup(meshWorld, nil)
	if err != nil {
		t.Fatal(err)
	}
	results := make([]*meshRankResult, meshWorld)
	var wg sync.WaitGroup
	for r := 0; r < meshWorld; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			res, err := trainMeshRank(plan2, world[rank], rank)
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				world[rank].Abort() // peers fail promptly instead of waiting for a timeout
				return
			}
			results[rank] = res
		}(r)
	}
	wg.Wait()
	for _, c := range world {
		c.Close()
	}
	if t.Failed() {
		return
	}
	for r, res := range results {
		// Default layout, W = 4, S = 2: plan rank p of sharding group g is global rank 2p + g.
		if want := (MeshCoords{r % 2, r / 2, r / 2, r % 2}); res.coords != want {
			t.Errorf("rank %d: coords %+v, want %+v", r, res.coords, want)
		}
		if res.shardSize != 2 || res.replicaSize != 2 {
			t.Errorf("rank %d: group sizes %d, %d", r, res.shardSize, res.replicaSize)
		}
		if res.stats.Syncs != meshSteps || res.stats.Collectives < 1 || res.stats.Bytes == 0 {
			t.Errorf("rank %d: sync stats %+v", r, res.stats)
		}
		for i, name := range tableNames {
			if len(res.weights[i]) != len(single[i]) {
				t.Fatalf("rank %d %s: %d weights", r, name, len(res.weights[i]))
			}
			for j, want := range single[i] {
				got := res.weights[i][j]
				if math.Abs(float64(got-want)) > 1e-5*math.Max(1, math.Abs(float64(want))) {
					t.Fatalf("rank %d %s[%d]: 2D %g, single %g", r, name, j, got, want)
				}
			}
		}
	}
	for i, name := range tableNames {
		changed := false
		for j := range single[i] {
			changed = changed || single[i][j] != initial[i][j]
		}
		if !changed {
			t.Errorf("%s: training changed nothing", name)
		}
	}
	text := results[0].description
	if !strings.Contains(text, "replica groups (weight sync): [0,1] [2,3]") ||
		!strings.Contains(text, "[0,2] [1,3]") {
		t.Errorf("Describe:\n%s", text)
	}
}

func TestMeshGroupSizeThatDoesNotDivideTheWorldReturnsEinval(t *testing.T) {
	world, err := NewLocalGroup(meshWorld, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range world {
			c.Close()
		}
	}()
	// Creation is collective: every rank calls it and every rank refuses it.
	errs := make([]error, meshWorld)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			mesh, err := NewMesh(world[r], &MeshOptions{ShardingGroupSize: 3})
			if mesh != nil {
				mesh.Close()
				err = fmt.Errorf("rank %d: a mesh was made", r)
			}
			errs[r] = err
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		e, ok := err.(*Error)
		if !ok || e.Code != ErrCodeInvalid || e.CodeName() != "SHARDREC_EINVAL" {
			t.Fatalf("want *Error EINVAL, got %T %v", err, err)
		}
		if !strings.Contains(e.Message, "sharding group size 3 must divide the world size 4") {
			t.Fatalf("message: %q", e.Message)
		}
	}
}

func TestOneRankMeshAndCloseIsIdempotent(t *testing.T) {
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	mesh, err := NewMesh(comms[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := mesh.Coords(); err != nil || c != (MeshCoords{}) {
		t.Fatalf("coords %+v, %v", c, err)
	}
	plan := testPlanFor(t, 1, OptimizerSGD)
	defer plan.Close()
	coll, err := mesh.NewEmbeddingCollection(plan, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	if err := mesh.Sync(coll, SyncWeightsOnly); err != nil {
		t.Fatal(err)
	}
	if err := mesh.Sync(coll, 99); CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("Sync(99): %v", err)
	}
	mesh.Close()
	mesh.Close()
	if _, err := mesh.Describe(); CodeOf(err) != ErrCodeInvalid || err.(*Error).Message == "" {
		t.Fatalf("Describe after Close: %v", err)
	}
	if r, err := comms[0].Rank(); err != nil || r != 0 {
		t.Fatalf("world after mesh Close: %d, %v", r, err)
	}
}
