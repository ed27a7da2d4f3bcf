// Checkpoints (checkpoint.h): sharded save/load that works under any plan and world size, and
// export/import of one full table as a safetensors file. Every call is collective.
package shardrec

import (
	"runtime"

	"shardrec.dev/shardrec/internal/swig"
)

// CheckpointOptions are the load options; the zero value refuses any mismatch.
type CheckpointOptions struct {
	// ResetOptimizerState loads the weights of tables whose optimizer type differs from the
	// checkpoint's and starts their optimizer state (and the step counter) from zero.
	ResetOptimizerState bool
	// AllowDtypeChange converts between fp32 and fp16/bf16 table storage.
	AllowDtypeChange bool
	// VerifyFirst verifies every needed chunk before changing anything (reads the bytes twice).
	VerifyFirst bool
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
	}
	return fn(o)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SaveCheckpoint writes the collection into directory dir atomically (collective).
func (e *EmbeddingCollection) SaveCheckpoint(dir string) error {
	defer runtime.KeepAlive(e)
	return withCheckpointOptions(nil, func(o swig.Checkpoint_options) error {
		return swig.Checkpoint_save(e.handle(), dir, o)
	})
}

// LoadCheckpoint loads the checkpoint in dir, whatever plan and world size saved it
// (collective). nil options refuse any mismatch.
func (e *EmbeddingCollection) LoadCheckpoint(dir string, opts *CheckpointOptions) error {
	defer runtime.KeepAlive(e)
	return withCheckpointOptions(opts, func(o swig.Checkpoint_options) error {
		return swig.Checkpoint_load(e.handle(), dir, o)
	})
}

// SaveCheckpoint saves a collection created on this mesh; each shard is written by one replica.
func (m *Mesh) SaveCheckpoint(coll *EmbeddingCollection, dir string) error {
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(coll)
	return withCheckpointOptions(nil, func(o swig.Checkpoint_options) error {
		return swig.Checkpoint_save_mesh(m.handle(), coll.handle(), dir, o)
	})
}

// LoadCheckpoint loads a checkpoint into a collection created on this mesh.
func (m *Mesh) LoadCheckpoint(coll *EmbeddingCollection, dir string, opts *CheckpointOptions) error {
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(coll)
	return withCheckpointOptions(opts, func(o swig.Checkpoint_options) error {
		return swig.Checkpoint_load_mesh(m.handle(), coll.handle(), dir, o)
	})
}

// ExportTable writes one full table (and optionally its optimizer state) to a safetensors file.
func (e *EmbeddingCollection) ExportTable(table, path string, withOptimizerState bool) error {
	defer runtime.KeepAlive(e)
	return swig.Checkpoint_export_table(e.handle(), table, path, boolInt(withOptimizerState))
}

// ImportTable reads one full table (F32/F16/BF16 "weights", optionally states) from a
// safetensors file into this collection's shards.
func (e *EmbeddingCollection) ImportTable(table, path string, withOptimizerState bool) error {
	defer runtime.KeepAlive(e)
	return swig.Checkpoint_import_table(e.handle(), table, path, boolInt(withOptimizerState))
}
