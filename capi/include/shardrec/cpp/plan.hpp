/**
 * @file cpp/plan.hpp
 * shardrec::Plan (plan.h) and the topology helpers that fill a shardrec_topology_t. Included by
 * shardrec.hpp.
 */
#ifndef SHARDREC_CPP_PLAN_HPP_
#define SHARDREC_CPP_PLAN_HPP_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "shardrec/cpp/comm.hpp"
#include "shardrec/cpp/error.hpp"

namespace shardrec {

/**
 * Writes the world size and ranks per node of @p comm's job into @p topology (started from
 * SHARDREC_TOPOLOGY_INIT; other fields stay; shardrec_topology_from_comm). Collective over
 * @p comm; on error @p topology is unchanged.
 */
inline void topology_from_comm(shardrec_topology_t& topology, Comm& comm) {
  check(shardrec_topology_from_comm(&topology, detail::live(comm.get(), "shardrec::Comm")));
}

/**
 * Measures this machine into @p topology's cost fields, world_size and ranks_per_node already
 * set (shardrec_topology_calibrate; about 0.1-0.6 s); returns the raw figures.
 */
inline shardrec_calibration_t topology_calibrate(
    shardrec_topology_t& topology, const shardrec_calibrate_options_t* options = nullptr) {
  shardrec_calibration_t c = SHARDREC_CALIBRATION_INIT;
  check(shardrec_topology_calibrate(&topology, options, &c));
  return c;
}

/**
 * Measures the bandwidth between @p comm's hosts into @p topology's inter_node_bandwidth and
 * returns it (bytes/s; 0 on one host, leaving the topology as it was). Collective over @p comm;
 * @p time_budget seconds at most (0: the default; shardrec_topology_calibrate_network).
 */
inline double topology_calibrate_network(shardrec_topology_t& topology, Comm& comm,
                                         double time_budget = 0) {
  double measured = 0;
  check(shardrec_topology_calibrate_network(&topology, detail::live(comm.get(), "shardrec::Comm"),
                                            time_budget, &measured));
  return measured;
}

/** What topology_calibrate_disk() measured beside what it wrote into the topology. */
struct DiskCalibration {
  double iops = 0;      ///< The machine's random 4 KiB reads per second (all ranks).
  bool direct = false;  ///< Whether the reads bypassed the page cache (O_DIRECT).
};

/**
 * Measures the local disk under @p dir that tiered tables' stores will use into @p topology's
 * disk_read_iops, disk_read_bandwidth and (when 0) disk_capacity, per rank
 * (shardrec_topology_calibrate_disk: a scratch file of @p file_bytes, 0 meaning 256 MiB, read
 * for about @p time_budget seconds, 0 meaning 1). @p topology is written only on success.
 */
inline DiskCalibration topology_calibrate_disk(shardrec_topology_t& topology,
                                               const std::string& dir, uint64_t file_bytes = 0,
                                               double time_budget = 0) {
  DiskCalibration d;
  int32_t direct = 0;
  check(shardrec_topology_calibrate_disk(&topology, detail::c_str(dir, "dir"), file_bytes,
                                         time_budget, &d.iops, &direct));
  d.direct = direct != 0;
  return d;
}

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
    check(shardrec_plan_to_json(h(), &text, &len));
    return detail::take_text(text, len);
  }

  /** The planner's table of placements, costs and notes (human-readable). */
  std::string stats() const {
    char* text = nullptr;
    size_t len = 0;
    check(shardrec_plan_stats(h(), &text, &len));
    return detail::take_text(text, len);
  }

  size_t num_tables() const {
    size_t n = 0;
    check(shardrec_plan_num_tables(h(), &n));
    return n;
  }

  std::string table_name(size_t table) const {
    const char* name = nullptr;
    check(shardrec_plan_table_name(h(), table, &name));
    return name;
  }

  /** Index of the table named @p name; Error(SHARDREC_ENOTFOUND) when there is none. */
  size_t find_table(const std::string& name) const {
    size_t index = 0;
    check(shardrec_plan_find_table(h(), name.c_str(), &index));
    return index;
  }

  /** The sharding type (SHARDREC_SHARDING_*) and number of shards of a table. */
  std::pair<int32_t, size_t> table_sharding(size_t table) const {
    int32_t type = 0;
    size_t shards = 0;
    check(shardrec_plan_table_sharding(h(), table, &type, &shards));
    return {type, shards};
  }

  /** A hash of the plan's content: equal on every rank that holds the same plan. */
  uint64_t hash() const {
    uint64_t v = 0;
    check(shardrec_plan_hash(h(), &v));
    return v;
  }

  int32_t world_size() const {
    int32_t v = 0;
    check(shardrec_plan_world_size(h(), &v));
    return v;
  }

  int32_t ranks_per_node() const {
    int32_t v = 0;
    check(shardrec_plan_ranks_per_node(h(), &v));
    return v;
  }

  size_t num_features() const {
    size_t n = 0;
    check(shardrec_plan_num_features(h(), &n));
    return n;
  }

  std::string feature_name(size_t feature) const {
    const char* name = nullptr;
    check(shardrec_plan_feature_name(h(), feature, &name));
    return name;
  }

  int64_t table_rows(size_t table) const {
    int64_t v = 0;
    check(shardrec_plan_table_rows(h(), table, &v));
    return v;
  }

  int32_t table_dim(size_t table) const {
    int32_t v = 0;
    check(shardrec_plan_table_dim(h(), table, &v));
    return v;
  }

  /** Shard @p shard of @p table: its rank and its rows and columns (shardrec_plan_shard). */
  shardrec_shard_t shard(size_t table, size_t shard) const {
    shardrec_shard_t s{};
    check(shardrec_plan_shard(h(), table, shard, &s));
    return s;
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_plan_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_plan_t* h() const { return detail::live(h_.get(), "shardrec::Plan"); }

  struct Deleter {
    void operator()(shardrec_plan_t* p) const noexcept { shardrec_plan_destroy(p); }
  };
  std::unique_ptr<shardrec_plan_t, Deleter> h_;
};

}  // namespace shardrec

#endif  // SHARDREC_CPP_PLAN_HPP_
