//! Sharding plans: the planner over Rust configs, JSON form and placement queries.
use crate::config::{Constraints, Feature, ShardingType, Table, Topology};
use crate::{check, cstring, sys, Result};
use std::ffi::{CStr, CString};
use std::ptr;

/// One rectangle of a table on one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub row_offset: i64,
    pub rows: i64,
    pub col_offset: i32,
    pub cols: i32,
    pub rank: i32,
}

/// An immutable plan. plan.h documents every query as safe from any number of threads at
/// once, so it is `Send` and `Sync`.
pub struct Plan {
    pub(crate) raw: *mut sys::shardrec_plan_t,
}

// SAFETY: plan.h: "a shardrec_plan_t is immutable after creation; every function of this
// header may be called on the same plan from any number of threads at once (destroy excepted)".
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe { sys::shardrec_plan_destroy(self.raw) };
    }
}

pub(crate) fn take_text(text: *mut std::os::raw::c_char, len: usize) -> String {
    // SAFETY: the library returned `len` bytes at `text`, released with shardrec_free.
    let bytes = unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) };
    let s = String::from_utf8_lossy(bytes).into_owned();
    unsafe { sys::shardrec_free(text.cast()) };
    s
}

impl Plan {
    /// Runs the planner on `tables` (reading `features`) for `topology`.
    pub fn new(
        tables: &[Table],
        features: &[Feature],
        topology: &Topology,
        constraints: &[Constraints],
    ) -> Result<Plan> {
        let feature_names = features
            .iter()
            .map(|f| cstring(&f.name, "feature name"))
            .collect::<Result<Vec<_>>>()?;
        let c_features: Vec<sys::shardrec_feature_config_t> = features
            .iter()
            .zip(&feature_names)
            .map(|(f, name)| {
                let mut c: sys::shardrec_feature_config_t = unsafe { std::mem::zeroed() };
                unsafe {
                    sys::shardrec_feature_config_init(&mut c, sys::SHARDREC_FEATURE_CONFIG_VERSION)
                };
                c.name = name.as_ptr();
                c.pooling_factor = f.pooling_factor;
                c
            })
            .collect();
        let table_names = tables
            .iter()
            .map(|t| cstring(&t.name, "table name"))
            .collect::<Result<Vec<_>>>()?;
        // Named features, per-table optimizers and dynamic configs: C copies of each, alive until
        // the call.
        let read_names = tables
            .iter()
            .map(|t| {
                t.feature_names
                    .iter()
                    .map(|f| cstring(f, "feature name"))
                    .collect()
            })
            .collect::<Result<Vec<Vec<CString>>>>()?;
        let read_ptrs: Vec<Vec<*const std::os::raw::c_char>> = read_names
            .iter()
            .map(|names| names.iter().map(|n| n.as_ptr()).collect())
            .collect();
        let optimizers: Vec<Option<sys::shardrec_optimizer_config_t>> = tables
            .iter()
            .map(|t| t.optimizer.as_ref().map(|o| o.raw()))
            .collect();
        let dynamics: Vec<Option<sys::shardrec_dynamic_table_config_t>> = tables
            .iter()
            .map(|t| t.dynamic.as_ref().map(|d| d.raw()))
            .collect();
        let c_tables: Vec<sys::shardrec_table_config_t> = tables
            .iter()
            .zip(&table_names)
            .zip(read_ptrs.iter().zip(optimizers.iter().zip(&dynamics)))
            .map(|((t, name), (reads, (optimizer, dynamic)))| {
                let mut c: sys::shardrec_table_config_t = unsafe { std::mem::zeroed() };
                unsafe {
                    sys::shardrec_table_config_init(&mut c, sys::SHARDREC_TABLE_CONFIG_VERSION)
                };
                c.name = name.as_ptr();
                c.rows = t.rows;
                c.dim = t.dim;
                c.pooling = t.pooling as i32;
                c.dtype = t.dtype as i32;
                c.features = t.features.as_ptr();
                c.num_features = t.features.len();
                c.init_kind = t.init_kind;
                c.init_low = t.init_low;
                c.init_high = t.init_high;
                if !reads.is_empty() {
                    c.feature_names = reads.as_ptr();
                    c.num_feature_names = reads.len();
                }
                if let Some(o) = optimizer {
                    c.optimizer = o;
                }
                if let Some(d) = dynamic {
                    c.dynamic = d;
                }
                c
            })
            .collect();
        let constraint_names: Vec<CString> = constraints
            .iter()
            .map(|c| cstring(&c.table, "constraint table"))
            .collect::<Result<Vec<_>>>()?;
        let c_constraints: Vec<sys::shardrec_table_constraints_t> = constraints
            .iter()
            .zip(&constraint_names)
            .map(|(c, name)| {
                let mut r: sys::shardrec_table_constraints_t = unsafe { std::mem::zeroed() };
                unsafe {
                    sys::shardrec_table_constraints_init(
                        &mut r,
                        sys::SHARDREC_TABLE_CONSTRAINTS_VERSION,
                    )
                };
                r.table = name.as_ptr();
                r.sharding_types = c
                    .sharding_types
                    .iter()
                    .fold(0u32, |m, t| m | 1u32 << (*t as u32));
                r.min_partition = c.min_partition;
                if !c.ranks.is_empty() {
                    r.ranks = c.ranks.as_ptr();
                    r.num_ranks = c.ranks.len();
                }
                if !c.pooling_factors.is_empty() {
                    r.pooling_factors = c.pooling_factors.as_ptr();
                    r.num_pooling_factors = c.pooling_factors.len();
                }
                r.tier_cache_bytes = c.tier_cache_bytes;
                r.tier_hit_rate = c.tier_hit_rate;
                r.id_zipf_alpha = c.id_zipf_alpha;
                r
            })
            .collect();
        let topo = topology.raw();
        let mut out = ptr::null_mut();
        // SAFETY: every pointer refers to a vector or CString alive until the call returns.
        check(unsafe {
            sys::shardrec_plan_create(
                &mut out,
                c_tables.as_ptr(),
                c_tables.len(),
                c_features.as_ptr(),
                c_features.len(),
                &topo,
                if c_constraints.is_empty() {
                    ptr::null()
                } else {
                    c_constraints.as_ptr()
                },
                c_constraints.len(),
            )
        })?;
        Ok(Plan { raw: out })
    }

