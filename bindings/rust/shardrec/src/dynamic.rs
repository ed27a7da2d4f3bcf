//! Dynamic tables (docs/dynamic-tables.md): the config that makes a table take any 64-bit id,
//! and the per-rank statistics of such a table.
use crate::embedding::EmbeddingCollection;
use crate::{check, cstring, sys, Result};

/// What a full dynamic table does with an id it would insert (`SHARDREC_EVICTION_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Eviction {
    /// Nothing leaves: a full shard refuses new ids, which read as zeros and train nothing.
    #[default]
    None = 0,
    /// The row seen longest ago leaves first (ties: smallest id).
    Lru = 1,
    /// The row seen least often leaves first (ties: seen longest ago, then smallest id).
    Lfu = 2,
    /// Only rows not seen for more than `ttl_steps` steps may leave, longest ago first.
    Ttl = 3,
    /// The row with the lowest score the caller set leaves first (ties: smallest id); new rows
    /// score 0 ([`EmbeddingCollection::dynamic_set_scores`]).
    Score = 4,
}

/// What makes a [`crate::Table`] dynamic: its ids are any `i64`, a row is created the first
/// time training sees its id (after admission) and leaves by eviction; the table's `rows` is
/// then its capacity. Host collections (a CUDA one refuses it); every sharding type.
/// `Default` gives the C defaults (no eviction, admission at first sight).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DynamicTable {
    pub eviction: Eviction,
    /// Occurrences in training an id needs before it gets a row; 0 or 1: at first sight.
    pub admission_threshold: i32,
    /// `Eviction::Ttl` only: steps a row may go unseen before it may leave (>= 1 with TTL).
    pub ttl_steps: i64,
    /// 0: the capacity is the table's `rows`. Else the capacity in bytes of memory (the table's
    /// `rows` must then be 0), turned into slots by the planner (docs/dynamic-tables.md,
    /// "Capacity in bytes").
    pub capacity_bytes: i64,
    /// 0: admission counts never decay. Else every admission count is halved at the start of
    /// each training step whose number is a multiple of it, so an id must reach
    /// `admission_threshold` within recent steps (docs/dynamic-tables.md, "Admission"); >= 0.
    pub admission_decay_steps: i64,
}

impl DynamicTable {
    pub fn new(eviction: Eviction, admission_threshold: i32) -> DynamicTable {
        DynamicTable {
            eviction,
            admission_threshold,
            ttl_steps: 0,
            capacity_bytes: 0,
            admission_decay_steps: 0,
        }
    }

    pub(crate) fn raw(&self) -> sys::shardrec_dynamic_table_config_t {
        // SAFETY: plain data filled by init.
        let mut d: sys::shardrec_dynamic_table_config_t = unsafe { std::mem::zeroed() };
        unsafe {
            sys::shardrec_dynamic_table_config_init(
                &mut d,
                sys::SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION,
            )
        };
        d.eviction = self.eviction as i32;
        d.admission_threshold = self.admission_threshold;
        d.ttl_steps = self.ttl_steps;
        d.capacity_bytes = self.capacity_bytes;
        d.admission_decay_steps = self.admission_decay_steps;
        d
    }
}

