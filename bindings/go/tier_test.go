package shardrec

// A tiered table through the Go binding trains to the bits of the same table in memory, with a
// cache of a few rows, and its statistics count the cache's work.

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestTieredTableMatchesMemory(t *testing.T) {
	plan := testPlan(t, 1)
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	dir := filepath.Join(t.TempDir(), "tiers")
	defer os.RemoveAll(dir)
	run := func(opts *EmbeddingOptions) ([]float32, *EmbeddingCollection) {
		coll, err := NewEmbeddingCollection(plan, comms[0], adagrad(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 5; step++ {
			if err := trainStep(coll, step, 0, 1); err != nil {
				t.Fatal(err)
			}
		}
		w := make([]float32, tableRows[0]*int64(tableDims[0]))
		if err := coll.GetWeights("t0", w); err != nil {
			t.Fatal(err)
		}
		return w, coll
	}
	memory, mc := run(&EmbeddingOptions{Seed: 3})
	mc.Close()
	// t0: 8 fp32 columns and 8 Adagrad state floats, 32 bytes of metadata: 96 bytes a row; 12 rows
	// (a batch has at most 12 ids of it).
	tiered, tc := run(&EmbeddingOptions{Seed: 3,
		Tiers: []TableTier{{Table: "t0", Dir: dir, CacheBytes: 12 * 96}}})
	defer tc.Close()
	for i := range memory {
		if math.Float32bits(memory[i]) != math.Float32bits(tiered[i]) {
			t.Fatalf("weight %d: tiered %v, memory %v", i, tiered[i], memory[i])
		}
	}
	st, err := tc.TierStats("t0")
	if err != nil {
		t.Fatal(err)
	}
	if st.CacheSlots != 12 || st.Steps != 5 || st.Misses <= st.CacheSlots || st.WriteBacks == 0 {
		t.Errorf("stats do not show an evicting cache of 12 rows over 5 steps: %+v", st)
	}
	if _, err := tc.TierStats("t1"); err == nil {
		t.Error("stats of a table that is not tiered were accepted")
	}
}
