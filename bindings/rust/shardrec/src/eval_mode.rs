//! Evaluation mode and SCORE eviction of dynamic tables (docs/dynamic-tables.md): forwards that
//! change nothing, and the caller's eviction scores.
use crate::embedding::EmbeddingCollection;
use crate::{check, cstring, invalid, sys, Result};

impl EmbeddingCollection {
    /// Sets whether the next forwards train (`true`, the default) or evaluate (`false`), like a
    /// model's train()/eval() (`shardrec_embedding_set_training`). An evaluation forward
    /// changes nothing: a dynamic table's known ids read their rows, unknown or not yet admitted
    /// ids read zeros, and nothing is inserted, touched, admitted, evicted or marked for delta
    /// export; its backward is `Code::Usage`. Every rank must be in the same mode for a
    /// forward. Not collective. GPU collections refuse evaluation (`Code::Unsupported`).
    pub fn set_training(&mut self, training: bool) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::shardrec_embedding_set_training(self.raw, training as i32) })
    }

    /// Whether the next forwards train (`true`) or evaluate (`false`).
    pub fn is_training(&self) -> Result<bool> {
        let mut out = 0i32;
        // SAFETY: valid handle and out-pointer.
        check(unsafe { sys::shardrec_embedding_is_training(self.raw, &mut out) })?;
        Ok(out != 0)
    }

    /// Sets the eviction scores of rows of dynamic table `table` (`Eviction::Score`;
    /// `shardrec_embedding_dynamic_set_scores`): `scores[i]` (finite) for `ids[i]`. When a shard
    /// is full, the rows the forward did not see leave lowest score first, ties by smallest id;
    /// a new row scores 0. Per owner, not collective: this rank sets the ids with a row on its
    /// shards and ignores the others, so every rank may be given the same whole list. Returns
    /// how many entries named a row held here. `Code::Invalid` (nothing set) for a non-finite
    /// score, lengths that differ, or a table that is not dynamic or not `Score`;
    /// `Code::NotFound` for an unknown table.
    pub fn dynamic_set_scores(
        &mut self,
        table: &str,
        ids: &[i64],
        scores: &[f64],
    ) -> Result<usize> {
        if ids.len() != scores.len() {
            return Err(invalid(format!(
                "{} scores for {} ids",
                scores.len(),
                ids.len()
            )));
        }
        let name = cstring(table, "table")?;
        let mut set = 0usize;
        // SAFETY: valid handle and name; ids and scores hold ids.len() values, read only.
        check(unsafe {
            sys::shardrec_embedding_dynamic_set_scores(
                self.raw,
                name.as_ptr(),
                ids.as_ptr(),
                scores.as_ptr(),
                ids.len(),
                &mut set,
            )
        })?;
        Ok(set)
    }
}
