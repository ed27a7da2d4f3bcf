// FP8 weights in a replica sync: averaging the stored bytes would average codes, so the sync
// decodes every FP8 weight shard tensor to fp32 rows (exact), averages those with the other fp32
// buffers, and encodes each averaged row again. The average is the same bits on every replica
// and the encoding a function of a row's values alone (fp8.h), so every replica stores the same
// bytes afterwards.
#pragma once

#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/storage/table_storage.h"
#include "impl/replica/sync.h"

namespace shardrec::replica {

// The decoded rows of one sync, kept from sync to sync so their memory is reused.
struct Fp8SyncRows {
  std::vector<embedding::ShardTensor> tensors;
  std::vector<std::vector<float>> rows;  // rows[i]: tensors[i]'s rows x cols, decoded
};

// The byte arena FP8 weights live in (ParamStore hands it out as one kUInt8 weights buffer):
// the sync leaves it out and averages the decoded rows instead.
inline bool IsFp8Arena(const embedding::ParamBuffer& b) {
  return b.kind == embedding::ParamKind::kWeights && b.dtype == DType::kUInt8;
}

// Decodes every FP8 weight shard tensor of `storage` into `rows` and appends one fp32 averaged
// SyncBuffer per tensor to `buffers` (pointing into `rows`, which must outlive them).
Status DecodeFp8Weights(embedding::TableStorage& storage, Fp8SyncRows* rows,
                        std::vector<SyncBuffer>* buffers);
// Encodes the (averaged) rows back into their tensors.
Status EncodeFp8Weights(embedding::TableStorage& storage, const Fp8SyncRows& rows);

}  // namespace shardrec::replica
