// FP8 weights in a replica sync (fp8_sync.h).
#include "impl/replica/fp8_sync.h"

namespace shardrec::replica {

Status DecodeFp8Weights(embedding::TableStorage& storage, Fp8SyncRows* rows,
                        std::vector<SyncBuffer>* buffers) {
  rows->tensors.clear();
  // The storage seam hands FP8 weights out as fp32 rows read through ReadTieredRows (tiered
  // tables, the other such tensors, are refused by a replica sync before this).
  for (const embedding::ShardTensor& t : storage.ShardTensors()) {
    if (t.state >= 0 || !t.streamed || t.rows == 0 || t.cols == 0) continue;
    if (!IsFp8DType(storage.plan().tables[static_cast<size_t>(t.table)].dtype)) continue;
    rows->tensors.push_back(t);
  }
  rows->rows.resize(rows->tensors.size());
  for (size_t i = 0; i < rows->tensors.size(); ++i) {
    const embedding::ShardTensor& t = rows->tensors[i];
    rows->rows[i].resize(static_cast<size_t>(t.rows * t.cols));
    SR_RETURN_IF_ERROR(storage.ReadTieredRows(t.local, t.state, 0, t.rows, rows->rows[i].data()));
  }
  for (std::vector<float>& r : rows->rows)
    buffers->push_back(SyncBuffer{r.data(), r.size(), DType::kFloat32, comm::ReduceOp::kAvg});
  return Status::Ok();
}

Status EncodeFp8Weights(embedding::TableStorage& storage, const Fp8SyncRows& rows) {
  for (size_t i = 0; i < rows.tensors.size(); ++i) {
    const embedding::ShardTensor& t = rows.tensors[i];
    SR_RETURN_IF_ERROR(storage.WriteTieredRows(t.local, t.state, 0, t.rows, rows.rows[i].data()));
  }
  return Status::Ok();
}

}  // namespace shardrec::replica