/// This rank's part of one dynamic table ([`EmbeddingCollection::dynamic_stats`]): the rows of
/// the row blocks it holds and what training forwards did to them; or the whole table's, the
/// sums over ranks ([`EmbeddingCollection::dynamic_stats_global`]). A data-parallel table is
/// counted once: rank 0 reports its copy, every other rank zeros except the memory its own copy
/// holds (`metadata_bytes`, `capacity_bytes`); a block split into column shards is counted by the
/// rank holding its first columns. `last_*` counts are those of the last training forward,
/// `total_*` counts those since the collection was created (checkpoints do not carry them). An
/// admitted id is counted in `*_inserted` when it gets its row; `*_rejected_admission` counts
/// the distinct ids each forward turned away, summed over forwards.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DynamicTableStats {
    /// Rows (ids with a row) held here.
    pub size: i64,
    /// Slots of the row blocks held here.
    pub capacity: i64,
    /// `size / capacity`; 0 when capacity is 0.
    pub load_factor: f64,
    pub last_inserted: i64,
    pub last_evicted: i64,
    /// Distinct ids below the admission threshold.
    pub last_rejected_admission: i64,
    /// Distinct admitted ids that found no slot.
    pub last_rejected_full: i64,
    pub total_inserted: i64,
    pub total_evicted: i64,
    pub total_rejected_admission: i64,
    pub total_rejected_full: i64,
    /// Bytes of the id index, per-slot metadata and admission counts.
    pub metadata_bytes: u64,
    /// What this rank allocated for the table: every slot's row and optimizer state, each
    /// shard's zero row, and `metadata_bytes`.
    pub capacity_bytes: u64,
    /// Distinct ids without a row whose count reached the admission threshold in the last
    /// training forward (every new id at a threshold of 0 or 1); each got a row or found no
    /// slot, so this is `last_inserted + last_rejected_full`.
    pub last_admitted: i64,
    /// As `last_admitted`, summed over the forwards since creation.
    pub total_admitted: i64,
}

impl EmbeddingCollection {
    /// This rank's part of dynamic table `table`; not collective, changes nothing.
    /// `Code::Invalid` for a table that is not dynamic, `Code::NotFound` for an unknown one.
    pub fn dynamic_stats(&self, table: &str) -> Result<DynamicTableStats> {
        self.stats_with(table, |c, t, s| unsafe {
            sys::shardrec_embedding_dynamic_stats(c, t, s)
        })
    }

    /// The whole dynamic table `table`: the sums over ranks of [`dynamic_stats`]
    /// (`load_factor` from the summed `size` and `capacity`), the same on every rank.
    /// Collective: every rank of the collection calls it with the same table. A rank refusing
    /// its arguments (an unknown or fixed table) fails every rank at once (`Code::Invalid`
    /// naming it on the others); ranks naming different tables all get `Code::Invalid`.
    ///
    /// [`dynamic_stats`]: EmbeddingCollection::dynamic_stats
    pub fn dynamic_stats_global(&mut self, table: &str) -> Result<DynamicTableStats> {
        self.stats_with(table, |c, t, s| unsafe {
            sys::shardrec_embedding_dynamic_stats_global(c, t, s)
        })
    }

    fn stats_with(
        &self,
        table: &str,
        call: impl FnOnce(
            *mut sys::shardrec_embedding_t,
            *const std::os::raw::c_char,
            *mut sys::shardrec_dynamic_table_stats_t,
        ) -> sys::shardrec_status_t,
    ) -> Result<DynamicTableStats> {
        let name = cstring(table, "table")?;
        // SAFETY: plain data filled by init; valid handle and NUL-terminated name.
        let mut s: sys::shardrec_dynamic_table_stats_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_dynamic_table_stats_init(
                &mut s,
                sys::SHARDREC_DYNAMIC_TABLE_STATS_VERSION,
            )
        })?;
        check(call(self.raw, name.as_ptr(), &mut s))?;
        Ok(DynamicTableStats {
            size: s.size,
            capacity: s.capacity,
            load_factor: s.load_factor,
            last_inserted: s.last_inserted,
            last_evicted: s.last_evicted,
            last_rejected_admission: s.last_rejected_admission,
            last_rejected_full: s.last_rejected_full,
            total_inserted: s.total_inserted,
            total_evicted: s.total_evicted,
            total_rejected_admission: s.total_rejected_admission,
            total_rejected_full: s.total_rejected_full,
            metadata_bytes: s.metadata_bytes,
            capacity_bytes: s.capacity_bytes,
            last_admitted: s.last_admitted,
            total_admitted: s.total_admitted,
        })
    }
}
