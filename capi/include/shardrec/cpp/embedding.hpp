/**
 * @file cpp/embedding.hpp
 * shardrec::EmbeddingCollection: the collection (embedding.h) with its dynamic-table statistics
 * and deltas (dynamic.h) and checkpoints (checkpoint.h). Included by shardrec.hpp.
 */
#ifndef SHARDREC_CPP_EMBEDDING_HPP_
#define SHARDREC_CPP_EMBEDDING_HPP_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/cpp/comm.hpp"
#include "shardrec/cpp/error.hpp"
#include "shardrec/cpp/plan.hpp"

namespace shardrec {

/** One rank's batch in keyed-jagged form, over caller memory (see shardrec_kjt_view_t). */
inline shardrec_kjt_view_t kjt_view(int64_t batch_size, size_t num_features,
                                    std::span<const int32_t> lengths,
                                    std::span<const int64_t> values,
                                    std::span<const float> weights = {}) {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = batch_size;
  v.num_features = num_features;
  v.lengths = lengths.data();
  v.num_lengths = lengths.size();
  v.values = values.data();
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = values.size();
  v.weights = weights.empty() ? nullptr : weights.data();
  v.num_weights = weights.size();
  return v;
}

/**
 * A batch with a batch size per feature (VBE, see shardrec_kjt_vbe_view_t) over caller memory:
 * @p kjt's lengths hold sum_f B_f bags feature-major; with @p inverse_indices (F x
 * kjt.batch_size) the output is that of the expanded batch, without them (std::nullopt, the
 * default) kjt.batch_size must be the largest B_f and the output is feature-major. A span given
 * is inverse indices even when it is empty (a zero-size batch, kjt.batch_size 0: the view then
 * carries a non-NULL pointer with 0 entries, as the C API asks). The spans must outlive the
 * view's use.
 */
inline shardrec_kjt_vbe_view_t kjt_vbe_view(
    const shardrec_kjt_view_t& kjt, std::span<const int64_t> feature_batch_sizes,
    std::optional<std::span<const int64_t>> inverse_indices = std::nullopt) {
  static constexpr int64_t kNoEntry = 0;  // the address of an empty array of inverse indices
  shardrec_kjt_vbe_view_t v = SHARDREC_KJT_VBE_VIEW_INIT;
  v.kjt = kjt;
  v.feature_batch_sizes = feature_batch_sizes.data();
  v.num_feature_batch_sizes = feature_batch_sizes.size();
  if (inverse_indices) {
    v.inverse_indices = inverse_indices->data() != nullptr ? inverse_indices->data() : &kNoEntry;
    v.num_inverse_indices = inverse_indices->size();
  }
  return v;
}

/** Where one feature's block sits in a forward output row (TorchRec's KeyedTensor keys). */
struct OutputBlock {
  std::string feature;
  std::string table;
  int64_t offset = 0;
  int64_t width = 0;
};

/** One optimizer state of a table: its name and whether it holds one value per row. */
struct StateInfo {
  std::string name;
  bool row_wise = false;
};

/** A dynamic table's changes since the marks (EmbeddingCollection::dynamic_delta). */
struct DynamicDelta {
  int64_t dim = 0;                  ///< Width of a row.
  std::vector<int64_t> ids;         ///< Changed rows' ids, ascending.
  std::vector<float> rows;          ///< ids.size() x dim weights, row-major.
  std::vector<int64_t> tombstones;  ///< Ids that left and have no row now.
  bool full = false;                ///< A checkpoint load replaced the table since the marks.
};

/** This rank's part of a sharded embedding collection. Move-only; one thread at a time. */
class EmbeddingCollection {
 public:
  EmbeddingCollection() = default;
  explicit EmbeddingCollection(shardrec_embedding_t* handle) : h_(handle) {}

