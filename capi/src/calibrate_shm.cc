// Shared-memory probe of the calibration. Rank 0 runs on the caller's thread and keeps the time;
// rank 1 runs on a helper thread. Which rounds run is agreed in an all-reduce after each round
// (rank 0 decides from the budget), so both ranks always issue the same collectives.
#include "capi/src/calibrate_shm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/comm/shm/shm_communicator.h"
#include "impl/core/check.h"

namespace shardrec::capi {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// 4 MiB per rank: the size of a world-2 step's exchanges (the side by side's pooled output is
// 6 MiB per rank, its ids 2.5 MiB) and of comm_encoded_bench's all-to-all. Buffers of 16 MiB per
// rank (64 MiB for the pair, beyond the last-level cache) read 1.7-1.9 GB/s on the 2-core VM
// where 4 MiB reads 4.8 (tests/bench/RESULTS.md, "Calibration of the shared-memory route"),
// and the loopback figure streams its 16 MiB through 256 KiB buffers that stay in cache: this
// is the size that compares like for like.
constexpr size_t kFloats = size_t{1} << 20;
constexpr int kBigCalls = 4;     // all-to-alls per bandwidth round
constexpr int kSmallCalls = 16;  // all-reduces per latency round
constexpr int kMaxRounds = 3;
// How late rank 1 comes to each timed all-reduce: past the transport's spin (comm/shm's
// exchange spins some 20-50 us), so rank 0 is asleep on its doorbell when rank 1 arrives.
constexpr auto kLate = std::chrono::microseconds(300);

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One rank's part of the whole probe. Rank 0 fills *bw and *latency; `start` and the budget
// decide (on rank 0) whether another round runs. `arrived` is shared by the two ranks: when rank
// 1 entered the latency round's current all-reduce.
Status RunRank(comm::Communicator& c, Clock::time_point start, double budget_ms,
               std::atomic<int64_t>* arrived, double* bw, double* latency) {
  const int rank = c.Rank();
  const size_t counts_out[2] = {rank == 0 ? 0 : kFloats, rank == 0 ? kFloats : 0};
  std::vector<float> send(kFloats, 1.0f), recv(kFloats);
  // Whether another round runs: rank 0's verdict, agreed by both ranks.
  auto agree = [&](bool go_on, bool* out) {
    int64_t v = rank == 0 && go_on ? 1 : 0;
    SR_RETURN_IF_ERROR(c.AllReduce(&v, &v, 1, DType::kInt64, comm::ReduceOp::kMax));
    *out = v != 0;
    return Status::Ok();
  };
  auto all_to_all = [&] {
    return c.AllToAllV(send.data(), counts_out, recv.data(), counts_out, DType::kFloat32);
  };
  int64_t small = rank;
  auto all_reduce = [&] {
    return c.AllReduce(&small, &small, 1, DType::kInt64, comm::ReduceOp::kMax);
  };
  // Warm-up, not timed: the segment's pages and the buffers' first touch.
  SR_RETURN_IF_ERROR(all_to_all());
  for (int i = 0; i < 10; ++i) SR_RETURN_IF_ERROR(all_reduce());
  const double share = budget_ms / 2.0;
  std::vector<double> bws, latencies;
  for (bool more = true; more;) {
    SR_RETURN_IF_ERROR(c.Barrier());
    const auto t0 = Clock::now();
    for (int i = 0; i < kBigCalls; ++i) SR_RETURN_IF_ERROR(all_to_all());
    const double ms = MsSince(t0);
    bws.push_back(static_cast<double>(kBigCalls * kFloats * sizeof(float)) / std::max(ms, 1e-6));
    SR_RETURN_IF_ERROR(agree(bws.size() < kMaxRounds && MsSince(start) < share, &more));
  }
  // The latency of a collective whose ranks arrive apart, as a step's ranks do after their own
  // work: rank 0 waits in the all-reduce until it sleeps, rank 1 comes kLate later, and the
  // figure is the time from rank 1's arrival to rank 0's return (the doorbell's wake, the
  // scheduler, the exchange). A loopback TCP round trip pays the same wake in its blocking
  // receive; two ranks spinning on each other back to back would pay none (under 1 us here),
  // which no step sees.
  const auto t1 = Clock::now();
  for (bool more = true; more;) {
    SR_RETURN_IF_ERROR(c.Barrier());
    std::vector<double> calls;
    for (int i = 0; i < kSmallCalls; ++i) {
      if (rank == 1) {
        std::this_thread::sleep_for(kLate);
        arrived->store(Clock::now().time_since_epoch().count(), std::memory_order_release);
      }
      SR_RETURN_IF_ERROR(all_reduce());
      if (rank == 0) {
        const auto done = Clock::now().time_since_epoch().count();
        const int64_t at = arrived->load(std::memory_order_acquire);
        calls.push_back(
            std::chrono::duration<double, std::milli>(Clock::duration(done - at)).count());
      }
    }
    if (rank == 0) latencies.push_back(Median(calls));
    SR_RETURN_IF_ERROR(agree(latencies.size() < kMaxRounds && MsSince(t1) < share / 2.0, &more));
  }
  *bw = Median(bws);
  *latency = rank == 0 ? Median(latencies) : 0.0;
  return Status::Ok();
}

}  // namespace

Status ProbeSharedMemory(double budget_ms, planner::SharedMemoryFigures* out) {
  *out = planner::SharedMemoryFigures{};
  const auto start = Clock::now();
  comm::CommOptions options;
  // A peer thread of this process that does not answer within this is a bug, not a slow host.
  options.timeout = std::chrono::seconds(60);
  std::vector<std::unique_ptr<comm::Communicator>> group;
  SR_RETURN_IF_ERROR(comm::CreateLocalGroup(2, options, &group));
  const auto* shm = dynamic_cast<const comm::shm::ShmCommunicator*>(group[0].get());
  if (shm == nullptr || std::strcmp(shm->transport(), "shm") != 0) return Status::Ok();
  double bw = 0, latency = 0, unused_bw = 0, unused_latency = 0;
  std::atomic<int64_t> arrived{0};
  Status peer;
  std::thread helper([&] {
    peer = RunRank(*group[1], start, budget_ms, &arrived, &unused_bw, &unused_latency);
    if (!peer.ok()) group[1]->Abort();  // wakes rank 0 at once instead of at its timeout
  });
  Status own = RunRank(*group[0], start, budget_ms, &arrived, &bw, &latency);
  if (!own.ok()) group[0]->Abort();
  helper.join();
  SR_RETURN_IF_ERROR(own);
  SR_RETURN_IF_ERROR(peer);
  out->available = true;
  out->bw = bw;
  out->latency = latency;
  return Status::Ok();
}

}  // namespace shardrec::capi
