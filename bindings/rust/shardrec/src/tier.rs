//! Tiered tables (docs/disk-tier.md): the option that keeps a table's rows on this rank's disk
//! under a DRAM cache, and the per-rank statistics of such a table.
use crate::embedding::EmbeddingCollection;
use crate::{check, cstring, sys, Result};
use std::ffi::CString;

/// Makes table `table` tiered on this rank ([`EmbeddingOptions::tiers`], `shardrec_table_tier_t`):
/// its rows and optimizer state live in stores under `dir` (this rank's directory, created if
/// missing; scratch for the collection's life) and a DRAM cache of `cache_bytes` holds the hot
/// rows. Results are bit-identical to the table in memory. Host collections and fixed or dynamic,
/// not data-parallel tables only; checkpoints save and load tiered tables (in the in-memory
/// format), 2D meshes and table import refuse them.
///
/// [`EmbeddingOptions::tiers`]: crate::EmbeddingOptions::tiers
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableTier {
    pub table: String,
    pub dir: String,
    pub cache_bytes: i64,
}

/// This rank's part of one tiered table (`shardrec_tier_stats_t`), summed over its shards of it,
/// since creation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TierStats {
    pub cache_bytes: i64,
    pub cache_slots: i64,
    pub cache_rows: i64,
    /// Distinct rows of a forward found in the cache.
    pub hits: i64,
    /// Distinct rows of a forward that were not (read or initialised).
    pub misses: i64,
    pub hit_rate: f64,
    pub disk_reads: i64,
    pub disk_read_bytes: i64,
    pub disk_bytes: i64,
    /// Misses served from the write-back queue.
    pub queue_reads: i64,
    /// Misses of rows never written (their initial values).
    pub initialised: i64,
    /// Misses read one batch ahead (pipelined input distribution).
    pub prefetched: i64,
    /// Dirty rows evicted to the write-back queue.
    pub write_backs: i64,
    /// Records the write-back thread stored (the collection's queue).
    pub written: i64,
    pub queue_depth: i64,
    pub queue_max_depth: i64,
    pub steps: i64,
    /// Seconds forwards waited for rows (an unfinished prefetch plus misses read at the forward).
    pub exposed_fetch_seconds: f64,
    pub last_exposed_fetch_seconds: f64,
}

/// The C tiers of `tiers`: the strings they point to live in `names`, which must outlive them.
pub(crate) fn raw_tiers(
    tiers: &[TableTier],
    names: &mut Vec<CString>,
) -> Result<Vec<sys::shardrec_table_tier_t>> {
    let mut out = Vec::with_capacity(tiers.len());
    for t in tiers {
        let table = cstring(&t.table, "tier table")?;
        let dir = cstring(&t.dir, "tier dir")?;
        // SAFETY: plain data filled by init.
        let mut raw: sys::shardrec_table_tier_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_table_tier_init(&mut raw, sys::SHARDREC_TABLE_TIER_VERSION)
        })?;
        // The CStrings' buffers do not move when the CStrings move into `names`.
        raw.table = table.as_ptr();
        raw.dir = dir.as_ptr();
        raw.cache_bytes = t.cache_bytes;
        names.push(table);
        names.push(dir);
        out.push(raw);
    }
    Ok(out)
}

impl EmbeddingCollection {
    /// This rank's statistics of tiered table `table`. Not collective; `Code::Invalid` for a
    /// table this rank does not hold tiered, `Code::NotFound` for a table not in the plan.
    pub fn tier_stats(&self, table: &str) -> Result<TierStats> {
        let name = cstring(table, "table")?;
        // SAFETY: plain data filled by init; valid handle and NUL-terminated name.
        let mut s: sys::shardrec_tier_stats_t = unsafe { std::mem::zeroed() };
        check(unsafe { sys::shardrec_tier_stats_init(&mut s, sys::SHARDREC_TIER_STATS_VERSION) })?;
        check(unsafe { sys::shardrec_embedding_tier_stats(self.raw, name.as_ptr(), &mut s) })?;
        Ok(TierStats {
            cache_bytes: s.cache_bytes,
            cache_slots: s.cache_slots,
            cache_rows: s.cache_rows,
            hits: s.hits,
            misses: s.misses,
            hit_rate: s.hit_rate,
            disk_reads: s.disk_reads,
            disk_read_bytes: s.disk_read_bytes,
            disk_bytes: s.disk_bytes,
            queue_reads: s.queue_reads,
            initialised: s.initialised,
            prefetched: s.prefetched,
            write_backs: s.write_backs,
            written: s.written,
            queue_depth: s.queue_depth,
            queue_max_depth: s.queue_max_depth,
            steps: s.steps,
            exposed_fetch_seconds: s.exposed_fetch_seconds,
            last_exposed_fetch_seconds: s.last_exposed_fetch_seconds,
        })
    }
}