  /** Collective over @p comm: every rank passes the same plan. NULL optimizer/options: defaults. */
  static EmbeddingCollection create(const Plan& plan, Comm& comm,
                                    const shardrec_optimizer_config_t* optimizer = nullptr,
                                    const shardrec_embedding_options_t* options = nullptr) {
    shardrec_embedding_t* e = nullptr;
    check(shardrec_embedding_create(&e, detail::live(plan.get(), "shardrec::Plan"),
                                    detail::live(comm.get(), "shardrec::Comm"), optimizer,
                                    options));
    return EmbeddingCollection(e);
  }

  /** Width of one output row (the sum of the feature blocks). */
  int64_t output_dim() const {
    int64_t d = 0;
    check(shardrec_embedding_output_dim(h(), &d));
    return d;
  }

  /** Whether the collection is a sequence (NONE-pooled) one: one output row per id. */
  bool is_sequence() const {
    int32_t s = 0;
    check(shardrec_embedding_is_sequence(h(), &s));
    return s != 0;
  }

  /**
   * Floats of the forward output of @p batch: batch_size x output_dim pooled, num_values x
   * output_dim for a sequence collection; 0 for a batch whose size is negative (the forward
   * then refuses it with its own message).
   */
  size_t output_size(const shardrec_kjt_view_t& batch) const {
    const int64_t rows = is_sequence() ? static_cast<int64_t>(batch.num_values) : batch.batch_size;
    return rows < 0 ? 0 : static_cast<size_t>(rows) * static_cast<size_t>(output_dim());
  }

  /**
   * Lookup of @p batch into @p out (output_size(batch) floats, row-major: [batch_size,
   * output_dim] pooled, [num_values, output_dim] for a sequence collection). Collective.
   */
  void forward(const shardrec_kjt_view_t& batch, std::span<float> out) {
    check(shardrec_embedding_forward(h(), &batch, out.data(), out.size(), nullptr));
  }

  /** forward() into a new vector of output_size(batch) floats. */
  std::vector<float> forward(const shardrec_kjt_view_t& batch) {
    std::vector<float> out(output_size(batch));
    forward(batch, out);
    return out;
  }

  /** Floats of the forward output of a VBE batch (shardrec_embedding_vbe_output_len). */
  size_t output_size(const shardrec_kjt_vbe_view_t& batch) const {
    size_t n = 0;
    check(shardrec_embedding_vbe_output_len(h(), &batch, &n));
    return n;
  }

  /**
   * Forward of a VBE batch into @p out (output_size(batch) floats; the layout of
   * shardrec_kjt_vbe_view_t). Collective; the backward that follows takes a gradient of the same
   * layout. Host collections only.
   */
  void forward(const shardrec_kjt_vbe_view_t& batch, std::span<float> out) {
    check(shardrec_embedding_forward_vbe(h(), &batch, out.data(), out.size(), nullptr));
  }

  /** forward() of a VBE batch into a new vector of output_size(batch) floats. */
  std::vector<float> forward(const shardrec_kjt_vbe_view_t& batch) {
    std::vector<float> out(output_size(batch));
    forward(batch, out);
    return out;
  }

  /** Gradient of the last forward's output; updates the tables with their optimizers. */
  void backward(std::span<const float> grad) {
    check(shardrec_embedding_backward(h(), grad.data(), grad.size(), nullptr));
  }

  void set_learning_rate(float lr) { check(shardrec_embedding_set_learning_rate(h(), lr)); }

  void set_learning_rate(const std::string& table, float lr) {
    check(shardrec_embedding_set_table_learning_rate(h(), table.c_str(), lr));
  }

  /** The feature blocks of an output row, in order. */
  std::vector<OutputBlock> outputs() const {
    size_t n = 0;
    check(shardrec_embedding_num_outputs(h(), &n));
    std::vector<OutputBlock> out(n);
    for (size_t i = 0; i < n; ++i) {
      const char* feature = nullptr;
      const char* table = nullptr;
      check(
          shardrec_embedding_output_info(h(), i, &feature, &table, &out[i].offset, &out[i].width));
      out[i].feature = feature;
      out[i].table = table;
    }
    return out;
  }

