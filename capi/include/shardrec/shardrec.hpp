/**
 * @file shardrec.hpp
 * Header-only C++20 layer over the libshardrec C API, for C++ services: RAII handles (move-only,
 * destroyed in their destructor), failures thrown as shardrec::Error carrying the status code
 * and the library's message, and std::span for caller buffers (never copied).
 *
 * Everything here is inline and calls only the stable C functions of shardrec.h, so the header
 * adds no ABI of its own: a program built against it links libshardrec like a C program.
 * The plain C structs (shardrec_table_config_t, shardrec_topology_t, ...) are used as they are;
 * start them from their _INIT macros.
 *
 * Thread-safety is that of the C objects: a Plan may be shared between threads once built, a
 * Comm and an EmbeddingCollection are used by one thread at a time. Error messages are copied
 * on the calling thread right after the failing call, so they are never another thread's.
 */
#ifndef SHARDREC_SHARDREC_HPP_
#define SHARDREC_SHARDREC_HPP_

#if __cplusplus < 202002L
#error "shardrec.hpp needs C++20 (std::span); from older C++ use the C API (shardrec.h)"
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardrec/shardrec.h"

namespace shardrec {

/** A failed libshardrec call: code() is the C status (SHARDREC_E*), what() the C message. */
class Error : public std::runtime_error {
 public:
  Error(shardrec_status_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}

  /** The status code, a negative SHARDREC_E* value. */
  shardrec_status_t code() const noexcept { return code_; }

  /** The status name, e.g. "SHARDREC_EINVAL". */
  const char* code_name() const noexcept { return shardrec_status_string(code_); }

 private:
  shardrec_status_t code_;
};

/** Throws Error for a negative status, with the calling thread's last error message. */
inline void check(shardrec_status_t status) {
  if (status < 0) throw Error(status, shardrec_last_error());
}

/** The runtime library's version, "major.minor.patch". */
inline std::string version_string() { return shardrec_version_string(); }

namespace detail {

struct CommDeleter {
  void operator()(shardrec_comm_t* c) const noexcept { shardrec_comm_destroy(c); }
};
struct PlanDeleter {
  void operator()(shardrec_plan_t* p) const noexcept { shardrec_plan_destroy(p); }
};
struct EmbeddingDeleter {
  void operator()(shardrec_embedding_t* e) const noexcept { shardrec_embedding_destroy(e); }
};

/** Takes a library-allocated text (freed with shardrec_free) into a std::string. */
inline std::string take_text(char* text, size_t len) {
  std::unique_ptr<char, void (*)(void*)> owned(text, shardrec_free);
  return text == nullptr ? std::string() : std::string(text, len);
}

}  // namespace detail

/** A communicator (one rank of a group). Move-only; destroyed with the object. */
class Comm {
 public:
  Comm() = default;
  /** Takes ownership of a handle from the C API. */
  explicit Comm(shardrec_comm_t* handle) : h_(handle) {}

  /** A rendezvous token, created by rank 0 and shipped to every rank by the host program. */
  static shardrec_unique_id_t unique_id() {
    shardrec_unique_id_t id;
    check(shardrec_comm_unique_id_create(&id));
    return id;
  }

  /** Joins the group of @p world_size ranks identified by @p id as @p rank (collective). */
  static Comm create(const shardrec_unique_id_t& id, int32_t world_size, int32_t rank,
                     const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create(&c, &id, world_size, rank, options));
    return Comm(c);
  }

  /** @p n ranks inside this process (each then used by its own thread). */
  static std::vector<Comm> local_group(int32_t n,
                                       const shardrec_comm_options_t* options = nullptr) {
    std::vector<shardrec_comm_t*> raw(n > 0 ? static_cast<size_t>(n) : 0, nullptr);
    check(shardrec_comm_create_local_group(raw.data(), n, options));
    std::vector<Comm> out;
    out.reserve(raw.size());
    for (shardrec_comm_t* c : raw) out.emplace_back(c);
    return out;
  }

