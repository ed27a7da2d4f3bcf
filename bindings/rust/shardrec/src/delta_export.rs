//! Delta export of dynamic tables (docs/dynamic-tables.md, "Delta export"): the mark and the
//! rows changed and ids that left since it, and whether a load replaced the table, for an online
//! serving copy.
use crate::embedding::EmbeddingCollection;
use crate::{check, cstring, invalid, sys, Code, Result};

/// A dynamic table's changes since its mark, the same on every rank: `ids` ascending with their
/// current rows (`rows[i * dim..(i + 1) * dim]` for `ids[i]`, widened to `f32`) and
/// `tombstones`, the ids that left since the mark (evicted, or held before a checkpoint load
/// that lacks them) and have no row now. Replaying it (upsert each row, erase each tombstone)
/// onto the table as it was at the mark gives the table as it is.
///
/// `full` (`SHARDREC_DELTA_FULL`) says a checkpoint load replaced the table since the mark:
/// `ids` are then every row it holds, and [`crate::Inference::apply_dynamic_delta`] makes them
/// the served table's only rows, so a serving copy in any state (say, following a trainer that
/// restarted from a checkpoint) ends equal to the training table. `false` for an ordinary delta.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DynamicDelta {
    pub dim: usize,
    pub ids: Vec<i64>,
    pub rows: Vec<f32>,
    pub tombstones: Vec<i64>,
    pub full: bool,
}

/// `SHARDREC_DELTA_FULL` (common.h), the bit of a delta's flags that `full` stands for.
pub(crate) const DELTA_FULL: u32 = sys::shardrec_delta_flag_SHARDREC_DELTA_FULL;

impl DynamicDelta {
    /// The row of `ids[i]`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.rows[i * self.dim..(i + 1) * self.dim]
    }

    /// The flags `shardrec_inference_apply_delta_ext` takes for this delta.
    pub(crate) fn flags(&self) -> u32 {
        if self.full {
            DELTA_FULL
        } else {
            0
        }
    }
}

impl EmbeddingCollection {
    /// Starts a new delta period of dynamic table `table` (`shardrec_embedding_dynamic_mark`):
    /// forgets the rows changed, the ids that left and whether a checkpoint load replaced the
    /// table ([`DynamicDelta::full`]) before, and tracks them from now on (tracking is off until
    /// the first mark). Not collective, but every rank must mark between the same two
    /// training steps. `Code::Invalid` for a table that is not dynamic, `Code::NotFound` for an
    /// unknown one.
    pub fn dynamic_mark(&mut self, table: &str) -> Result<()> {
        let name = cstring(table, "table")?;
        // SAFETY: valid handle and NUL-terminated name.
        check(unsafe { sys::shardrec_embedding_dynamic_mark(self.raw, name.as_ptr()) })
    }

    /// The whole dynamic table's changes since the marks, on every rank
    /// (`shardrec_embedding_dynamic_delta_ext`; collective: every rank calls it),
    /// [`DynamicDelta::full`] when a checkpoint load replaced the table since the marks. The
    /// marks stay; call [`EmbeddingCollection::dynamic_mark`] to start the next period. Changes
    /// nothing in the collection. `Code::Usage` (on every rank) when a rank has not marked the
    /// table.
    pub fn dynamic_delta(&mut self, table: &str) -> Result<DynamicDelta> {
        let name = cstring(table, "table")?;
        let (mut num_rows, mut num_tombstones, mut flags) = (0usize, 0usize, 0u32);
        // Two collective calls on every rank alike: the sizes, then the fill; nothing trains in
        // between, so both see one delta. An unknown table fails the first call, gathering
        // nothing.
        // SAFETY: valid handle and name; zero capacities with NULL buffers ask for the sizes.
        let sized = check(unsafe {
            sys::shardrec_embedding_dynamic_delta_ext(
                self.raw,
                name.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                0,
                &mut num_rows,
                &mut num_tombstones,
                &mut flags,
            )
        });
        let known = self.shapes.get(table).map(|(_, d)| *d as usize);
        let dim = known.unwrap_or(0);
        let full = flags & DELTA_FULL != 0;
        match sized {
            Ok(()) => {
                return Ok(DynamicDelta {
                    dim,
                    full,
                    ..Default::default()
                })
            }
            Err(e) if e.code() != Code::Invalid || (num_rows == 0 && num_tombstones == 0) => {
                return Err(e)
            }
            Err(_) => {}
        }
        if known.is_none() {
            // Rows are sized by the plan's width; without it C would write past them.
            return Err(invalid(format!("no width known for table '{table}'")));
        }
        let mut d = DynamicDelta {
            dim,
            ids: vec![0; num_rows],
            rows: vec![0.0; num_rows * dim],
            tombstones: vec![0; num_tombstones],
            full,
        };
        // SAFETY: ids holds num_rows, rows num_rows x dim (the table's width), tombstones
        // num_tombstones; the library writes at most that.
        check(unsafe {
            sys::shardrec_embedding_dynamic_delta_ext(
                self.raw,
                name.as_ptr(),
                d.ids.as_mut_ptr(),
                d.rows.as_mut_ptr(),
                num_rows,
                d.tombstones.as_mut_ptr(),
                num_tombstones,
                &mut num_rows,
                &mut num_tombstones,
                &mut flags,
            )
        })?;
        d.full = flags & DELTA_FULL != 0;
        Ok(d)
    }
}
