/**
 * @file cpp/inference.hpp
 * shardrec::Inference (serving a checkpoint, inference.h) and shardrec::InferenceSnapshot (one
 * pinned version of it). Lookups, dense-tensor reads and pins are const and safe from any number
 * of threads at once; reload() and apply_delta() publish a new version beside them. Included by
 * shardrec.hpp.
 */
#ifndef SHARDREC_CPP_INFERENCE_HPP_
#define SHARDREC_CPP_INFERENCE_HPP_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardrec/cpp/error.hpp"

namespace shardrec {

/** A serving table's shape and storage (shardrec_inference_table_info). */
struct ServingTable {
  std::string name;
  int64_t rows = 0;
  int32_t dim = 0;
  int32_t storage = SHARDREC_SERVING_AS_TRAINED;  ///< A shardrec_serving_storage_t.
};

/**
 * One version of a serving handle, pinned: its lookups and dense tensors stay that version's
 * however often the handle reloads, until the snapshot is destroyed (also after the Inference
 * is). Move-only; any threads.
 */
class InferenceSnapshot {
 public:
  InferenceSnapshot() = default;
  explicit InferenceSnapshot(shardrec_inference_version_t* handle) : h_(handle) {}

  uint64_t version() const {
    uint64_t v = 0;
    check(shardrec_inference_snapshot_version(h(), &v));
    return v;
  }

  /** Lookup of @p batch into @p out, as Inference::lookup, in this version. */
  void lookup(const shardrec_kjt_view_t& batch, std::span<float> out) const {
    check(shardrec_inference_snapshot_lookup(h(), &batch, out.data(), out.size()));
  }

  /** Lookup of a VBE batch into @p out, as Inference::lookup, in this version. */
  void lookup(const shardrec_kjt_vbe_view_t& batch, std::span<float> out) const {
    check(shardrec_inference_snapshot_lookup_vbe(h(), &batch, out.data(), out.size()));
  }

  /** A dense tensor of this version, zero-copy: valid while the snapshot lives. */
  std::span<const float> dense_tensor(const std::string& name) const {
    const float* data = nullptr;
    size_t count = 0;
    check(
        shardrec_inference_snapshot_dense_tensor(h(), detail::c_str(name, "name"), &data, &count));
    return {data, count};
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_inference_version_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_inference_version_t* h() const {
    return detail::live(h_.get(), "shardrec::InferenceSnapshot");
  }
  struct Deleter {
    void operator()(shardrec_inference_version_t* v) const noexcept { shardrec_inference_unpin(v); }
  };
  std::unique_ptr<shardrec_inference_version_t, Deleter> h_;
};

/** A checkpoint (or serving file) opened for lookups. Move-only; see the file comment. */
class Inference {
 public:
  Inference() = default;
  explicit Inference(shardrec_inference_t* handle) : h_(handle) {}

  /** Opens a checkpoint folder or a serving file (shardrec_inference_open). */
  static Inference open(const std::string& path,
                        const shardrec_inference_options_t* options = nullptr) {
    shardrec_inference_t* i = nullptr;
    check(shardrec_inference_open(detail::c_str(path, "path"), options, &i));
    return Inference(i);
  }

  /** Writes the current version as a serving file (shardrec_inference_save). */
  void save(const std::string& path) const {
    check(shardrec_inference_save(h(), detail::c_str(path, "path")));
  }

  int64_t output_dim() const {
    int64_t d = 0;
    check(shardrec_inference_output_dim(h(), &d));
    return d;
  }

  bool is_sequence() const {
    int32_t s = 0;
    check(shardrec_inference_is_sequence(h(), &s));
    return s != 0;
  }

  size_t num_features() const {
    size_t n = 0;
    check(shardrec_inference_num_features(h(), &n));
    return n;
  }

  std::vector<ServingTable> tables() const {
    size_t n = 0;
    check(shardrec_inference_num_tables(h(), &n));
    std::vector<ServingTable> out(n);
    for (size_t i = 0; i < n; ++i) {
      const char* name = nullptr;
      check(
          shardrec_inference_table_info(h(), i, &name, &out[i].rows, &out[i].dim, &out[i].storage));
      out[i].name = name;
    }
    return out;
  }

  /** The version lookups read now (each reload or delta publishes a new one). */
  uint64_t version() const {
    uint64_t v = 0;
    check(shardrec_inference_version(h(), &v));
    return v;
  }

  /**
   * Lookup of @p batch into @p out (batch_size x output_dim pooled, num_values x output_dim for
   * a sequence handle); returns the version it read.
   */
  uint64_t lookup(const shardrec_kjt_view_t& batch, std::span<float> out) const {
    uint64_t v = 0;
    check(shardrec_inference_lookup(h(), &batch, out.data(), out.size(), &v));
    return v;
  }

