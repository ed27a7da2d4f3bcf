// The collection's side of the storage seam (table_storage.h): the model and parameter calls go
// to the collection's own, the keyed-rows calls to its dynamic tables, which stay the
// collection's (nothing else is handed them).
#include <algorithm>
#include <memory>

#include "impl/core/check.h"
#include "impl/embedding/collection.h"
#include "impl/embedding/dynamic/delta.h"
#include "impl/embedding/dynamic/replica_merge.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::embedding {

// A friend of EmbeddingCollection (its dynamic tables are private); one per collection, made
// on first use.
class CollectionStorage final : public TableStorage {
 public:
  explicit CollectionStorage(EmbeddingCollection& coll) : coll_(coll) {}

  const sharding::Plan& plan() const override { return coll_.plan(); }
  const Layout& layout() const override { return coll_.layout(); }
  comm::Communicator& comm() override { return coll_.comm(); }
  const optim::OptimizerConfig& table_optimizer(int32_t table) const override {
    return coll_.table_optimizer(table);
  }
  Status TableStates(const std::string& table, std::vector<StateInfo>* out) const override {
    return coll_.TableStates(table, out);
  }
  int data_parallel_size() const override { return coll_.data_parallel_size(); }

  std::vector<ParamBuffer> ParamBuffers() override { return coll_.ParamBuffers(); }
  std::vector<ShardTensor> ShardTensors() override {
    std::vector<ShardTensor> out = coll_.ShardTensors();
    // FP8 weights go out as fp32 rows streamed through ReadTieredRows / WriteTieredRows, as a
    // tiered shard's do: a checkpoint holds their decoded values (exact) in fp32 records, and a
    // load encodes each row again, which gives back the same bytes (encoding is idempotent).
    for (ShardTensor& t : out) {
      if (t.state >= 0 || !IsFp8DType(t.dtype)) continue;
      t.streamed = true;
      t.dtype = DType::kFloat32;
      t.data = nullptr;
      t.row_stride = t.cols;
    }
    const auto& tiered = coll_.s_.tiered;
    if (tiered == nullptr) return out;
    for (ShardTensor& t : out) {
      if (tiered->ShardOf(t.local) < 0) continue;
      t.streamed = true;
      t.rows = tiered->Rows(t.local);
      t.data = nullptr;
    }
    return out;
  }
  Status GetWeights(const std::string& table, float* out, size_t len) override {
    return coll_.GetWeights(table, out, len);
  }
  Status GetState(const std::string& table, const std::string& state, float* out,
                  size_t len) override {
    return coll_.GetState(table, state, out, len);
  }

  int64_t num_steps() const override { return coll_.num_steps(); }
  Status SetNumSteps(int64_t steps) override { return coll_.SetNumSteps(steps); }
  bool input_dist_pending() const override { return coll_.input_dist_pending(); }
  Status Synchronize() override { return coll_.Synchronize(); }

