/* Shared SWIG description of the libshardrec C API for the Java and Go bindings. Each
 * language's interface file defines its typemaps (status -> exception/error with the message
 * read in the same native call, handles, buffers, out-parameters) and then includes this file. */

%{
#include "shardrec/common.h"
#include "shardrec/version.h"
#include "shardrec/config.h"
#include "shardrec/tensor.h"
#include "shardrec/comm.h"
#include "shardrec/plan.h"
#include "shardrec/embedding_options.h"
#include "shardrec/embedding.h"
#include "shardrec/dynamic.h"
#include "shardrec/tier.h"
#include "shardrec/device.h"
#include "shardrec/replica.h"
#include "shardrec/checkpoint.h"
%}

%include <stdint.i>

/* The prefix is the module: shardrec_comm_rank -> comm_rank, SHARDREC_EINVAL -> EINVAL. */
%rename("%(strip:[shardrec_])s") "";
%rename("%(strip:[SHARDREC_])s", %$isconstant) "";
%rename("%(strip:[SHARDREC_])s", %$isenumitem) "";

/* The message travels with the status (see the language typemaps); plain C helpers only. */
%ignore shardrec_last_error;
%ignore shardrec_last_error_copy;
%ignore shardrec_free;
/* Views and configs that hold pointers are filled on the C side (bind_helpers.i). */
%ignore shardrec_kjt_view;
%ignore shardrec_tensor_view;
%ignore shardrec_feature_config;
%ignore shardrec_table_config;
%ignore shardrec_table_constraints;
%ignore shardrec_feature_config_init;
%ignore shardrec_table_config_init;
%ignore shardrec_table_constraints_init;
%ignore shardrec_plan_create;
%ignore shardrec_embedding_forward;
%ignore shardrec_embedding_input_dist_start;
/* VBE batches go through the helpers of vbe.i, which build the view. */
%ignore shardrec_kjt_vbe_view;
%ignore shardrec_embedding_vbe_output_len;
%ignore shardrec_embedding_forward_vbe;
%ignore shardrec_embedding_input_dist_start_vbe;
%ignore shardrec_embedding_forward_vbe_tensor;
%ignore shardrec_topology::memory_bytes_per_rank;
%ignore shardrec_topology::num_memory_bytes_per_rank;
/* Host callbacks into Java/Go are not offered: use a unique id or a local group instead. */
%ignore shardrec_store_callbacks;
%ignore shardrec_store_callbacks_init;
%ignore shardrec_comm_create_with_store;
%ignore shardrec_unique_id;
%ignore shardrec_device_plugin_path;
/* The mesh sync hook is a C function pointer too: syncs from Java/Go use the built-in collective. */
%ignore shardrec_sync_hook_fn;
%ignore shardrec_mesh_set_sync_hook;
/* Options structs are created with their _init function by the idiomatic layer. */
%ignore SHARDREC_COMM_OPTIONS_INIT;
%ignore SHARDREC_STORE_CALLBACKS_INIT;
%ignore SHARDREC_FEATURE_CONFIG_INIT;
%ignore SHARDREC_TABLE_CONFIG_INIT;
%ignore SHARDREC_TOPOLOGY_INIT;
%ignore SHARDREC_TABLE_CONSTRAINTS_INIT;
%ignore SHARDREC_OPTIMIZER_CONFIG_INIT;
%ignore SHARDREC_EMBEDDING_OPTIONS_INIT;
%ignore SHARDREC_MESH_OPTIONS_INIT;
%ignore SHARDREC_CALIBRATE_OPTIONS_INIT;
%ignore SHARDREC_CALIBRATION_INIT;
%ignore SHARDREC_VERSION_CODE;
/* A tier's strings are set in C by the bind helper (shardrec_bind_tiers_add), which owns them. */
%ignore shardrec_table_tier::table;
%ignore shardrec_table_tier::dir;

/* SWIG's preprocessor does not parse the export attribute. */
#define __attribute__(x)

%include "shardrec/common.h"
%include "shardrec/version.h"
%include "shardrec/config.h"
%include "shardrec/comm.h"
%include "shardrec/plan.h"
%include "shardrec/embedding_options.h"
%include "shardrec/embedding.h"
%include "shardrec/dynamic.h"
%include "shardrec/tier.h"
%include "shardrec/device.h"
%include "shardrec/replica.h"
/* Checkpoints: host dense tensors (pointers) are not offered to Java/Go yet. */
%ignore shardrec_dense_tensor;
%ignore shardrec_checkpoint_options::dense;
%ignore SHARDREC_CHECKPOINT_OPTIONS_INIT;
%include "shardrec/checkpoint.h"

%include "bind_helpers.i"

/* The dense side: MLP, DCN, dot interaction, BCE, dense optimizer, DDP bucketer, FSDP. */
%include "dense.i"

/* Serving: the inference handle and its pinned snapshots. */
%include "inference.i"

/* Batches with a batch size per feature (VBE), training and serving. */
%include "vbe.i"