  /** Where this rank's time went since creation; samples / total_seconds is its samples/s. */
  shardrec_step_timings_t step_timings() const {
    shardrec_step_timings_t t = SHARDREC_STEP_TIMINGS_INIT;
    check(shardrec_embedding_step_timings(h(), &t));
    return t;
  }

  /** The dynamic-table counters of @p table on this rank (shardrec_embedding_dynamic_stats;
   *  table-wide figures are their sums over ranks). */
  shardrec_dynamic_table_stats_t dynamic_stats(const std::string& table) const {
    shardrec_dynamic_table_stats_t s = SHARDREC_DYNAMIC_TABLE_STATS_INIT;
    check(shardrec_embedding_dynamic_stats(h(), detail::c_str(table, "table"), &s));
    return s;
  }

  /** The dynamic-table counters of @p table over the whole table: the sums over ranks, the same
   *  on every rank (collective: every rank calls it for the same table;
   *  shardrec_embedding_dynamic_stats_global). */
  shardrec_dynamic_table_stats_t dynamic_stats_global(const std::string& table) {
    shardrec_dynamic_table_stats_t s = SHARDREC_DYNAMIC_TABLE_STATS_INIT;
    check(shardrec_embedding_dynamic_stats_global(h(), detail::c_str(table, "table"), &s));
    return s;
  }

  /** The counters of tiered table @p table on this rank (shardrec_embedding_tier_stats;
   *  docs/disk-tier.md). The collection's options name its tiers (shardrec_table_tier_t). */
  shardrec_tier_stats_t tier_stats(const std::string& table) const {
    shardrec_tier_stats_t s = SHARDREC_TIER_STATS_INIT;
    check(shardrec_embedding_tier_stats(h(), detail::c_str(table, "table"), &s));
    return s;
  }

  /** Starts a delta period of dynamic table @p table (every rank between the same steps). */
  void dynamic_mark(const std::string& table) {
    check(shardrec_embedding_dynamic_mark(h(), detail::c_str(table, "table")));
  }

  /**
   * The whole dynamic table's changes since the marks, on every rank (collective; two C calls,
   * the sizes then the fill, on every rank alike; shardrec_embedding_dynamic_delta_ext). The
   * table must be read by a feature of the collection (its width comes from outputs()).
   */
  DynamicDelta dynamic_delta(const std::string& table) {
    const char* name = detail::c_str(table, "table");
    size_t rows = 0, tombstones = 0;
    uint32_t flags = 0;
    const shardrec_status_t sized = shardrec_embedding_dynamic_delta_ext(
        h(), name, nullptr, nullptr, 0, nullptr, 0, &rows, &tombstones, &flags);
    DynamicDelta d;
    d.full = (flags & SHARDREC_DELTA_FULL) != 0;
    if (sized == SHARDREC_OK) return d;
    // Too-small (empty) buffers are EINVAL with the sizes set; any other failure is the answer.
    if (sized != SHARDREC_EINVAL || (rows == 0 && tombstones == 0)) check(sized);
    for (const OutputBlock& b : outputs()) {
      if (b.table == table) d.dim = b.width;
    }
    if (d.dim == 0) {
      // The fill below is collective: meet the peers with a refusal instead of leaving them.
      (void)shardrec_embedding_dynamic_delta_ext(h(), name, nullptr, nullptr, 0, nullptr, 0, &rows,
                                                 &tombstones, &flags);
      throw Error(SHARDREC_EINVAL,
                  "dynamic_delta: no feature reads table '" + table + "', so its width is unknown");
    }
    d.ids.resize(rows);
    d.rows.resize(rows * static_cast<size_t>(d.dim));
    d.tombstones.resize(tombstones);
    check(shardrec_embedding_dynamic_delta_ext(h(), name, d.ids.data(), d.rows.data(), rows,
                                               d.tombstones.data(), tombstones, &rows, &tombstones,
                                               &flags));
    d.full = (flags & SHARDREC_DELTA_FULL) != 0;
    return d;
  }

