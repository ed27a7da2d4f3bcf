// Row deltas applied to a serving handle (shardrec_inference_apply_delta): the replay of a
// dynamic table's delta export, or row updates of a fixed table, as the next version.

package shardrec

import (
	"fmt"

	"shardrec.dev/shardrec/internal/swig"
)

// ApplyDelta publishes table with rows upserted and tombstones removed as the next version,
// atomically, while lookups run (requests started before it finish on the old version), and
// returns the new version number. Rows[i*dim:(i+1)*dim] is the row of IDs[i] (fp32, converted to
// the table's storage type). A dynamic table takes any ids (each at most once, none also a
// tombstone); a fixed table takes row indices in [0, rows) and no tombstones. Nothing changes on
// an error. Safe from any goroutine, with lookups; one delta or reload at a time per handle.
func (inf *Inference) ApplyDelta(table string, ids []int64, rows []float32,
	tombstones []int64) (uint64, error) {
	return inf.applyDelta(table, ids, rows, tombstones, 0)
}

// applyDelta is ApplyDelta with the delta's flags: shardrec_inference_apply_delta without any,
// shardrec_inference_apply_delta_ext with some.
func (inf *Inference) applyDelta(table string, ids []int64, rows []float32, tombstones []int64,
	flags uint) (uint64, error) {
	if err := noNUL("table", table); err != nil {
		return 0, err
	}
	version := make([]uint64, 1)
	err := inf.use(func(h uintptr) error {
		dim, found, err := inferenceTableDim(h, table)
		if err != nil {
			return err
		}
		if !found {
			// Let the library name the unknown table; it reads no row.
			return swig.Inference_apply_delta_ext(h, table, nil, nil, 0, nil, flags, version)
		}
		if len(rows) != len(ids)*dim {
			return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"%d row values for %d ids of table '%s' (dim %d)", len(rows), len(ids), table, dim)}
		}
		if flags == 0 {
			return swig.Inference_apply_delta(h, table, ids, rows, int64(len(ids)), tombstones, version)
		}
		return swig.Inference_apply_delta_ext(h, table, ids, rows, int64(len(ids)), tombstones,
			flags, version)
	})
	return version[0], err
}

// ApplyDynamicDelta replays a training collection's delta export (EmbeddingCollection.DynamicDelta)
// onto table as the next version (shardrec_inference_apply_delta_ext with the delta's flags): its
// rows upserted, its tombstones removed; a Full delta's rows become the table's only rows, every
// other id removed, so the served table equals the training one whatever the handle held before.
func (inf *Inference) ApplyDynamicDelta(table string, d *DynamicDelta) (uint64, error) {
	if err := noNUL("table", table); err != nil {
		return 0, err
	}
	if d == nil {
		return 0, &Error{Code: ErrCodeInvalid, Message: "nil DynamicDelta"}
	}
	return inf.applyDelta(table, d.IDs, d.Rows, d.Tombstones, d.flags())
}

// inferenceTableDim finds table's width among the handle's tables (names and dims do not change
// across versions).
func inferenceTableDim(h uintptr, table string) (int, bool, error) {
	n := make([]uint64, 1)
	if err := swig.Inference_num_tables(h, n); err != nil {
		return 0, false, err
	}
	rows, dim, storage := make([]int64, 1), make([]int32, 1), make([]int32, 1)
	for i := uint64(0); i < n[0]; i++ {
		var name string
		if err := swig.Inference_table_info(h, int64(i), &name, rows, dim, storage); err != nil {
			return 0, false, err
		}
		if name == table {
			return int(dim[0]), true, nil
		}
	}
	return 0, false, nil
}
