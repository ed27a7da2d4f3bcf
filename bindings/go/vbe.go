// Batches with a batch size per feature (VBE): a request of one user and many candidate items
// carries the user's features once instead of once per candidate.

package shardrec

import "shardrec.dev/shardrec/internal/swig"

// VBEKJT is a batch whose features each have their own number of bags (TorchRec's variable
// batch size per feature; shardrec_kjt_vbe_view_t). Lengths holds sum_f FeatureBatchSizes[f]
// entries, feature-major (the bags of feature 0, then of feature 1, ...), Values and Weights
// follow them. With InverseIndices (NumFeatures x BatchSize entries, each in [0, B_f)), sample b
// of feature f reads bag InverseIndices[f*BatchSize+b] and the output equals, bit for bit, that
// of the expanded plain batch of BatchSize samples; without them BatchSize must be the largest
// B_f and the output is feature-major (each feature's B_f rows of its width; a sequence
// collection: one row per id). A nil FeatureBatchSizes is the plain batch KJT. A nil
// InverseIndices is none; a non-nil empty one ([]int64{}) is the inverse indices of a zero-size
// batch (BatchSize 0, bags that no sample reads).
type VBEKJT struct {
	KJT
	FeatureBatchSizes []int64
	InverseIndices    []int64
}

// refusedVBE stands in for a nil *VBEKJT in a collective call: a batch the library refuses (see
// errNilBatch), or for one that check refuses.
var refusedVBE = &VBEKJT{KJT: *refusedBatch}

// check is KJT.check of a VBE batch (nil refused too).
func (b *VBEKJT) check() error {
	if b == nil {
		return errNilBatch()
	}
	return b.KJT.check()
}

// OutputSizeVBE is the number of floats LookupVBE writes for batch
// (shardrec_inference_vbe_output_len): an error for a batch whose sizes do not fit the handle.
func (inf *Inference) OutputSizeVBE(batch *VBEKJT) (int, error) {
	if err := batch.check(); err != nil {
		return 0, err
	}
	n := make([]uint64, 1)
	err := inf.use(func(h uintptr) error {
		return swig.Bind_inference_vbe_output_len(h, batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes,
			batch.InverseIndices, n)
	})
	return int(n[0]), err
}

// LookupVBE writes the output of a VBE batch into out (exactly OutputSizeVBE floats; no copy),
// each distinct bag looked up once, and returns the number of the version that answered. A bad
// batch (sizes that do not add up, an inverse index outside [0, B_f), any error of Lookup)
// returns an *Error naming the feature and sample, and out is not written.
func (inf *Inference) LookupVBE(batch *VBEKJT, out []float32) (uint64, error) {
	if err := batch.check(); err != nil {
		return 0, err
	}
	version := make([]uint64, 1)
	err := inf.use(func(h uintptr) error {
		return swig.Bind_inference_lookup_vbe(h, batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes,
			batch.InverseIndices, out, version)
	})
	return version[0], err
}

// LookupVBEAlloc is LookupVBE into a new slice of the right size.
func (inf *Inference) LookupVBEAlloc(batch *VBEKJT) ([]float32, uint64, error) {
	n, err := inf.OutputSizeVBE(batch)
	if err != nil {
		return nil, 0, err
	}
	out := make([]float32, n)
	v, err := inf.LookupVBE(batch, out)
	return out, v, err
}

// LookupVBE is Inference.LookupVBE on this version (size out with the handle's OutputSizeVBE).
func (s *InferenceSnapshot) LookupVBE(batch *VBEKJT, out []float32) error {
	if err := batch.check(); err != nil {
		return err
	}
	return s.use(func(h uintptr) error {
		return swig.Bind_inference_snapshot_lookup_vbe(h, batch.BatchSize,
			int64(batch.NumFeatures), batch.Lengths, batch.Values, batch.Weights,
			batch.FeatureBatchSizes, batch.InverseIndices, out)
	})
}

// OutputSizeVBE is the number of floats of the forward output of a VBE batch
// (shardrec_embedding_vbe_output_len; not collective).
func (e *EmbeddingCollection) OutputSizeVBE(batch *VBEKJT) (int, error) {
	if err := batch.check(); err != nil {
		return 0, err
	}
	h, done := e.ref().acquire()
	defer done()
	n := make([]uint64, 1)
	err := swig.Bind_embedding_vbe_output_len(h, batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes, batch.InverseIndices, n)
	return int(n[0]), err
}

// ForwardVBE writes the output of this rank's VBE batch into out (collective; ranks may mix VBE
// and plain batches). The Backward that follows takes a gradient of the same layout; the
// gradients of the samples that read a bag are summed into it.
func (e *EmbeddingCollection) ForwardVBE(batch *VBEKJT, out []float32) error {
	if err := batch.check(); err != nil {
		_ = e.ForwardVBE(refusedVBE, out)
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Bind_embedding_forward_vbe(h, batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes, batch.InverseIndices,
		out)
}

// ForwardVBEAlloc is ForwardVBE into a new slice of the right size.
func (e *EmbeddingCollection) ForwardVBEAlloc(batch *VBEKJT) ([]float32, error) {
	if batch == nil {
		return nil, e.ForwardVBE(nil, nil)
	}
	n, err := e.OutputSizeVBE(batch)
	if err != nil {
		// Collective: the C call refuses the batch on every rank together.
		if ferr := e.ForwardVBE(batch, nil); ferr != nil {
			return nil, ferr
		}
		return nil, err
	}
	out := make([]float32, n)
	return out, e.ForwardVBE(batch, out)
}

// ForwardVBETensor is ForwardVBE into a tensor of extents shape (with 2 or more, the last is the
// output width, which only the plain layout has: inverse indices given, or a sequence
// collection); out holds exactly the shape's element count. A nil shape is refused, as in
// ForwardTensor.
func (e *EmbeddingCollection) ForwardVBETensor(batch *VBEKJT, out []float32, shape []int64) error {
	if err := batch.check(); err != nil {
		_ = e.ForwardVBETensor(refusedVBE, out, shape)
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	if err := checkShape("out", out, shape); err != nil {
		// Refused together: no view, which the library refuses on every rank in this call.
		_ = swig.Bind_embedding_forward_vbe_tensor(h, batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes,
			batch.InverseIndices, nil, refusedShape)
		return err
	}
	return swig.Bind_embedding_forward_vbe_tensor(h, batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes, batch.InverseIndices,
		out, shape)
}

// InputDistStartVBE starts the pipelined input distribution of a VBE batch (collective); the
// ForwardDistributed that follows writes OutputSizeVBE(batch) floats.
func (e *EmbeddingCollection) InputDistStartVBE(batch *VBEKJT) error {
	if err := batch.check(); err != nil {
		_ = e.InputDistStartVBE(refusedVBE)
		return err
	}
	h, done := e.ref().acquire()
	defer done()
	return swig.Bind_embedding_input_dist_start_vbe(h, batch.BatchSize, int64(batch.NumFeatures),
		batch.Lengths, batch.Values, batch.Weights, batch.FeatureBatchSizes, batch.InverseIndices)
}
