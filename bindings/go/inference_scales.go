// The row-wise quantization parameters of a served int8/int4 (or FP8) table, to bound a lookup's
// error.

package shardrec

import "shardrec.dev/shardrec/internal/swig"

// RowScales returns, for each of ids, the scale and bias of its row in table `table`, which must
// be served as ServingInt8, ServingInt4 or an FP8 storage (an FP8 checkpoint served
// ServingAsTrained included: its power-of-two scale, bias 0), and the number of the version read.
// Each value of an int8/int4 row i reads back as q*scales[i] + biases[i], within scales[i]/2 of
// the trained value (plus fp32 rounding), so a bag's error is at most the sum over its ids of
// |weight|*scale/2. ids are a fixed table's row indices in [0, rows), or a dynamic table's ids
// (one without a row: scale 0, bias 0). An *Error for another storage (ErrCodeInvalid), an index
// out of range (ErrCodeInvalid) or an unknown table (ErrCodeNotFound). Safe from any goroutine,
// as Lookup.
func (inf *Inference) RowScales(table string, ids []int64) (scales, biases []float32,
	version uint64, err error) {
	if err := noNUL("table", table); err != nil {
		return nil, nil, 0, err
	}
	scales = make([]float32, len(ids))
	biases = make([]float32, len(ids))
	v := make([]uint64, 1)
	err = inf.use(func(h uintptr) error {
		return swig.Inference_row_scales(h, table, ids, int64(len(ids)), scales, biases, v)
	})
	if err != nil {
		return nil, nil, 0, err
	}
	return scales, biases, v[0], nil
}