  /**
   * Under a cluster launcher (torchrun, mpirun, srun): joins the group its variables describe,
   * with no unique id to ship (collective; shardrec_comm_create_from_env).
   */
  static Comm from_env(const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create_from_env(&c, options));
    return Comm(c);
  }

  /**
   * The MPI backend over MPI_COMM_WORLD (@p mpi_comm_fortran 0) or the host's communicator given
   * by its MPI_Comm_c2f() handle (collective; shardrec_comm_create_mpi).
   */
  static Comm mpi(int64_t mpi_comm_fortran = 0, const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create_mpi(&c, mpi_comm_fortran, options));
    return Comm(c);
  }

  int32_t rank() const {
    int32_t r = 0;
    check(shardrec_comm_rank(&r, get()));
    return r;
  }

  /** This rank's index among the ranks on its host (shardrec_comm_local_rank). */
  int32_t local_rank() const {
    int32_t r = 0;
    check(shardrec_comm_local_rank(&r, get()));
    return r;
  }

  /** The number of ranks on this rank's host (shardrec_comm_local_size). */
  int32_t local_size() const {
    int32_t n = 0;
    check(shardrec_comm_local_size(&n, get()));
    return n;
  }

  /**
   * Tears down this communicator's connections and those split from it (shardrec_comm_abort).
   * The one call that may run from another thread while a call on this communicator (or a
   * collection's step over it) is blocked: that call then throws SHARDREC_EABORTED. Keep the
   * Comm alive until the blocked call has returned.
   */
  void abort() const { check(shardrec_comm_abort(get())); }

  /** Throws the error that poisoned this communicator (a timeout, a peer's failure, an abort). */
  void check_async_error() const { check(shardrec_comm_async_error(get())); }

  int32_t size() const {
    int32_t s = 0;
    check(shardrec_comm_size(&s, get()));
    return s;
  }

  void barrier() { check(shardrec_comm_barrier(get())); }

  /**
   * recv = op (SHARDREC_REDUCE_*) over the ranks of send, float elements, host memory.
   * Collective. Spans of different sizes are refused (Error, SHARDREC_EINVAL) after this rank
   * has still met the others in the C call's agreement (comm.h), so they fail at once naming
   * it instead of waiting out their timeout.
   */
  void allreduce(std::span<const float> send, std::span<float> recv,
                 int32_t op = SHARDREC_REDUCE_SUM) {
    if (send.size() != recv.size()) {
      // NULL buffers with a count of 1: refused by C inside its agreement, touching nothing.
      (void)shardrec_comm_allreduce(get(), nullptr, nullptr, 1, SHARDREC_DTYPE_FLOAT32, op,
                                    nullptr);
      throw Error(SHARDREC_EINVAL, "allreduce: send has " + std::to_string(send.size()) +
                                       " elements, recv " + std::to_string(recv.size()));
    }
    check(shardrec_comm_allreduce(get(), send.data(), recv.data(), send.size(),
                                  SHARDREC_DTYPE_FLOAT32, op, nullptr));
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_comm_t* get() const noexcept { return h_.get(); }

 private:
  std::unique_ptr<shardrec_comm_t, detail::CommDeleter> h_;
};

/** An immutable sharding plan. Move-only; safe to query from any number of threads. */
class Plan {
 public:
  Plan() = default;
  explicit Plan(shardrec_plan_t* handle) : h_(handle) {}

  /** Plans @p tables (reading @p features) on @p topology. */
  static Plan create(std::span<const shardrec_table_config_t> tables,
                     std::span<const shardrec_feature_config_t> features,
                     const shardrec_topology_t& topology,
                     std::span<const shardrec_table_constraints_t> constraints = {}) {
    shardrec_plan_t* p = nullptr;
    check(shardrec_plan_create(&p, tables.data(), tables.size(), features.data(), features.size(),
                               &topology, constraints.data(), constraints.size()));
    return Plan(p);
  }

  /** Reads and validates a plan written by to_json(). */
  static Plan from_json(std::string_view text) {
    shardrec_plan_t* p = nullptr;
    check(shardrec_plan_from_json(&p, text.data(), text.size()));
    return Plan(p);
  }

  std::string to_json() const {
    char* text = nullptr;
    size_t len = 0;
    check(shardrec_plan_to_json(get(), &text, &len));
    return detail::take_text(text, len);
  }

  /** The planner's table of placements, costs and notes (human-readable). */
  std::string stats() const {
    char* text = nullptr;
    size_t len = 0;
    check(shardrec_plan_stats(get(), &text, &len));
    return detail::take_text(text, len);
  }

