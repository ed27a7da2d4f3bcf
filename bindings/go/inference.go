// Serving (inference.h): a read-only, hot-swappable embedding collection opened from a training
// checkpoint or a serving file, looked up from any number of goroutines at once.

package shardrec

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"shardrec.dev/shardrec/internal/swig"
)

// ServingStorage is how an inference handle stores a table's rows (SHARDREC_SERVING_*).
// ServingInt8 and ServingInt4 are row-wise: a value reads back within scale/2 of its trained
// value, scale = (row max - row min) / (2^bits - 1). ServingFP8E4M3 and ServingFP8E5M2 store an
// fp32 power-of-two scale per row and one FP8 code per value: a value x reads back within
// max(2^-4 |x|, 2^-10 scale) (E4M3) or max(2^-3 |x|, 2^-17 scale) (E5M2).
type ServingStorage int32

const (
	// ServingAsTrained keeps the checkpoint's dtype: lookups equal the training forward bit for bit.
	ServingAsTrained ServingStorage = 0
	ServingFP32      ServingStorage = 1
	ServingFP16      ServingStorage = 2 // IEEE half, rounded to nearest even
	ServingBF16      ServingStorage = 3 // bfloat16, rounded to nearest even
	ServingInt8      ServingStorage = 4 // 1 byte per value + fp32 scale and bias per row
	ServingInt4      ServingStorage = 5 // 2 values per byte + fp32 scale and bias per row
	ServingFP8E4M3   ServingStorage = 6 // 1 FP8 E4M3 byte per value + fp32 scale per row
	ServingFP8E5M2   ServingStorage = 7 // 1 FP8 E5M2 byte per value + fp32 scale per row
)

// InferenceOptions are the options of OpenInference; the zero value serves every table as
// trained, rejects out-of-range ids and runs on the host.
type InferenceOptions struct {
	// DefaultStorage of the tables not in TableStorage (ignored for a serving file).
	DefaultStorage ServingStorage
	// TableStorage overrides the storage by table name (ignored for a serving file).
	TableStorage map[string]ServingStorage
	// BoundsPolicy is what lookups do with an id outside its table.
	BoundsPolicy BoundsPolicy
	// Device must be DeviceHost: the library refuses a device with ErrCodeUnsupported.
	Device DeviceType
	// Tiers serves these tables (by name) from the checkpoint's files through a row cache of
	// the given bytes each (shardrec_serving_tier_t; Inference.TierStats reports it).
	Tiers map[string]int64
}

// InferenceTable describes a table as served; Storage is what it resolved to (never
// ServingAsTrained).
type InferenceTable struct {
	Name    string
	Rows    int64
	Dim     int32
	Storage ServingStorage
}

// Inference is a read-only embedding collection for serving: every table of a checkpoint (any
// plan, world size or mesh) or serving file, reassembled whole, plus the checkpoint's dense
// tensors. Every method is safe from any number of goroutines at once, Reload and Close
// included: Close waits for the calls in flight, and later calls return an *Error with
// ErrCodeInvalid. The C read path takes no lock; this wrapper holds a read lock of a
// sync.RWMutex during each call (readers never wait for each other) so that Close cannot free
// the handle under one.
type Inference struct {
	mu        sync.RWMutex
	h         uintptr
	outputDim int64
	sequence  bool
}

// OpenInference opens a checkpoint directory or a serving file (see inference.h). opts may be
// nil (defaults).
func OpenInference(path string, opts *InferenceOptions) (*Inference, error) {
	if err := noNUL("path", path); err != nil {
		return nil, err
	}
	var o InferenceOptions
	if opts != nil {
		o = *opts
	}
	// Sorted names: the same options give the same C call.
	names := make([]string, 0, len(o.TableStorage))
	for name := range o.TableStorage {
		if strings.ContainsAny(name, "\n\x00") {
			return nil, &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"table name %q holds a newline or NUL", name)}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	storages := make([]int32, len(names))
	for i, name := range names {
		storages[i] = int32(o.TableStorage[name])
	}
	tierNames, cacheBytes, err := tierLists(o.Tiers)
	if err != nil {
		return nil, err
	}
	out := make([]uintptr, 1)
	if err := swig.Bind_inference_open_tiered(out, path, int(o.DefaultStorage),
		int(o.BoundsPolicy), int(o.Device), strings.Join(names, "\n"), storages,
		strings.Join(tierNames, "\n"), cacheBytes); err != nil {
		return nil, err
	}
	inf := &Inference{h: out[0]}
	dim := make([]int64, 1)
	seq := make([]int32, 1)
	err = swig.Inference_output_dim(inf.h, dim)
	if err == nil {
		err = swig.Inference_is_sequence(inf.h, seq)
	}
	if err != nil {
		swig.Inference_destroy(inf.h)
		return nil, err
	}
	inf.outputDim, inf.sequence = dim[0], seq[0] != 0
	runtime.SetFinalizer(inf, closeLeaked((*Inference).Close))
	return inf, nil
}

