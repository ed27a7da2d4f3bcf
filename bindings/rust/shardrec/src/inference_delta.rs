//! Row deltas applied to a serving handle (`shardrec_inference_apply_delta`): the replay of a
//! dynamic table's delta export, or row updates of a fixed table, as the next version.
use crate::delta_export::DynamicDelta;
use crate::inference::Inference;
use crate::{check, cstring, invalid, sys, Result};
use std::ptr;

impl Inference {
    /// Publishes `table` with `rows` upserted and `tombstones` removed as the next version,
    /// atomically, while lookups run (requests started before it finish on the old version),
    /// and returns the new version number. `rows[i * dim..(i + 1) * dim]` is the row of
    /// `ids[i]` (fp32, converted to the table's storage type). A dynamic table takes any ids
    /// (each at most once, none also a tombstone); a fixed table takes row indices in
    /// `[0, rows)` and no tombstones. Nothing changes on an error (`Invalid`; `NotFound` for an
    /// unknown table; `Usage` while a reload or another delta runs). Any thread, with lookups.
    pub fn apply_delta(
        &self,
        table: &str,
        ids: &[i64],
        rows: &[f32],
        tombstones: &[i64],
    ) -> Result<u64> {
        self.apply(table, ids, rows, tombstones, 0)
    }

    /// The delta with `flags` (0 or `SHARDREC_DELTA_FULL`): `shardrec_inference_apply_delta`
    /// without any, `shardrec_inference_apply_delta_ext` with some.
    fn apply(
        &self,
        table: &str,
        ids: &[i64],
        rows: &[f32],
        tombstones: &[i64],
        flags: u32,
    ) -> Result<u64> {
        let name = cstring(table, "table")?;
        let mut dim = None; // names and dims stay across versions
        for i in 0..self.num_tables()? {
            let t = self.table(i)?;
            if t.name == table {
                dim = Some(t.dim as usize);
            }
        }
        let mut version = 0u64;
        let Some(dim) = dim else {
            // Let the library name the unknown table; it reads no row.
            // SAFETY: valid handle and name; no rows.
            check(unsafe {
                sys::shardrec_inference_apply_delta_ext(
                    self.raw,
                    name.as_ptr(),
                    ptr::null(),
                    ptr::null(),
                    0,
                    ptr::null(),
                    0,
                    flags,
                    &mut version,
                )
            })?;
            return Ok(version);
        };
        if rows.len() != ids.len() * dim {
            return Err(invalid(format!(
                "{} row values for {} ids of table '{table}' (dim {dim})",
                rows.len(),
                ids.len()
            )));
        }
        // SAFETY: ids holds num_rows ids, rows num_rows x dim floats (checked above), tombstones
        // num_tombstones ids; all read during the call only.
        check(unsafe {
            if flags == 0 {
                sys::shardrec_inference_apply_delta(
                    self.raw,
                    name.as_ptr(),
                    ids.as_ptr(),
                    rows.as_ptr(),
                    ids.len(),
                    tombstones.as_ptr(),
                    tombstones.len(),
                    &mut version,
                )
            } else {
                sys::shardrec_inference_apply_delta_ext(
                    self.raw,
                    name.as_ptr(),
                    ids.as_ptr(),
                    rows.as_ptr(),
                    ids.len(),
                    tombstones.as_ptr(),
                    tombstones.len(),
                    flags,
                    &mut version,
                )
            }
        })?;
        Ok(version)
    }

    /// Replays a training collection's delta export
    /// ([`crate::EmbeddingCollection::dynamic_delta`]) onto `table` as the next version
    /// (`shardrec_inference_apply_delta_ext` with the delta's flags): its rows upserted, its
    /// tombstones removed; a [`DynamicDelta::full`] delta's rows become the table's only rows,
    /// every other id removed, so the served table equals the training one whatever the handle
    /// held before.
    pub fn apply_dynamic_delta(&self, table: &str, delta: &DynamicDelta) -> Result<u64> {
        self.apply(
            table,
            &delta.ids,
            &delta.rows,
            &delta.tombstones,
            delta.flags(),
        )
    }
}
