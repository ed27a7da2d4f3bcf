// Checkpoints through the Go binding: a 2-rank Adagrad collection saved, reloaded into a
// 1-rank collection of another seed (resharding) bit for bit, a table exported and imported,
// and a missing checkpoint reported as SHARDREC_ENOTFOUND.
package shardrec

import (
	"math"
	"path/filepath"
	"sync"
	"testing"
)

func allWeights(t *testing.T, coll *EmbeddingCollection) [][]float32 {
	var out [][]float32
	for _, name := range tableNames {
		w, err := coll.Weights(name)
		if err != nil {
			t.Fatalf("weights: %v", err)
		}
		st, err := coll.State(name, "momentum1")
		if err != nil {
			t.Fatalf("state: %v", err)
		}
		out = append(out, w, st)
	}
	return out
}

func TestCheckpointRoundTripAcrossWorldSizes(t *testing.T) {
	dir := t.TempDir()
	plan2 := testPlan(t, 2)
	defer plan2.Close()
	comms, err := NewLocalGroup(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	saved := make([][][]float32, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			coll, err := NewEmbeddingCollection(plan2, comms[rank], adagrad(), &EmbeddingOptions{Seed: 7})
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return
			}
			defer coll.Close()
			for s := 0; s < 2; s++ {
				if err := trainStep(coll, s, rank, 1); err != nil {
					t.Errorf("rank %d: %v", rank, err)
					return
				}
			}
			if err := coll.SaveCheckpoint(dir); err != nil {
				t.Errorf("save: %v", err)
				return
			}
			if err := coll.ExportTable("t1", filepath.Join(dir, "t1.safetensors"), true); err != nil {
				t.Errorf("export: %v", err)
				return
			}
			saved[rank] = allWeights(t, coll)
		}(r)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	if t.Failed() {
		return
	}

	plan1 := testPlan(t, 1)
	defer plan1.Close()
	comms1, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms1[0].Close()
	coll, err := NewEmbeddingCollection(plan1, comms1[0], adagrad(), &EmbeddingOptions{Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	if err := coll.LoadCheckpoint(dir, &CheckpointOptions{VerifyFirst: true, AllowPartialLoad: true}); err != nil {
		t.Fatal(err)
	}
	loaded := allWeights(t, coll)
	for i := range loaded {
		for j := range loaded[i] {
			if math.Float32bits(loaded[i][j]) != math.Float32bits(saved[0][i][j]) {
				t.Fatalf("tensor %d element %d: loaded %g, saved %g", i, j, loaded[i][j], saved[0][i][j])
			}
		}
	}
	if steps, _ := coll.NumSteps(); steps != 2 {
		t.Errorf("step counter %d, want 2", steps)
	}
	// Import the export into a fresh collection: t1's weights and state come back.
	fresh, err := NewEmbeddingCollection(plan1, comms1[0], adagrad(), &EmbeddingOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.ImportTable("t1", filepath.Join(dir, "t1.safetensors"), true); err != nil {
		t.Fatal(err)
	}
	got := allWeights(t, fresh)
	for j := range got[2] {
		if got[2][j] != saved[0][2][j] || (j < len(got[3]) && got[3][j] != saved[0][3][j]) {
			t.Fatalf("imported t1 element %d differs", j)
		}
	}
	err = fresh.LoadCheckpoint(filepath.Join(dir, "missing"), &CheckpointOptions{})
	if CodeOf(err) != ErrCodeNotFound {
		t.Errorf("missing checkpoint: %v, want ENOTFOUND", err)
	}
}