// use runs call with the handle under the read lock (an *Error once closed).
func (inf *Inference) use(call func(h uintptr) error) error {
	if inf == nil {
		return &Error{Code: ErrCodeInvalid, Message: "shardrec.Inference is nil"}
	}
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	if inf.h == 0 {
		return &Error{Code: ErrCodeInvalid, Message: "shardrec.Inference is closed"}
	}
	return call(inf.h)
}

// Close destroys the handle after the calls in flight return; snapshots pinned from it stay
// valid. Idempotent.
func (inf *Inference) Close() error {
	if inf == nil {
		return nil
	}
	inf.mu.Lock()
	h := inf.h
	inf.h = 0
	inf.mu.Unlock()
	if h != 0 {
		swig.Inference_destroy(h)
	}
	runtime.SetFinalizer(inf, nil)
	return nil
}

// OutputDim is the width of one output row.
func (inf *Inference) OutputDim() (int64, error) {
	out := make([]int64, 1)
	err := inf.use(func(h uintptr) error { return swig.Inference_output_dim(h, out) })
	return out[0], err
}

// IsSequence says whether every table is NONE-pooled (one output row per id).
func (inf *Inference) IsSequence() (bool, error) {
	out := make([]int32, 1)
	err := inf.use(func(h uintptr) error { return swig.Inference_is_sequence(h, out) })
	return out[0] != 0, err
}

// NumFeatures is the number of features a batch carries.
func (inf *Inference) NumFeatures() (int, error) {
	out := make([]uint64, 1)
	err := inf.use(func(h uintptr) error { return swig.Inference_num_features(h, out) })
	return int(out[0]), err
}

// NumTables is the number of tables.
func (inf *Inference) NumTables() (int, error) {
	out := make([]uint64, 1)
	err := inf.use(func(h uintptr) error { return swig.Inference_num_tables(h, out) })
	return int(out[0]), err
}

// Table describes table i (plan order).
func (inf *Inference) Table(i int) (InferenceTable, error) {
	var t InferenceTable
	rows := make([]int64, 1)
	dim := make([]int32, 1)
	storage := make([]int32, 1)
	if err := negativeIndex("table", i); err != nil {
		return t, err
	}
	err := inf.use(func(h uintptr) error {
		return swig.Inference_table_info(h, int64(i), &t.Name, rows, dim, storage)
	})
	t.Rows, t.Dim, t.Storage = rows[0], dim[0], ServingStorage(storage[0])
	return t, err
}

// Version is the number of the version served now: 1 after open, +1 per successful reload.
func (inf *Inference) Version() (uint64, error) {
	out := make([]uint64, 1)
	err := inf.use(func(h uintptr) error { return swig.Inference_version(h, out) })
	return out[0], err
}

// OutputSize is the number of floats of the lookup output of batch: [BatchSize, OutputDim], or
// [len(Values), dim] for a sequence handle; 0 for a nil batch and for one no output can hold (a
// negative BatchSize, or a size that overflows int), which Lookup then refuses with an error.
func (inf *Inference) OutputSize(batch *KJT) int {
	if inf == nil {
		return 0
	}
	return outputSize(batch, inf.outputDim, inf.sequence)
}

func outputSize(batch *KJT, dim int64, sequence bool) int {
	if batch == nil {
		return 0
	}
	rows := int64(len(batch.Values))
	if !sequence {
		rows = int64(batch.BatchSize)
	}
	if rows < 0 || dim < 0 || (dim > 0 && rows > int64(math.MaxInt)/dim) {
		return 0
	}
	return int(rows * dim)
}

// Lookup writes the output of batch into out (exactly OutputSize floats; no copy) and returns
// the number of the version that answered. A bad batch returns an *Error (ErrCodeInvalid,
// naming the feature, sample and id) and disturbs no other goroutine. A table served from the
// checkpoint's files (tiers) whose missed rows cannot be read, or whose file changed since open
// (a checksum taken at open fails, or the file is shorter), returns ErrCodeCorrupt or ErrCodeIO
// naming the table and the file; nothing is cached and the handle serves on.
func (inf *Inference) Lookup(batch *KJT, out []float32) (uint64, error) {
	if err := batch.check(); err != nil {
		return 0, err
	}
	version := make([]uint64, 1)
	err := inf.use(func(h uintptr) error {
		return swig.Bind_inference_lookup(h, batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, out, version)
	})
	return version[0], err
}