  /** Floats the lookup of a VBE batch writes (shardrec_inference_vbe_output_len). */
  size_t output_size(const shardrec_kjt_vbe_view_t& batch) const {
    size_t n = 0;
    check(shardrec_inference_vbe_output_len(h(), &batch, &n));
    return n;
  }

  /**
   * Lookup of a VBE batch (shardrec_kjt_vbe_view_t) into @p out (output_size(batch) floats):
   * with inverse indices bit for bit the lookup of the expanded batch, each distinct bag looked
   * up once; without, each feature's B_f rows feature-major. Returns the version it read.
   */
  uint64_t lookup(const shardrec_kjt_vbe_view_t& batch, std::span<float> out) const {
    uint64_t v = 0;
    check(shardrec_inference_lookup_vbe(h(), &batch, out.data(), out.size(), &v));
    return v;
  }

  /** lookup() of a VBE batch into a new vector. */
  std::vector<float> lookup(const shardrec_kjt_vbe_view_t& batch) const {
    std::vector<float> out(output_size(batch));
    lookup(batch, out);
    return out;
  }

  /** The scale and bias of rows of an int8 or int4 table (value = code x scale + bias; a lookup
   *  of a row is within scale / 2 of the trained value), or of an FP8 one (bias 0; value =
   *  decoded code x scale); @p ids are a fixed table's row indices
   *  or a dynamic table's ids (an id without a row: scale 0, bias 0). Returns the version read
   *  (shardrec_inference_row_scales). */
  struct RowScales {
    std::vector<float> scales;
    std::vector<float> biases;
    uint64_t version = 0;
  };
  RowScales row_scales(const std::string& table, std::span<const int64_t> ids) const {
    RowScales r;
    r.scales.resize(ids.size());
    r.biases.resize(ids.size());
    check(shardrec_inference_row_scales(h(), detail::c_str(table, "table"), ids.data(), ids.size(),
                                        r.scales.data(), r.biases.data(), &r.version));
    return r;
  }

  /** The row cache statistics of @p table, served from the checkpoint's files (a tier of the
   *  open options, shardrec_serving_tier_t), in the current version
   *  (shardrec_inference_tier_stats): Error EINVAL for a table held in memory, ENOTFOUND for an
   *  unknown one. Safe beside lookups and a reload. */
  shardrec_serving_tier_stats_t tier_stats(const std::string& table) const {
    shardrec_serving_tier_stats_t s = SHARDREC_SERVING_TIER_STATS_INIT;
    check(shardrec_inference_tier_stats(h(), detail::c_str(table, "table"), &s));
    return s;
  }

  /** lookup() into a new vector. */
  std::vector<float> lookup(const shardrec_kjt_view_t& batch) const {
    const int64_t rows = is_sequence() ? static_cast<int64_t>(batch.num_values) : batch.batch_size;
    std::vector<float> out(rows < 0 ? 0 : static_cast<size_t>(rows * output_dim()));
    lookup(batch, out);
    return out;
  }

  /**
   * A dense tensor of the current version, zero-copy: valid until this handle reloads or is
   * destroyed (pin() a snapshot to read across reloads).
   */
  std::span<const float> dense_tensor(const std::string& name) const {
    const float* data = nullptr;
    size_t count = 0;
    check(
        shardrec_inference_dense_tensor(h(), detail::c_str(name, "name"), &data, &count, nullptr));
    return {data, count};
  }

  /** Pins the current version. */
  InferenceSnapshot pin() const {
    shardrec_inference_version_t* v = nullptr;
    check(shardrec_inference_pin(h(), &v));
    return InferenceSnapshot(v);
  }

  /** Publishes the checkpoint at @p path as the next version (lookups go on meanwhile). */
  void reload(const std::string& path) {
    check(shardrec_inference_reload(h(), detail::c_str(path, "path")));
  }

  /**
   * Applies a delta to @p table (rows: ids.size() x dim; SHARDREC_DELTA_FULL in @p flags
   * replaces a dynamic table) and returns the version published.
   */
  uint64_t apply_delta(const std::string& table, std::span<const int64_t> ids,
                       std::span<const float> rows, std::span<const int64_t> tombstones,
                       uint32_t flags = 0) {
    uint64_t v = 0;
    check(shardrec_inference_apply_delta_ext(h(), detail::c_str(table, "table"), ids.data(),
                                             rows.data(), ids.size(), tombstones.data(),
                                             tombstones.size(), flags, &v));
    return v;
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_inference_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_inference_t* h() const { return detail::live(h_.get(), "shardrec::Inference"); }
  struct Deleter {
    void operator()(shardrec_inference_t* i) const noexcept { shardrec_inference_destroy(i); }
  };
  std::unique_ptr<shardrec_inference_t, Deleter> h_;
};

}  // namespace shardrec

#endif  // SHARDREC_CPP_INFERENCE_HPP_
