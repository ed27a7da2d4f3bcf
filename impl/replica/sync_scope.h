// Which tables a replica sync averages: a data-parallel dynamic table whose data-parallel group is
// the whole mesh is already the same on every rank, so the sync leaves it alone, and the other
// dynamic tables are merged by key instead of averaged by slot.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/embedding/storage/table_storage.h"
#include "impl/replica/sync.h"

namespace shardrec::replica {

// Whether a sync over `replicas` replica groups' worth of ranks leaves table `table` of `storage`
// alone: a data-parallel dynamic table whose data-parallel group spans every replica (the mesh's
// default, the world). Its copies agree on every insert over that group (dp_agree.h) and its
// gradients reduce over it, so every rank already holds the same bytes, and an average of
// identical copies (sum / n in fp32) need not give back the same bits for n >= 3. A fixed
// data-parallel table is still averaged (unchanged behaviour). Decided by the plan and the group
// sizes, so every replica decides alike.
bool SyncLeavesAlone(const embedding::TableStorage& storage, int32_t table, int replicas);
// SyncLeavesAlone of every table of the plan, by table index.
std::vector<bool> TablesLeftAlone(const embedding::TableStorage& storage, int replicas);

// Removes from `buffers` (host arenas; `on_device` is kept index-aligned with it) the elements of
// every dynamic shard (replicas > 1): their weights and optimizer states. The shards
// SyncLeavesAlone names are the same on every replica already; the others are merged by key
// (dynamic/replica_merge.h), which rewrites every byte of them, so an average of their slots (which
// may hold other ids on other replicas) would only be overwritten. A buffer the cuts split becomes
// its pieces; nothing else changes, so a collection without dynamic tables syncs as before.
void CutDynamic(embedding::TableStorage& storage, int replicas, std::vector<SyncBuffer>* buffers,
                std::vector<embedding::ParamBuffer>* on_device);

}  // namespace shardrec::replica
