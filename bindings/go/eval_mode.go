// Evaluation mode and SCORE eviction of dynamic tables (docs/dynamic-tables.md, "Evaluation"
// and "Scores"): forwards that change nothing, and the caller's eviction scores.

package shardrec

import (
	"fmt"

	"shardrec.dev/shardrec/internal/swig"
)

// SetTraining sets whether the next forwards train (true, the default) or evaluate (false),
// like a model's train()/eval(). An evaluation forward changes nothing: a dynamic table's known
// ids read their rows, unknown or not yet admitted ids read zeros, and nothing is inserted,
// touched, admitted, evicted or marked for delta export; its backward is refused (ErrCodeUsage).
// Every rank must be in the same mode for a forward. Not collective. GPU collections refuse
// evaluation (ErrCodeUnsupported).
func (e *EmbeddingCollection) SetTraining(training bool) error {
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_set_training(h, boolInt(training))
}

// IsTraining says whether the next forwards train (true) or evaluate (false).
func (e *EmbeddingCollection) IsTraining() (bool, error) {
	h, done := e.ref().acquire()
	defer done()
	out := []int32{0}
	err := swig.Embedding_is_training(h, out)
	return out[0] != 0, err
}

// DynamicSetScores sets the eviction scores of rows of dynamic table `table` (eviction
// EvictionScore): scores[i] for ids[i], finite. When a shard is full, the rows the forward did
// not see leave lowest score first, ties by smallest id; a new row scores 0. Per owner, not
// collective: this rank sets the ids that have a row on its shards and ignores the others, so
// every rank may be given the same whole list. Returns how many entries named a row held here.
// ErrCodeInvalid (nothing set) for a non-finite score, a table that is not dynamic or not
// EvictionScore, or len(scores) != len(ids); ErrCodeNotFound for an unknown table.
func (e *EmbeddingCollection) DynamicSetScores(table string, ids []int64,
	scores []float64) (int, error) {
	if err := noNUL("table", table); err != nil {
		return 0, err
	}
	h, done := e.ref().acquire()
	defer done()
	if len(ids) != len(scores) {
		return 0, &Error{Code: ErrCodeInvalid,
			Message: fmt.Sprintf("%d scores for %d ids", len(scores), len(ids))}
	}
	set := []uint64{0}
	err := swig.Embedding_dynamic_set_scores(h, table, ids, scores, int64(len(ids)), set)
	return int(set[0]), err
}
