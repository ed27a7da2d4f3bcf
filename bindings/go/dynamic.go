// Dynamic tables (docs/dynamic-tables.md): the table config that makes a table take any 64-bit
// id, and the per-rank statistics of such a table.

package shardrec

import (
	"shardrec.dev/shardrec/internal/swig"
)

// Eviction is what a full dynamic table does with an id it would insert
// (shardrec_eviction_policy_t).
type Eviction int32

// Eviction policies (shardrec/config.h).
const (
	// EvictionNone: a full shard refuses new ids; they read as zeros and train nothing.
	EvictionNone Eviction = 0
	// EvictionLRU: the row seen longest ago leaves first (ties: smallest id).
	EvictionLRU Eviction = 1
	// EvictionLFU: the row seen least often leaves first (ties: seen longest ago, smallest id).
	EvictionLFU Eviction = 2
	// EvictionTTL: only rows unseen for more than TTLSteps steps may leave; otherwise as None.
	EvictionTTL Eviction = 3
	// EvictionScore: the row with the lowest score the caller set leaves first (ties: smallest
	// id); new rows score 0 ((*EmbeddingCollection).DynamicSetScores).
	EvictionScore Eviction = 4
)

// DynamicTableConfig makes a TableConfig a dynamic table: its ids are any int64, a row is
// created the first time training sees its id (after admission) and leaves by eviction; the
// table's Rows is then its capacity. Host collections (a CUDA one refuses it); every sharding
// type (docs/dynamic-tables.md).
type DynamicTableConfig struct {
	Eviction Eviction
	// AdmissionThreshold is the occurrences in training an id needs before it gets a row;
	// 0 or 1: at first sight.
	AdmissionThreshold int32
	// TTLSteps (EvictionTTL only) is how many steps a row may go unseen before it may leave.
	TTLSteps int64
	// CapacityBytes, when > 0, is the table's capacity in bytes of memory (its Rows must then be
	// 0): the planner turns it into the slots that fit (docs/dynamic-tables.md, "Capacity in
	// bytes").
	CapacityBytes int64
	// AdmissionDecaySteps, when > 0, halves every admission count at the start of each training
	// step whose number is a multiple of it, so an id must reach AdmissionThreshold within recent
	// steps (docs/dynamic-tables.md, "Admission"); 0: counts never decay.
	AdmissionDecaySteps int64
}

// newNativeDynamic fills a C dynamic table config; the caller deletes it.
func newNativeDynamic(d *DynamicTableConfig) (swig.Dynamic_table_config, error) {
	o := swig.NewDynamic_table_config()
	if err := swig.Dynamic_table_config_init(o, uint(swig.DYNAMIC_TABLE_CONFIG_VERSION)); err != nil {
		swig.DeleteDynamic_table_config(o)
		return nil, err
	}
	o.SetEviction(int(d.Eviction))
	o.SetAdmission_threshold(int(d.AdmissionThreshold))
	o.SetTtl_steps(d.TTLSteps)
	o.SetCapacity_bytes(d.CapacityBytes)
	o.SetAdmission_decay_steps(d.AdmissionDecaySteps)
	return o, nil
}

// DynamicTableStats is this rank's part of one dynamic table (DynamicStats): the rows of the row
// blocks it holds and what training forwards did to them; or the whole table's, the sums over
// ranks (DynamicStatsGlobal).
// "Last" counts are those of the last training forward, "Total" counts since creation.
type DynamicTableStats struct {
	Size                   int64 // rows (ids with a row) held here
	Capacity               int64 // slots of the row blocks held here
	LoadFactor             float64
	LastInserted           int64
	LastEvicted            int64
	LastRejectedAdmission  int64 // distinct ids below the admission threshold
	LastRejectedFull       int64 // distinct admitted ids that found no slot
	TotalInserted          int64
	TotalEvicted           int64
	TotalRejectedAdmission int64
	TotalRejectedFull      int64
	MetadataBytes          uint64 // id index, per-slot metadata and admission counts
	// CapacityBytes is what this rank allocated for the table: every slot's row and optimizer
	// state, each shard's zero row, and MetadataBytes.
	CapacityBytes uint64
	// LastAdmitted: distinct ids without a row whose count reached the admission threshold
	// (every new id at a threshold of 0 or 1); each got a row or found no slot, so it equals
	// LastInserted + LastRejectedFull. TotalAdmitted: the same since creation.
	LastAdmitted  int64
	TotalAdmitted int64
}

// DynamicStats returns this rank's part of dynamic table `table`. Not collective; an error
// (EINVAL) for a table that is not dynamic, ENOTFOUND for an unknown one.
func (e *EmbeddingCollection) DynamicStats(table string) (DynamicTableStats, error) {
	return e.dynamicStats(table, swig.Embedding_dynamic_stats)
}

// DynamicStatsGlobal returns the whole dynamic table `table`: the sums over ranks of
// DynamicStats (LoadFactor from the summed Size and Capacity), the same on every rank.
// Collective: every rank of the collection calls it with the same table. A rank refusing its
// arguments (an unknown or fixed table) fails every rank at once (EINVAL naming it on the
// others), and ranks naming different tables all get EINVAL.
func (e *EmbeddingCollection) DynamicStatsGlobal(table string) (DynamicTableStats, error) {
	return e.dynamicStats(table, swig.Embedding_dynamic_stats_global)
}

func (e *EmbeddingCollection) dynamicStats(table string,
	call func(uintptr, string, swig.Dynamic_table_stats) error) (DynamicTableStats, error) {
	if err := noNUL("table", table); err != nil {
		return DynamicTableStats{}, err
	}
	s := swig.NewDynamic_table_stats()
	defer swig.DeleteDynamic_table_stats(s)
	h, done := e.ref().acquire()
	defer done()
	if err := swig.Dynamic_table_stats_init(s, uint(swig.DYNAMIC_TABLE_STATS_VERSION)); err != nil {
		return DynamicTableStats{}, err
	}
	if err := call(h, table, s); err != nil {
		return DynamicTableStats{}, err
	}
	return DynamicTableStats{
		Size: s.GetSize(), Capacity: s.GetCapacity(), LoadFactor: s.GetLoad_factor(),
		LastInserted: s.GetLast_inserted(), LastEvicted: s.GetLast_evicted(),
		LastRejectedAdmission: s.GetLast_rejected_admission(),
		LastRejectedFull:      s.GetLast_rejected_full(),
		TotalInserted:         s.GetTotal_inserted(), TotalEvicted: s.GetTotal_evicted(),
		TotalRejectedAdmission: s.GetTotal_rejected_admission(),
		TotalRejectedFull:      s.GetTotal_rejected_full(),
		MetadataBytes:          s.GetMetadata_bytes(),
		CapacityBytes:          s.GetCapacity_bytes(),
		LastAdmitted:           s.GetLast_admitted(),
		TotalAdmitted:          s.GetTotal_admitted(),
	}, nil
}
