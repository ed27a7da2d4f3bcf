// Serving tables from a checkpoint's files through a row cache (docs/disk-tier.md, "Serving a
// tiered checkpoint"): InferenceOptions.Tiers and the cache's statistics.

package shardrec

import (
	"fmt"
	"sort"
	"strings"

	"shardrec.dev/shardrec/internal/swig"
)

// ServingTierStats is the row cache of a table served from the checkpoint's files, in the
// version that answered (shardrec_serving_tier_stats_t); counts start at 0 with each version.
type ServingTierStats struct {
	ModelVersion                      uint64
	CacheBytes, CacheSlots, CacheRows int64
	Hits, Misses                      int64 // distinct rows of a request found in the cache, and not
	HitRate                           float64
	DiskReads, DiskReadBytes          int64 // reads issued to the files (misses batched), their bytes
}

// tierLists gives the tier names (sorted, so the same options make the same C call) and their
// cache sizes.
func tierLists(tiers map[string]int64) ([]string, []int64, error) {
	names := make([]string, 0, len(tiers))
	for name := range tiers {
		if strings.ContainsAny(name, "\n\x00") {
			return nil, nil, &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"tier table name %q holds a newline or NUL", name)}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	bytes := make([]int64, len(names))
	for i, name := range names {
		if err := nonNegative("tier cache bytes of table "+name, tiers[name]); err != nil {
			return nil, nil, err
		}
		bytes[i] = tiers[name]
	}
	return names, bytes, nil
}

// TierStats returns the row cache statistics of tiered table `table` in the current version
// (shardrec_inference_tier_stats); an error (ErrCodeInvalid) for a table held in memory.
func (inf *Inference) TierStats(table string) (ServingTierStats, error) {
	if err := noNUL("table", table); err != nil {
		return ServingTierStats{}, err
	}
	s := swig.NewServing_tier_stats()
	defer swig.DeleteServing_tier_stats(s)
	if err := swig.Serving_tier_stats_init(s, uint(swig.SERVING_TIER_STATS_VERSION)); err != nil {
		return ServingTierStats{}, err
	}
	if err := inf.use(func(h uintptr) error { return swig.Inference_tier_stats(h, table, s) }); err != nil {
		return ServingTierStats{}, err
	}
	return ServingTierStats{
		ModelVersion: s.GetModel_version(), CacheBytes: s.GetCache_bytes(),
		CacheSlots: s.GetCache_slots(), CacheRows: s.GetCache_rows(), Hits: s.GetHits(),
		Misses: s.GetMisses(), HitRate: s.GetHit_rate(), DiskReads: s.GetDisk_reads(),
		DiskReadBytes: s.GetDisk_read_bytes(),
	}, nil
}

// CalibrateDisk measures the disk under dir for tiered tables
// (shardrec_topology_calibrate_disk: a scratch file of fileBytes, 0 meaning 256 MiB, read at
// random and in sequence for about timeBudget seconds, 0 meaning 1) and writes DiskReadIOPS,
// DiskReadBandwidth and, when 0, DiskCapacity (each the machine's figure over its ranks). It
// returns the machine's random reads per second and whether the reads bypassed the page cache.
// Set WorldSize and RanksPerNode first. On error the topology is unchanged.
func (topo *Topology) CalibrateDisk(dir string, fileBytes uint64, timeBudget float64) (float64, bool, error) {
	if err := noNUL("dir", dir); err != nil {
		return 0, false, err
	}
	t := swig.NewTopology_t()
	defer swig.DeleteTopology_t(t)
	if err := swig.Topology_init(t, uint(swig.TOPOLOGY_VERSION)); err != nil {
		return 0, false, err
	}
	topo.setC(t)
	iops := make([]float64, 1)
	direct := make([]int32, 1)
	if err := swig.Topology_calibrate_disk(t, dir, fileBytes, timeBudget, iops, direct); err != nil {
		return 0, false, err
	}
	topo.DiskReadIOPS = t.GetDisk_read_iops()
	topo.DiskReadBandwidth = t.GetDisk_read_bandwidth()
	topo.DiskCapacity = t.GetDisk_capacity()
	return iops[0], direct[0] != 0, nil
}