  /** Sets eviction scores of held rows (SHARDREC_EVICTION_SCORE tables); returns how many of
   *  the ids had a row here. */
  size_t dynamic_set_scores(const std::string& table, std::span<const int64_t> ids,
                            std::span<const double> scores) {
    if (ids.size() != scores.size()) {
      throw Error(SHARDREC_EINVAL, "dynamic_set_scores: " + std::to_string(ids.size()) +
                                       " ids but " + std::to_string(scores.size()) + " scores");
    }
    size_t set = 0;
    check(shardrec_embedding_dynamic_set_scores(h(), detail::c_str(table, "table"), ids.data(),
                                                scores.data(), ids.size(), &set));
    return set;
  }

  /** Writes a checkpoint of the collection into folder @p dir (collective;
   *  shardrec_checkpoint_save). @p options may name dense tensors saved beside it. */
  void save_checkpoint(const std::string& dir,
                       const shardrec_checkpoint_options_t* options = nullptr) {
    check(shardrec_checkpoint_save(h(), detail::c_str(dir, "dir"), options));
  }

  /** Loads the checkpoint in @p dir (collective; all or nothing by default;
   *  shardrec_checkpoint_load). */
  void load_checkpoint(const std::string& dir,
                       const shardrec_checkpoint_options_t* options = nullptr) {
    check(shardrec_checkpoint_load(h(), detail::c_str(dir, "dir"), options));
  }

  /** Writes one table to the file @p path (collective; shardrec_checkpoint_export_table). */
  void export_table(const std::string& table, const std::string& path,
                    bool with_optimizer_state = false) {
    check(shardrec_checkpoint_export_table(h(), detail::c_str(table, "table"),
                                           detail::c_str(path, "path"),
                                           with_optimizer_state ? 1 : 0));
  }

  /** Reads one table from a file export_table wrote (collective). */
  void import_table(const std::string& table, const std::string& path,
                    bool with_optimizer_state = false) {
    check(shardrec_checkpoint_import_table(h(), detail::c_str(table, "table"),
                                           detail::c_str(path, "path"),
                                           with_optimizer_state ? 1 : 0));
  }

  /** Starts distributing @p batch's ids (pipelining; shardrec_embedding_input_dist_start). */
  void input_dist_start(const shardrec_kjt_view_t& batch, void* stream = nullptr) {
    check(shardrec_embedding_input_dist_start(h(), &batch, stream));
  }

  /** input_dist_start() of a VBE batch (shardrec_embedding_input_dist_start_vbe); the
   *  forward_distributed() that follows writes output_size(batch) floats. */
  void input_dist_start(const shardrec_kjt_vbe_view_t& batch, void* stream = nullptr) {
    check(shardrec_embedding_input_dist_start_vbe(h(), &batch, stream));
  }

  /** Waits for the distribution input_dist_start began. */
  void input_dist_wait(void* stream = nullptr) {
    check(shardrec_embedding_input_dist_wait(h(), stream));
  }

  /** The forward of the distributed batch into @p out (as forward()). */
  void forward_distributed(std::span<float> out, void* stream = nullptr) {
    check(shardrec_embedding_forward_distributed(h(), out.data(), out.size(), stream));
  }

  /** forward() into a tensor view (host or device memory; shardrec_embedding_forward_tensor). */
  void forward(const shardrec_kjt_view_t& batch, const shardrec_tensor_view_t& out,
               void* stream = nullptr) {
    check(shardrec_embedding_forward_tensor(h(), &batch, &out, stream));
  }

  /** forward() of a VBE batch into a tensor view (shardrec_embedding_forward_vbe_tensor). */
  void forward(const shardrec_kjt_vbe_view_t& batch, const shardrec_tensor_view_t& out,
               void* stream = nullptr) {
    check(shardrec_embedding_forward_vbe_tensor(h(), &batch, &out, stream));
  }

