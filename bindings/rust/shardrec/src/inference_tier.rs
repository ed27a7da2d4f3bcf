//! The row cache of a table served from the checkpoint's files (docs/disk-tier.md, "Serving a
//! tiered checkpoint"): [`InferenceOptions::tiers`](crate::InferenceOptions) makes one, and
//! [`Inference::tier_stats`] reads its statistics.

use crate::{check, cstring, sys, Inference, Result};

/// The row cache of a tiered table in the version that answered
/// (`shardrec_serving_tier_stats_t`); counts start at 0 with each version.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServingTierStats {
    /// The handle's version these figures belong to.
    pub model_version: u64,
    pub cache_bytes: i64,
    pub cache_slots: i64,
    pub cache_rows: i64,
    /// Distinct rows of a request found in the cache.
    pub hits: i64,
    /// Distinct rows of a request read from the checkpoint's files.
    pub misses: i64,
    pub hit_rate: f64,
    /// Reads issued to the files: a request's misses are read as one batch, so rows lying close
    /// share a read (fewer reads than misses).
    pub disk_reads: i64,
    pub disk_read_bytes: i64,
}

impl Inference {
    /// The row cache statistics of tiered table `table` in the current version
    /// (`shardrec_inference_tier_stats`); `Code::Invalid` for a table held in memory,
    /// `Code::NotFound` for an unknown table.
    pub fn tier_stats(&self, table: &str) -> Result<ServingTierStats> {
        let name = cstring(table, "table")?;
        // SAFETY: plain data filled by init; valid handle and NUL-terminated name.
        let mut s: sys::shardrec_serving_tier_stats_t = unsafe { std::mem::zeroed() };
        check(unsafe {
            sys::shardrec_serving_tier_stats_init(&mut s, sys::SHARDREC_SERVING_TIER_STATS_VERSION)
        })?;
        check(unsafe { sys::shardrec_inference_tier_stats(self.raw, name.as_ptr(), &mut s) })?;
        Ok(ServingTierStats {
            model_version: s.model_version,
            cache_bytes: s.cache_bytes,
            cache_slots: s.cache_slots,
            cache_rows: s.cache_rows,
            hits: s.hits,
            misses: s.misses,
            hit_rate: s.hit_rate,
            disk_reads: s.disk_reads,
            disk_read_bytes: s.disk_read_bytes,
        })
    }
}
