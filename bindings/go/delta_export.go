// Delta export of dynamic tables (docs/dynamic-tables.md, "Delta export"): the mark and the
// rows changed and ids evicted since it, for an online serving copy.

package shardrec

import (
	"shardrec.dev/shardrec/internal/swig"
)

// DynamicDelta is a dynamic table's changes since its mark, the same on every rank: IDs
// (ascending) with their current rows, Rows[i*Dim:(i+1)*Dim] for IDs[i], widened to float32,
// and Tombstones, the ids that left since the mark (evicted, or held before a checkpoint load
// that lacks them) and have no row now. Replaying it (upsert each row, erase each tombstone) onto
// the table as it was at the mark gives the table as it is.
//
// Full (SHARDREC_DELTA_FULL) says a checkpoint load replaced the table since the mark: IDs are
// then every row it holds, and (*Inference).ApplyDynamicDelta makes them the served table's only
// rows, so a serving copy in any state (say, following a trainer that restarted from a
// checkpoint) ends equal to the training table. False for an ordinary delta.
type DynamicDelta struct {
	Dim        int
	IDs        []int64
	Rows       []float32
	Tombstones []int64
	Full       bool
}

// flags is the delta's flags for shardrec_inference_apply_delta_ext.
func (d *DynamicDelta) flags() uint {
	if d.Full {
		return uint(swig.DELTA_FULL)
	}
	return 0
}

// Row returns the row of IDs[i], a slice of Rows (not a copy).
func (d *DynamicDelta) Row(i int) []float32 { return d.Rows[i*d.Dim : (i+1)*d.Dim] }

// DynamicMark starts a new delta period of dynamic table `table`: forgets the rows changed, the
// ids that left and whether a checkpoint load replaced the table (DynamicDelta.Full) before, and
// tracks them from now on (tracking is off until the first mark). Not
// collective, but every rank must mark between the same two training steps. ErrCodeInvalid for
// a table that is not dynamic, ErrCodeNotFound for an unknown one.
func (e *EmbeddingCollection) DynamicMark(table string) error {
	if err := noNUL("table", table); err != nil {
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Embedding_dynamic_mark(h, table)
}

// DynamicDelta gathers the whole table's changes since the marks, on every rank (collective:
// every rank calls it; shardrec_embedding_dynamic_delta_ext), Full when a checkpoint load
// replaced the table since the marks. The marks stay; call DynamicMark to start the next period.
// Changes nothing in the collection. ErrCodeUsage (on every rank) when a rank has not marked the
// table.
func (e *EmbeddingCollection) DynamicDelta(table string) (*DynamicDelta, error) {
	if err := noNUL("table", table); err != nil {
		return nil, err
	}
	h, done := e.ref().acquire()
	defer done()
	// Two collective calls on every rank alike: the sizes, then the fill. Nothing trains in
	// between, so the second call's delta is the first one's. An unknown table fails the
	// first call (ENOTFOUND) before anything is gathered.
	n, m, flags := []uint64{0}, []uint64{0}, []uint32{0}
	err := swig.Embedding_dynamic_delta_ext(h, table, nil, nil, 0, nil, 0, n, m, flags)
	shape, known := e.shape(table)
	dim := int(shape[1])
	full := flags[0]&uint32(swig.DELTA_FULL) != 0
	if err == nil {
		return &DynamicDelta{Dim: dim, IDs: []int64{}, Rows: []float32{}, Tombstones: []int64{},
			Full: full}, nil
	}
	if CodeOf(err) != ErrCodeInvalid || (n[0] == 0 && m[0] == 0) {
		return nil, err
	}
	if !known {
		// Rows are sized by the plan's width; without it C would write past them.
		return nil, &Error{Code: ErrCodeInternal, Message: "no width known for table " + table}
	}
	d := &DynamicDelta{Dim: dim, IDs: make([]int64, n[0]), Rows: make([]float32, n[0]*uint64(dim)),
		Tombstones: make([]int64, m[0])}
	if err := swig.Embedding_dynamic_delta_ext(h, table, d.IDs, d.Rows, int64(n[0]),
		d.Tombstones, int64(m[0]), n, m, flags); err != nil {
		return nil, err
	}
	d.Full = flags[0]&uint32(swig.DELTA_FULL) != 0
	return d, nil
}