// DenseTensor is a copy of dense tensor name (saved with the checkpoint) of the version served
// now, and that version's number. For zero-copy reads, or to read it with the embeddings of one
// version, Pin a snapshot.
func (inf *Inference) DenseTensor(name string) ([]float32, uint64, error) {
	s, err := inf.Pin()
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	data, err := s.DenseTensor(name)
	if err != nil {
		return nil, 0, err
	}
	version, err := s.Version()
	return append([]float32(nil), data...), version, err
}

// Pin pins the version served now: the snapshot keeps its tables and dense tensors unchanged
// until its Close, whatever reloads happen (also after the handle's Close).
func (inf *Inference) Pin() (*InferenceSnapshot, error) {
	out := make([]uintptr, 1)
	if err := inf.use(func(h uintptr) error { return swig.Inference_pin(h, out) }); err != nil {
		return nil, err
	}
	s := &InferenceSnapshot{h: out[0], outputDim: inf.outputDim, sequence: inf.sequence}
	runtime.SetFinalizer(s, closeLeaked((*InferenceSnapshot).Close))
	return s, nil
}

// Save writes the version served now as one serving file, atomically (temp, fsync, rename).
func (inf *Inference) Save(path string) error {
	if err := noNUL("path", path); err != nil {
		return err
	}
	return inf.use(func(h uintptr) error { return swig.Inference_save(h, path) })
}

// Reload opens path (checkpoint or serving file) with the handle's options and swaps it in
// while lookups run; lookups that started before finish on the old version. The source must
// have the same features and tables (else ErrCodeInvalid and nothing changes); a Reload while
// another runs returns ErrCodeUsage. It returns once the lookups running on the old version
// have returned.
func (inf *Inference) Reload(path string) error {
	if err := noNUL("path", path); err != nil {
		return err
	}
	return inf.use(func(h uintptr) error { return swig.Inference_reload(h, path) })
}

// InferenceSnapshot is one pinned version of an Inference handle (Inference.Pin). A request
// that runs the lookup and the dense layers uses both through one snapshot, so it sees one
// version. Safe from any number of goroutines at once; Close waits for the calls in flight.
type InferenceSnapshot struct {
	mu        sync.RWMutex
	h         uintptr
	outputDim int64
	sequence  bool
}

func (s *InferenceSnapshot) use(call func(h uintptr) error) error {
	if s == nil {
		return &Error{Code: ErrCodeInvalid, Message: "shardrec.InferenceSnapshot is nil"}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.h == 0 {
		return &Error{Code: ErrCodeInvalid, Message: "shardrec.InferenceSnapshot is closed"}
	}
	return call(s.h)
}

// Close releases the snapshot (its version is freed once nothing else holds it). Idempotent;
// slices from DenseTensor must not be used afterwards.
func (s *InferenceSnapshot) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	h := s.h
	s.h = 0
	s.mu.Unlock()
	if h != 0 {
		swig.Inference_unpin(h)
	}
	runtime.SetFinalizer(s, nil)
	return nil
}

// Version is the number of the pinned version.
func (s *InferenceSnapshot) Version() (uint64, error) {
	out := make([]uint64, 1)
	err := s.use(func(h uintptr) error { return swig.Inference_snapshot_version(h, out) })
	return out[0], err
}

// OutputSize is the number of floats of the lookup output of batch.
func (s *InferenceSnapshot) OutputSize(batch *KJT) int {
	if s == nil {
		return 0
	}
	return outputSize(batch, s.outputDim, s.sequence)
}

// Lookup is Inference.Lookup on this version.
func (s *InferenceSnapshot) Lookup(batch *KJT, out []float32) error {
	if err := batch.check(); err != nil {
		return err
	}
	return s.use(func(h uintptr) error {
		return swig.Bind_inference_snapshot_lookup(h, batch.BatchSize, int64(batch.NumFeatures),
			batch.Lengths, batch.Values, batch.Weights, out)
	})
}

// DenseTensor is dense tensor name of this version, zero-copy: the slice aliases the
// snapshot's read-only memory and is valid until Close (do not write it; copy what must
// outlive the snapshot, and keep the snapshot reachable while the slice is used, since its
// finalizer releases a leaked snapshot). An unknown name is ErrCodeNotFound.
func (s *InferenceSnapshot) DenseTensor(name string) ([]float32, error) {
	if err := noNUL("dense tensor", name); err != nil {
		return nil, err
	}
	addr := make([]uintptr, 1)
	count := make([]uint64, 1)
	err := s.use(func(h uintptr) error {
		return swig.Inference_snapshot_dense_tensor(h, name, addr, count)
	})
	if err != nil {
		return nil, err
	}
	if count[0] == 0 {
		return []float32{}, nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(addr[0])), int(count[0])), nil
}
