// Which tables a replica sync touches: a data-parallel dynamic table whose data-parallel group is
// the whole mesh is already the same on every rank, so the sync leaves it alone.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/embedding/collection.h"
#include "impl/replica/sync.h"

namespace shardrec::replica {

// Whether a sync over `replicas` replica groups' worth of ranks leaves table `table` of `coll`
// alone: a data-parallel dynamic table whose data-parallel group spans every replica (the mesh's
// default, the world). Its copies agree on every insert over that group (dp_agree.h) and its
// gradients reduce over it, so every rank already holds the same bytes, and an average of
// identical copies (sum / n in fp32) need not give back the same bits for n >= 3. A fixed
// data-parallel table is still averaged (unchanged behaviour). Decided by the plan and the group
// sizes, so every replica decides alike.
bool SyncLeavesAlone(const embedding::EmbeddingCollection& coll, int32_t table, int replicas);

// Removes from `buffers` (host arenas; `on_device` is kept index-aligned with it) the elements of
// the shards SyncLeavesAlone names: their weights and optimizer states. A buffer the cuts split
// becomes its pieces; nothing else changes, so a collection without such a table syncs as before.
void CutLeftAlone(embedding::EmbeddingCollection& coll, int replicas,
                  std::vector<SyncBuffer>* buffers, std::vector<embedding::ParamBuffer>* on_device);

}  // namespace shardrec::replica