  void forward_distributed(const shardrec_tensor_view_t& out, void* stream = nullptr) {
    check(shardrec_embedding_forward_distributed_tensor(h(), &out, stream));
  }

  void backward(const shardrec_tensor_view_t& grad, void* stream = nullptr) {
    check(shardrec_embedding_backward_tensor(h(), &grad, stream));
  }

  /** Waits for the device work of the last step (shardrec_embedding_synchronize). */
  void synchronize() { check(shardrec_embedding_synchronize(h())); }

  /** Optimizer steps taken (the bias-correction counter). */
  int64_t num_steps() const {
    int64_t n = 0;
    check(shardrec_embedding_num_steps(h(), &n));
    return n;
  }

  void set_num_steps(int64_t steps) { check(shardrec_embedding_set_num_steps(h(), steps)); }

  /** Training mode (the default) or evaluation (forwards admit and count nothing). */
  void set_training(bool training) { check(shardrec_embedding_set_training(h(), training)); }

  bool is_training() const {
    int32_t t = 0;
    check(shardrec_embedding_is_training(h(), &t));
    return t != 0;
  }

  /** Seconds spent communicating and in total since creation. */
  std::pair<double, double> timings() const {
    double comm = 0, total = 0;
    check(shardrec_embedding_timings(h(), &comm, &total));
    return {comm, total};
  }

  /** The optimizer configuration of @p table. */
  shardrec_optimizer_config_t table_optimizer(const std::string& table) const {
    shardrec_optimizer_config_t c = SHARDREC_OPTIMIZER_CONFIG_INIT;
    check(shardrec_embedding_table_optimizer(h(), detail::c_str(table, "table"), &c));
    return c;
  }

  /** The optimizer states of the collection's optimizer (or of @p table's, when given). */
  std::vector<StateInfo> states(const std::string& table = {}) const {
    size_t n = 0;
    if (table.empty()) {
      check(shardrec_embedding_num_states(h(), &n));
    } else {
      check(shardrec_embedding_table_num_states(h(), detail::c_str(table, "table"), &n));
    }
    std::vector<StateInfo> out(n);
    for (size_t i = 0; i < n; ++i) {
      const char* name = nullptr;
      int32_t row_wise = 0;
      if (table.empty()) {
        check(shardrec_embedding_state_info(h(), i, &name, &row_wise));
      } else {
        check(shardrec_embedding_table_state_info(h(), table.c_str(), i, &name, &row_wise));
      }
      out[i] = StateInfo{name, row_wise != 0};
    }
    return out;
  }

  /** Optimizer state @p state of @p table in full ([rows] or [rows, dim]; collective). */
  void get_state(const std::string& table, const std::string& state, std::span<float> out) {
    check(shardrec_embedding_get_state(h(), detail::c_str(table, "table"),
                                       detail::c_str(state, "state"), out.data(), out.size()));
  }

  void set_state(const std::string& table, const std::string& state,
                 std::span<const float> values) {
    check(shardrec_embedding_set_state(h(), detail::c_str(table, "table"),
                                       detail::c_str(state, "state"), values.data(),
                                       values.size()));
  }

  /** The full weights of @p table ([rows, dim], collective). */
  void get_weights(const std::string& table, std::span<float> out) {
    check(
        shardrec_embedding_get_weights(h(), detail::c_str(table, "table"), out.data(), out.size()));
  }

  void set_weights(const std::string& table, std::span<const float> weights) {
    check(shardrec_embedding_set_weights(h(), detail::c_str(table, "table"), weights.data(),
                                         weights.size()));
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_embedding_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_embedding_t* h() const {
    return detail::live(h_.get(), "shardrec::EmbeddingCollection");
  }

  struct Deleter {
    void operator()(shardrec_embedding_t* e) const noexcept { shardrec_embedding_destroy(e); }
  };
  std::unique_ptr<shardrec_embedding_t, Deleter> h_;
};

}  // namespace shardrec

#endif  // SHARDREC_CPP_EMBEDDING_HPP_