    /// Reads and validates a plan written by [`Plan::to_json`].
    pub fn from_json(text: &str) -> Result<Plan> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::shardrec_plan_from_json(&mut out, text.as_ptr().cast(), text.len()) })?;
        Ok(Plan { raw: out })
    }

    pub fn to_json(&self) -> Result<String> {
        let mut text = ptr::null_mut();
        let mut len = 0;
        check(unsafe { sys::shardrec_plan_to_json(self.raw, &mut text, &mut len) })?;
        Ok(take_text(text, len))
    }

    pub fn stats(&self) -> Result<String> {
        let mut text = ptr::null_mut();
        let mut len = 0;
        check(unsafe { sys::shardrec_plan_stats(self.raw, &mut text, &mut len) })?;
        Ok(take_text(text, len))
    }

    pub fn hash(&self) -> Result<u64> {
        let mut out = 0;
        check(unsafe { sys::shardrec_plan_hash(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn world_size(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_plan_world_size(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Ranks per node of the topology the plan was made for (node-local sharding types).
    pub fn ranks_per_node(&self) -> Result<i32> {
        let mut out = 0;
        check(unsafe { sys::shardrec_plan_ranks_per_node(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn num_tables(&self) -> Result<usize> {
        let mut out = 0;
        check(unsafe { sys::shardrec_plan_num_tables(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn num_features(&self) -> Result<usize> {
        let mut out = 0;
        check(unsafe { sys::shardrec_plan_num_features(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn table_name(&self, table: usize) -> Result<String> {
        let mut name = ptr::null();
        check(unsafe { sys::shardrec_plan_table_name(self.raw, table, &mut name) })?;
        // SAFETY: owned by the plan, which outlives this borrow.
        Ok(unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned())
    }

    pub fn feature_name(&self, feature: usize) -> Result<String> {
        let mut name = ptr::null();
        check(unsafe { sys::shardrec_plan_feature_name(self.raw, feature, &mut name) })?;
        Ok(unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned())
    }

    /// Index of the table called `name` (`Code::NotFound` when none).
    pub fn find_table(&self, name: &str) -> Result<usize> {
        let c = cstring(name, "table name")?;
        let mut out = 0;
        check(unsafe { sys::shardrec_plan_find_table(self.raw, c.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// (rows, dim) of a table.
    pub fn table_shape(&self, table: usize) -> Result<(i64, i32)> {
        let (mut rows, mut dim) = (0, 0);
        check(unsafe { sys::shardrec_plan_table_rows(self.raw, table, &mut rows) })?;
        check(unsafe { sys::shardrec_plan_table_dim(self.raw, table, &mut dim) })?;
        Ok((rows, dim))
    }

    /// Sharding type and number of shards of a table.
    pub fn table_sharding(&self, table: usize) -> Result<(ShardingType, usize)> {
        let (mut kind, mut n) = (0, 0);
        check(unsafe { sys::shardrec_plan_table_sharding(self.raw, table, &mut kind, &mut n) })?;
        let kind = ShardingType::from_raw(kind)
            .ok_or_else(|| crate::invalid(format!("unknown sharding type {kind}")))?;
        Ok((kind, n))
    }

    pub fn shard(&self, table: usize, shard: usize) -> Result<Shard> {
        let mut s: sys::shardrec_shard_t = unsafe { std::mem::zeroed() };
        check(unsafe { sys::shardrec_plan_shard(self.raw, table, shard, &mut s) })?;
        Ok(Shard {
            row_offset: s.row_offset,
            rows: s.rows,
            col_offset: s.col_offset,
            cols: s.cols,
            rank: s.rank,
        })
    }
}
