// (*EmbeddingCollection).DynamicStatsGlobal at world 2: every rank gets the sums over ranks of
// DynamicStats; ranks naming different tables are all refused.
package shardrec

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestDynamicStatsGlobalSumsOverRanks(t *testing.T) {
	const dim = 4
	tables := []TableConfig{
		{Name: "dyn", Rows: 8, Dim: dim, Features: []int32{0},
			Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}},
		{Name: "dyn2", Rows: 8, Dim: dim, Features: []int32{1},
			Dynamic: &DynamicTableConfig{Eviction: EvictionLRU}},
	}
	features := []FeatureConfig{{Name: "a"}, {Name: "b"}}
	constraints := []TableConstraints{{Table: "dyn", ShardingTypes: []ShardingType{RowWise}},
		{Table: "dyn2", ShardingTypes: []ShardingType{RowWise}}}
	plan, err := NewPlan(tables, features, Topology{WorldSize: 2}, constraints)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	sgd := &OptimizerConfig{Type: OptimizerSGD, LearningRate: 0.1}
	var mu sync.Mutex
	local := make([]DynamicTableStats, 2)
	global := make([]DynamicTableStats, 2)
	onRanks(t, 2, func(rank int, c *Comm) error {
		coll, err := NewEmbeddingCollection(plan, c, sgd, nil)
		if err != nil {
			return err
		}
		defer coll.Close()
		// Each rank's ids, 12 in all over 8 slots: some evictions.
		ids := [][]int64{{1, 2, 3, 4, 5, 6}, {11, 12, 13, 14, 15, 16}}[rank]
		for step := 0; step < 2; step++ {
			lengths := []int32{int32(len(ids)), int32(len(ids))}
			out, err := coll.ForwardAlloc(&KJT{BatchSize: 1, NumFeatures: 2, Lengths: lengths,
				Values: append(append([]int64{}, ids...), ids...)})
			if err != nil {
				return err
			}
			if err := coll.Backward(out); err != nil {
				return err
			}
			for i := range ids {
				ids[i] += 100 // new ids each step
			}
		}
		l, err := coll.DynamicStats("dyn")
		if err != nil {
			return err
		}
		g, err := coll.DynamicStatsGlobal("dyn")
		if err != nil {
			return err
		}
		// Different tables on different ranks: refused on both.
		name := []string{"dyn", "dyn2"}[rank]
		if _, err := coll.DynamicStatsGlobal(name); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("different tables: %v", err)
		}
		mu.Lock()
		local[rank], global[rank] = l, g
		mu.Unlock()
		return nil
	})
	want := DynamicTableStats{
		Size:                   local[0].Size + local[1].Size,
		Capacity:               local[0].Capacity + local[1].Capacity,
		LastInserted:           local[0].LastInserted + local[1].LastInserted,
		LastEvicted:            local[0].LastEvicted + local[1].LastEvicted,
		LastRejectedAdmission:  local[0].LastRejectedAdmission + local[1].LastRejectedAdmission,
		LastRejectedFull:       local[0].LastRejectedFull + local[1].LastRejectedFull,
		TotalInserted:          local[0].TotalInserted + local[1].TotalInserted,
		TotalEvicted:           local[0].TotalEvicted + local[1].TotalEvicted,
		TotalRejectedAdmission: local[0].TotalRejectedAdmission + local[1].TotalRejectedAdmission,
		TotalRejectedFull:      local[0].TotalRejectedFull + local[1].TotalRejectedFull,
		MetadataBytes:          local[0].MetadataBytes + local[1].MetadataBytes,
		CapacityBytes:          local[0].CapacityBytes + local[1].CapacityBytes,
		LastAdmitted:           local[0].LastAdmitted + local[1].LastAdmitted,
		TotalAdmitted:          local[0].TotalAdmitted + local[1].TotalAdmitted,
	}
	want.LoadFactor = float64(want.Size) / float64(want.Capacity)
	if global[0] != want || global[1] != want {
		t.Fatalf("global stats %+v and %+v, want %+v (local %+v, %+v)", global[0], global[1], want,
			local[0], local[1])
	}
	if want.Size == 0 || want.TotalEvicted == 0 {
		t.Fatalf("nothing to sum: %+v", want)
	}
}
