// Conversions from the embedding C structs to their impl counterparts, shared by the C units
// that create or drive collections (embedding.cc, replica.cc). Each returns a clear error naming
// the field; none has side effects.
#pragma once

#include <cstddef>

#include "impl/embedding/collection.h"
#include "shardrec/embedding.h"

namespace shardrec::capi {

// The C form of an optimizer config (every field of the current version).
void FromOptimizer(const optim::OptimizerConfig& c, shardrec_optimizer_config_t* out);
// Index of `table` in the collection's plan; ENOTFOUND naming it otherwise.
Status FindTable(const embedding::EmbeddingCollection& coll, const char* table, int32_t* out);
// NULL means the defaults.
Status ToOptimizer(const shardrec_optimizer_config_t* c, optim::OptimizerConfig* out);
// NULL means the defaults. The optimizer's stochastic-rounding seed is the collection's seed.
Status ToCollectionOptions(const shardrec_embedding_options_t* o,
                           embedding::CollectionOptions* out);
Status ToBatch(const shardrec_kjt_view_t* b, embedding::Batch* out);
// A float32 output or gradient view with `row_width` columns: its data, element count and device.
Status ToFloatRows(const shardrec_tensor_view_t* v, int64_t row_width, const char* what,
                   float** data, size_t* count, Device* device);

}  // namespace shardrec::capi
