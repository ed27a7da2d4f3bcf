// Checkpoints (checkpoint.h): sharded save/load that works under any plan and world size, and
// export/import of one full table as a safetensors file. Every call is collective.

package shardrec

import (
	"fmt"
	"strings"

	"shardrec.dev/shardrec/internal/swig"
)

// DenseTensor is a named dense tensor (model parameters, dense optimizer state) saved with a
// checkpoint: Data is read on save and overwritten on load (same name and length as saved).
// Names are non-empty, unique, without '/' or newline.
type DenseTensor struct {
	Name string
	Data []float32
}

// CheckpointOptions are the save/load options; the zero value refuses any mismatch on load.
type CheckpointOptions struct {
	// Dense tensors to save with the checkpoint, or to fill on load.
	Dense []DenseTensor
	// ResetOptimizerState loads the weights of tables whose optimizer type differs from the
	// checkpoint's and starts their optimizer state (and the step counter) from zero.
	ResetOptimizerState bool
	// AllowDtypeChange converts between fp32 and fp16/bf16 table storage.
	AllowDtypeChange bool
	// VerifyFirst, with AllowPartialLoad, verifies every needed chunk before changing anything
	// (reads the bytes twice); without it there is nothing more to do: loads are all-or-nothing.
	VerifyFirst bool
	// AllowPartialLoad skips the host staging that makes a load all-or-nothing (faster, no extra
	// memory): a failure found while copying then leaves the collection partly loaded.
	AllowPartialLoad bool
}

func withCheckpointOptions(opts *CheckpointOptions, fn func(swig.Checkpoint_options) error) error {
	o := swig.NewCheckpoint_options()
	defer swig.DeleteCheckpoint_options(o)
	if err := swig.Checkpoint_options_init(o, uint(swig.CHECKPOINT_OPTIONS_VERSION)); err != nil {
		return err
	}
	if opts != nil {
		o.SetReset_optimizer_state(boolInt(opts.ResetOptimizerState))
		o.SetAllow_dtype_change(boolInt(opts.AllowDtypeChange))
		o.SetVerify_first(boolInt(opts.VerifyFirst))
		o.SetAllow_partial_load(boolInt(opts.AllowPartialLoad))
	}
	return fn(o)
}

// runCheckpoint is one native save (load false) or load call with the options' dense tensors
// packed into one flat buffer; mesh 0 is the 1D form.
func runCheckpoint(mesh, coll uintptr, dir string, opts *CheckpointOptions, load bool) error {
	if err := noNUL("checkpoint directory", dir); err != nil {
		return err
	}
	var dense []DenseTensor
	if opts != nil {
		dense = opts.Dense
	}
	names := make([]string, len(dense))
	counts := make([]int64, len(dense))
	total := 0
	for i, d := range dense {
		if strings.ContainsAny(d.Name, "\n\x00") {
			return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf(
				"dense tensor name %q holds a newline or NUL", d.Name)}
		}
		names[i] = d.Name
		counts[i] = int64(len(d.Data))
		total += len(d.Data)
	}
	flat := make([]float32, total)
	if !load {
		off := 0
		for _, d := range dense {
			off += copy(flat[off:], d.Data)
		}
	}
	var flatArg []float32
	if total > 0 {
		flatArg = flat
	}
	err := withCheckpointOptions(opts, func(o swig.Checkpoint_options) error {
		return swig.Bind_checkpoint(mesh, coll, dir, o, strings.Join(names, "\n"), counts, flatArg,
			boolInt(load))
	})
	if err == nil && load {
		off := 0
		for _, d := range dense {
			off += copy(d.Data, flat[off:off+len(d.Data)])
		}
	}
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SaveCheckpoint writes the collection into directory dir atomically (collective).
func (e *EmbeddingCollection) SaveCheckpoint(dir string) error {
	return e.SaveCheckpointWith(dir, nil)
}

// SaveCheckpointWith writes the collection and opts.Dense into directory dir atomically
// (collective).
func (e *EmbeddingCollection) SaveCheckpointWith(dir string, opts *CheckpointOptions) error {
	h, done := e.ref().acquire()
	defer done()
	return runCheckpoint(0, h, dir, opts, false)
}

// LoadCheckpoint loads the checkpoint in dir, whatever plan and world size saved it
// (collective), and fills opts.Dense. nil options refuse any mismatch.
func (e *EmbeddingCollection) LoadCheckpoint(dir string, opts *CheckpointOptions) error {
	h, done := e.ref().acquire()
	defer done()
	return runCheckpoint(0, h, dir, opts, true)
}

// SaveCheckpoint saves a collection created on this mesh; each shard is written by one replica.
func (m *Mesh) SaveCheckpoint(coll *EmbeddingCollection, dir string) error {
	return m.SaveCheckpointWith(coll, dir, nil)
}

// SaveCheckpointWith saves a collection created on this mesh together with opts.Dense.
func (m *Mesh) SaveCheckpointWith(coll *EmbeddingCollection, dir string, opts *CheckpointOptions) error {
	h, done := acquireAll(m.ref(), coll.ref())
	defer done()
	// A 0 mesh handle means a 1D checkpoint to C: a nil or closed mesh must not become one.
	if m == nil || h[0] == 0 {
		return &Error{Code: ErrCodeInvalid, Message: "the mesh is nil or was closed"}
	}
	return runCheckpoint(h[0], h[1], dir, opts, false)
}

// LoadCheckpoint loads a checkpoint into a collection created on this mesh.
func (m *Mesh) LoadCheckpoint(coll *EmbeddingCollection, dir string, opts *CheckpointOptions) error {
	h, done := acquireAll(m.ref(), coll.ref())
	defer done()
	// A 0 mesh handle means a 1D checkpoint to C: a nil or closed mesh must not become one.
	if m == nil || h[0] == 0 {
		return &Error{Code: ErrCodeInvalid, Message: "the mesh is nil or was closed"}
	}
	return runCheckpoint(h[0], h[1], dir, opts, true)
}

// ExportTable writes one full table (and optionally its optimizer state) to a safetensors file.
func (e *EmbeddingCollection) ExportTable(table, path string, withOptimizerState bool) error {
	h, done := e.ref().acquire()
	defer done()
	if err := noNUL("table or path", table, path); err != nil {
		return err
	}
	return swig.Checkpoint_export_table(h, table, path, boolInt(withOptimizerState))
}

// ImportTable reads one full table (F32/F16/BF16 "weights", optionally states) from a
// safetensors file into this collection's shards.
func (e *EmbeddingCollection) ImportTable(table, path string, withOptimizerState bool) error {
	h, done := e.ref().acquire()
	defer done()
	if err := noNUL("table or path", table, path); err != nil {
		return err
	}
	return swig.Checkpoint_import_table(h, table, path, boolInt(withOptimizerState))
}