  bool ExportKeyedRows(int32_t local, int64_t first, int64_t count, KeyedRows* out) const override {
    const dynamic::DynamicShard* shard = tables().Shard(local);
    if (shard == nullptr) return false;
    out->forwards = shard->forwards();
    out->size = shard->size();
    out->slots = shard->slots();
    const int64_t lo = std::clamp<int64_t>(first, 0, out->size);
    const int64_t hi = std::clamp<int64_t>(count, 0, out->size - lo) + lo;
    out->ids.clear();
    out->last_seen.clear();
    out->counts.clear();
    out->scores.clear();
    for (int64_t s = lo; s < hi; ++s) {
      out->ids.push_back(shard->id(s));
      out->last_seen.push_back(shard->last_seen(s));
      out->counts.push_back(shard->count(s));
    }
    const std::span<const double> scores = shard->scores();
    out->scored = !scores.empty();
    if (out->scored) out->scores.assign(scores.begin() + lo, scores.begin() + hi);
    if (lo == 0)
      out->sketch = shard->sketch();
    else
      out->sketch.clear();
    return true;
  }
  void ImportKeyedRows(int32_t local, const KeyedRows& rows, KeyedImport how) override {
    dynamic::DynamicShard* shard = tables().Shard(local);
    SR_CHECK(shard != nullptr);
    if (how == KeyedImport::kReplace) {
      shard->Restore(rows.forwards, rows.ids, rows.last_seen, rows.counts, rows.sketch);
      shard->RestoreScores(rows.scores);
      return;
    }
    shard->RestoreMerged(rows.forwards, rows.ids, rows.last_seen, rows.counts, rows.sketch, {});
    if (!rows.scores.empty()) shard->RestoreScores(rows.scores);
  }
  bool KeyedStats(int32_t table, dynamic::TableStats* out) const override {
    return tables().Stats(table, out);
  }
  Status MarkDelta(int32_t table) override {
    return dynamic::MarkDelta(coll_.layout(), tables(), table);
  }
  Status GatherDelta(int32_t table, dynamic::Delta* out) override {
    return dynamic::GatherDelta(*this, tables(), table, out);
  }
  Status GatherReplicaRows(dynamic::ReplicaMerge* merge, comm::Communicator& replica,
                           bool weights_only, const std::vector<bool>& leave_alone) override {
    return merge->Gather(coll_.layout(), coll_.ShardTensors(), tables(), leave_alone, replica,
                         weights_only);
  }
  void CommitReplicaRows(dynamic::ReplicaMerge* merge) override {
    merge->Commit(coll_.layout(), tables());
  }
  const std::string* TieredTable() const override {
    const auto& tiered = coll_.s_.tiered;
    if (tiered == nullptr) return nullptr;
    for (size_t t = 0; t < coll_.plan().tables.size(); ++t)
      if (tiered->IsTieredTable(static_cast<int32_t>(t))) return &coll_.plan().tables[t].name;
    return nullptr;
  }
  Status ReadTieredRows(int32_t local, int32_t state, int64_t first, int64_t count,
                        float* out) override {
    if (const LocalShard* ls = Fp8Weights(local, state)) {
      for (int64_t r = 0; r < count; ++r)
        coll_.s_.params.ReadRow(*ls, first + r, out + r * ls->cols);
      return Status::Ok();
    }
    SR_CHECK(coll_.s_.tiered != nullptr);
    return coll_.s_.tiered->ReadRows(local, state, first, count, out);
  }
  Status WriteTieredRows(int32_t local, int32_t state, int64_t first, int64_t count,
                         const float* in) override {
    if (const LocalShard* ls = Fp8Weights(local, state)) {
      for (int64_t r = 0; r < count; ++r)
        coll_.s_.params.WriteRow(*ls, first + r, in + r * ls->cols);
      return Status::Ok();
    }
    SR_CHECK(coll_.s_.tiered != nullptr);
    return coll_.s_.tiered->WriteRows(local, state, first, count, in);
  }
  Status SnapshotTieredShard(int32_t local, const std::string& dir,
                             const std::function<Status()>& usable) override {
    SR_CHECK(coll_.s_.tiered != nullptr);
    const dynamic::DynamicShard* keyed = tables().Shard(local);
    return coll_.s_.tiered->SnapshotShard(local, dir, keyed != nullptr ? keyed->size() : 0, usable);
  }
  bool TierStats(int32_t table, tiered::TierStats* out) const override {
    return coll_.s_.tiered != nullptr && coll_.s_.tiered->Stats(table, out);
  }

 private:
  // The local shard of `local` when `state` names its weights and they are FP8 rows in the
  // parameter arenas (not a tiered shard's cache: tiered tables refuse FP8), else null.
  const LocalShard* Fp8Weights(int32_t local, int32_t state) const {
    const LocalShard& ls = coll_.layout().local[static_cast<size_t>(local)];
    return state < 0 && IsFp8DType(ls.dtype) ? &ls : nullptr;
  }
  const dynamic::DynamicTables& tables() const { return coll_.s_.dynamic; }
  dynamic::DynamicTables& tables() { return coll_.s_.dynamic; }

  EmbeddingCollection& coll_;
};

TableStorage& EmbeddingCollection::storage() {
  if (storage_ == nullptr) storage_ = std::make_unique<CollectionStorage>(*this);
  return *storage_;
}

}  // namespace shardrec::embedding
