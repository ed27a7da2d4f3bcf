// Tiered tables (docs/disk-tier.md): the option that keeps a table's rows on this rank's disk
// under a DRAM cache, and the per-rank statistics of such a table.

package shardrec

import (
	"shardrec.dev/shardrec/internal/swig"
)

// TableTier makes table Table tiered on this rank (EmbeddingOptions.Tiers,
// shardrec_table_tier_t): its rows and optimizer state live in stores under Dir (this rank's
// directory, created if missing; scratch for the collection's life) and a DRAM cache of
// CacheBytes holds the hot rows. Results are bit-identical to the table in memory. Host
// collections and fixed or dynamic, not data-parallel tables only; checkpoints save and load
// tiered tables (in the in-memory format), 2D meshes and table import refuse them.
type TableTier struct {
	Table      string
	Dir        string
	CacheBytes int64
}

// TierStats is this rank's part of one tiered table (shardrec_tier_stats_t), summed over its
// shards of it, since creation.
type TierStats struct {
	CacheBytes, CacheSlots, CacheRows   int64
	Hits, Misses                        int64 // distinct rows of a forward found in the cache, and not
	HitRate                             float64
	DiskReads, DiskReadBytes, DiskBytes int64
	QueueReads, Initialised, Prefetched int64 // misses from the write-back queue, never written, read ahead
	WriteBacks, Written                 int64 // dirty rows evicted; records the writer stored
	QueueDepth, QueueMaxDepth           int64
	Steps                               int64
	// Seconds forwards waited for rows (an unfinished prefetch plus misses read at the forward),
	// in total and in the last forward.
	ExposedFetchSeconds, LastExposedFetchSeconds float64
}

// applyTiers fills a C tier list for eo; the caller frees it after the create call.
func applyTiers(tiers []TableTier, eo swig.Embedding_options) (uintptr, error) {
	list := swig.Bind_tiers_new()
	for _, t := range tiers {
		if err := noNUL("tier table", t.Table); err != nil {
			swig.Bind_tiers_free(list)
			return 0, err
		}
		if err := noNUL("tier dir", t.Dir); err != nil {
			swig.Bind_tiers_free(list)
			return 0, err
		}
		if err := swig.Bind_tiers_add(list, t.Table, t.Dir, t.CacheBytes); err != nil {
			swig.Bind_tiers_free(list)
			return 0, err
		}
	}
	if err := swig.Bind_tiers_apply(list, eo); err != nil {
		swig.Bind_tiers_free(list)
		return 0, err
	}
	return list, nil
}

// TierStats returns this rank's statistics of tiered table `table`. Not collective; an error
// (EINVAL) for a table this rank does not hold tiered, (ENOTFOUND) for a table not in the plan.
func (e *EmbeddingCollection) TierStats(table string) (TierStats, error) {
	if err := noNUL("table", table); err != nil {
		return TierStats{}, err
	}
	s := swig.NewTier_stats()
	defer swig.DeleteTier_stats(s)
	h, done := e.ref().acquire()
	defer done()
	if err := swig.Tier_stats_init(s, uint(swig.TIER_STATS_VERSION)); err != nil {
		return TierStats{}, err
	}
	if err := swig.Embedding_tier_stats(h, table, s); err != nil {
		return TierStats{}, err
	}
	return TierStats{
		CacheBytes: s.GetCache_bytes(), CacheSlots: s.GetCache_slots(), CacheRows: s.GetCache_rows(),
		Hits: s.GetHits(), Misses: s.GetMisses(), HitRate: s.GetHit_rate(),
		DiskReads: s.GetDisk_reads(), DiskReadBytes: s.GetDisk_read_bytes(),
		DiskBytes: s.GetDisk_bytes(), QueueReads: s.GetQueue_reads(),
		Initialised: s.GetInitialised(), Prefetched: s.GetPrefetched(),
		WriteBacks: s.GetWrite_backs(), Written: s.GetWritten(), QueueDepth: s.GetQueue_depth(),
		QueueMaxDepth: s.GetQueue_max_depth(), Steps: s.GetSteps(),
		ExposedFetchSeconds:     s.GetExposed_fetch_seconds(),
		LastExposedFetchSeconds: s.GetLast_exposed_fetch_seconds(),
	}, nil
}
