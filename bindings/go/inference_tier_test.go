// Tables served from the checkpoint's files through a row cache, through the Go binding: the
// same bits as the checkpoint opened in memory, across a reload, with the cache's statistics;
// and the planner's tier constraints and disk calibration.
package shardrec

import (
	"math"
	"strings"
	"testing"
)

func TestInferenceTiers(t *testing.T) {
	fx := trainForServing(t)
	tiers := map[string]int64{"t0": 200, "t1": 200, "t2": 200} // a row or two each
	for _, storage := range []ServingStorage{ServingAsTrained, ServingInt8} {
		mem, err := OpenInference(fx.dir1, &InferenceOptions{DefaultStorage: storage})
		if err != nil {
			t.Fatal(err)
		}
		disk, err := OpenInference(fx.dir1, &InferenceOptions{DefaultStorage: storage, Tiers: tiers})
		if err != nil {
			t.Fatal(err)
		}
		for rank := 0; rank < 2; rank++ {
			want, _ := lookupAlloc(t, mem, batch(requestStep, rank, 1))
			got, _ := lookupAlloc(t, disk, batch(requestStep, rank, 1))
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("storage %d rank %d element %d: %v from disk, %v in memory", storage,
						rank, i, got[i], want[i])
				}
			}
		}
		s, err := disk.TierStats("t1")
		if err != nil {
			t.Fatal(err)
		}
		if s.ModelVersion != 1 || s.Misses == 0 || s.DiskReads <= 0 || s.CacheSlots == 0 ||
			s.CacheBytes > 200 || s.CacheRows > s.CacheSlots {
			t.Fatalf("stats %+v", s)
		}
		if err := disk.Reload(fx.dir2); err != nil {
			t.Fatal(err)
		}
		if s, err = disk.TierStats("t1"); err != nil || s.ModelVersion != 2 || s.Hits+s.Misses != 0 {
			t.Fatalf("after a reload: %+v, %v", s, err)
		}
		if _, err := mem.TierStats("t1"); err == nil {
			t.Fatal("TierStats of a table in memory succeeded")
		}
		mem.Close()
		disk.Close()
	}
	if _, err := OpenInference(fx.dir1, &InferenceOptions{Tiers: map[string]int64{"nope": 4096}}); err == nil ||
		!strings.Contains(err.Error(), "nope") {
		t.Fatalf("a tier of an unknown table: %v", err)
	}
	if _, err := OpenInference(fx.dir1, &InferenceOptions{Tiers: map[string]int64{"t0": 1}}); err == nil {
		t.Fatal("a cache of no row was accepted")
	}
}

func TestPlanTiers(t *testing.T) {
	tables := []TableConfig{{Name: "big", Rows: 10_000_000, Dim: 64, Features: []int32{0}}}
	features := []FeatureConfig{{Name: "f", PoolingFactor: 20}}
	topo := Topology{WorldSize: 1, MemoryBytes: 4 << 30, Optimizer: OptimizerAdagrad}
	if _, err := NewPlan(tables, features, topo, nil); err == nil {
		t.Fatal("5 GiB of rows and state planned in 4 GiB of memory")
	}
	tier := []TableConstraints{{Table: "big", TierCacheBytes: 512 << 20, IDZipfAlpha: 1.05}}
	plan, err := NewPlan(tables, features, topo, tier)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := plan.Stats()
	plan.Close()
	if err != nil || !strings.Contains(stats, "cache 512.00 MiB") {
		t.Fatalf("stats %q, %v", stats, err)
	}
	small := topo
	small.DiskCapacity = 10 << 30
	if _, err := NewPlan(tables, features, small, tier); err == nil {
		t.Fatal("11 GiB of records planned on a 10 GiB disk")
	}
	iops, _, err := topo.CalibrateDisk(t.TempDir(), 16<<20, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	if iops < 100 || topo.DiskReadIOPS != iops || topo.DiskReadBandwidth <= 0 || topo.DiskCapacity == 0 {
		t.Fatalf("calibrated %v: %+v", iops, topo)
	}
}
