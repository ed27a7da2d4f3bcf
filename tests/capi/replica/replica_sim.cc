// ReplicaSim: the 2D reference (see replica_sim.h). The rank layout is written out here
// independently of impl/replica so that the test checks it rather than repeats it.
#include "tests/capi/replica/replica_sim.h"

#include "shardrec/replica.h"

namespace shardrec::testing {

ReplicaSim::ReplicaSim(const Scenario& s, int32_t world, int32_t layout, int32_t interval,
                       bool weights_only)
    : world_(world),
      shard_size_(s.world),
      replicas_(world / s.world),
      layout_(layout),
      interval_(interval),
      weights_only_(weights_only),
      num_tables_(s.tables.size()),
      tables_(s.tables) {
  for (int32_t g = 0; g < replicas_; ++g) {
    models_.emplace_back(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  }
}

int32_t ReplicaSim::GroupOf(int32_t rank) const {
  // Default: sharding group g = {g, g+R, g+2R, ...}; inter-host: {g*S, ..., g*S+S-1}.
  return layout_ == SHARDREC_MESH_LAYOUT_DEFAULT ? rank % replicas_ : rank / shard_size_;
}

int32_t ReplicaSim::PlanRankOf(int32_t rank) const {
  return layout_ == SHARDREC_MESH_LAYOUT_DEFAULT ? rank / replicas_ : rank % shard_size_;
}

SimResult ReplicaSim::Train(const std::vector<std::vector<RefBatch>>& batches,
                            const std::vector<std::vector<std::vector<float>>>& grads) {
  SimResult result;
  for (size_t step = 0; step < batches.size(); ++step) {
    std::vector<std::vector<float>> outs(world_);
    for (int32_t r = 0; r < world_; ++r) outs[r] = models_[GroupOf(r)].Forward(batches[step][r]);
    result.outputs.push_back(std::move(outs));
    for (int32_t g = 0; g < replicas_; ++g) {
      std::vector<RefBatch> gb(shard_size_);
      std::vector<std::vector<float>> gg(shard_size_);
      for (int32_t r = 0; r < world_; ++r) {
        if (GroupOf(r) != g) continue;
        gb[PlanRankOf(r)] = batches[step][r];
        gg[PlanRankOf(r)] = grads[step][r];
      }
      models_[g].Backward(gb, gg);
    }
    if ((step + 1) % interval_ == 0) Average();
  }
  return result;
}

void ReplicaSim::Average() {
  auto average = [&](auto get) {
    std::vector<float>& first = get(models_[0]);
    for (size_t i = 0; i < first.size(); ++i) {
      float sum = 0.0f;
      for (auto& m : models_) sum += get(m)[i];
      const float avg = sum / static_cast<float>(replicas_);
      for (auto& m : models_) get(m)[i] = avg;
    }
  };
  for (size_t t = 0; t < num_tables_; ++t) {
    average([t](ReferenceModel& m) -> std::vector<float>& { return m.mutable_weights(t); });
    if (IsFp8Storage(tables_[t].dtype)) {
      const int32_t dim = tables_[t].dim;
      for (auto& m : models_) {
        std::vector<float>& w = m.mutable_weights(t);
        for (size_t r = 0; r * dim < w.size(); ++r)
          RoundRowToFp8(w.data() + r * dim, dim, tables_[t].dtype);
      }
    }
    if (weights_only_) continue;
    for (const char* name : {"momentum1", "momentum2"}) {
      if (models_[0].state(t, name).empty()) continue;
      average(
          [t, name](ReferenceModel& m) -> std::vector<float>& { return m.mutable_state(t, name); });
    }
  }
}

}  // namespace shardrec::testing