  size_t num_tables() const {
    size_t n = 0;
    check(shardrec_plan_num_tables(get(), &n));
    return n;
  }

  std::string table_name(size_t table) const {
    const char* name = nullptr;
    check(shardrec_plan_table_name(get(), table, &name));
    return name;
  }

  /** Index of the table named @p name; Error(SHARDREC_ENOTFOUND) when there is none. */
  size_t find_table(const std::string& name) const {
    size_t index = 0;
    check(shardrec_plan_find_table(get(), name.c_str(), &index));
    return index;
  }

  /** The sharding type (SHARDREC_SHARDING_*) and number of shards of a table. */
  std::pair<int32_t, size_t> table_sharding(size_t table) const {
    int32_t type = 0;
    size_t shards = 0;
    check(shardrec_plan_table_sharding(get(), table, &type, &shards));
    return {type, shards};
  }

  shardrec_plan_t* get() const noexcept { return h_.get(); }

 private:
  std::unique_ptr<shardrec_plan_t, detail::PlanDeleter> h_;
};

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

/** Where one feature's block sits in a forward output row (TorchRec's KeyedTensor keys). */
struct OutputBlock {
  std::string feature;
  std::string table;
  int64_t offset = 0;
  int64_t width = 0;
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
    check(shardrec_embedding_create(&e, plan.get(), comm.get(), optimizer, options));
    return EmbeddingCollection(e);
  }

  /** Width of one output row (the sum of the feature blocks). */
  int64_t output_dim() const {
    int64_t d = 0;
    check(shardrec_embedding_output_dim(get(), &d));
    return d;
  }

  /** Whether the collection is a sequence (NONE-pooled) one: one output row per id. */
  bool is_sequence() const {
    int32_t s = 0;
    check(shardrec_embedding_is_sequence(get(), &s));
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
    check(shardrec_embedding_forward(get(), &batch, out.data(), out.size(), nullptr));
  }

  /** forward() into a new vector of output_size(batch) floats. */
  std::vector<float> forward(const shardrec_kjt_view_t& batch) {
    std::vector<float> out(output_size(batch));
    forward(batch, out);
    return out;
  }

  /** Gradient of the last forward's output; updates the tables with their optimizers. */
  void backward(std::span<const float> grad) {
    check(shardrec_embedding_backward(get(), grad.data(), grad.size(), nullptr));
  }

  void set_learning_rate(float lr) { check(shardrec_embedding_set_learning_rate(get(), lr)); }

  void set_learning_rate(const std::string& table, float lr) {
    check(shardrec_embedding_set_table_learning_rate(get(), table.c_str(), lr));
  }

  /** The feature blocks of an output row, in order. */
  std::vector<OutputBlock> outputs() const {
    size_t n = 0;
    check(shardrec_embedding_num_outputs(get(), &n));
    std::vector<OutputBlock> out(n);
    for (size_t i = 0; i < n; ++i) {
      const char* feature = nullptr;
      const char* table = nullptr;
      check(shardrec_embedding_output_info(get(), i, &feature, &table, &out[i].offset,
                                           &out[i].width));
      out[i].feature = feature;
      out[i].table = table;
    }
    return out;
  }

  /** Where this rank's time went since creation; samples / total_seconds is its samples/s. */
  shardrec_step_timings_t step_timings() const {
    shardrec_step_timings_t t = SHARDREC_STEP_TIMINGS_INIT;
    check(shardrec_embedding_step_timings(get(), &t));
    return t;
  }

  /** The full weights of @p table ([rows, dim], collective). */
  void get_weights(const std::string& table, std::span<float> out) {
    check(shardrec_embedding_get_weights(get(), table.c_str(), out.data(), out.size()));
  }

  void set_weights(const std::string& table, std::span<const float> weights) {
    check(shardrec_embedding_set_weights(get(), table.c_str(), weights.data(), weights.size()));
  }

  shardrec_embedding_t* get() const noexcept { return h_.get(); }

 private:
  std::unique_ptr<shardrec_embedding_t, detail::EmbeddingDeleter> h_;
};

}  // namespace shardrec

#endif  // SHARDREC_SHARDREC_HPP_
