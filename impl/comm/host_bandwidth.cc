// MeasureInterHostBandwidth and MeasureCollectiveRound (host_bandwidth.h).
#include "impl/comm/host_bandwidth.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "impl/comm/rendezvous/host_identity.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFirstBytes = 64 << 10;
constexpr size_t kMostBytes = 16 << 20;

// FNV-1a: the same value in every process for the same identity text.
int64_t HashIdentity(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

}  // namespace

Status MeasureInterHostBandwidth(Communicator& c, std::chrono::milliseconds budget,
                                 double* bytes_per_s) {
  const int size = c.Size(), rank = c.Rank();
  const int64_t mine = HashIdentity(HostIdentity());
  std::vector<int64_t> hosts(static_cast<size_t>(size));
  SR_RETURN_IF_ERROR(
      c.AllGatherV(&mine, 1, hosts.data(), std::vector<size_t>(size, 1), DType::kInt64));
  int across = 0;
  for (int r = 0; r < size; ++r) across += hosts[r] != mine ? 1 : 0;
  // Whether any rank has a peer on another host: a one-host world measures nothing.
  // (When one rank has a peer across, every rank has: hosts that differ differ both ways.)
  int64_t any = across;
  SR_RETURN_IF_ERROR(c.AllReduce(&any, &any, 1, DType::kInt64, ReduceOp::kMax));
  if (any == 0) {
    *bytes_per_s = 0;
    return Status::Ok();
  }
  const double quarter = std::chrono::duration<double>(budget).count() / 4;
  // One timed round: the slowest rank's time, and the lowest rank's rate (the same everywhere).
  auto round = [&](size_t per_peer, double* seconds, double* rate) {
    std::vector<size_t> counts(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) counts[r] = hosts[r] != mine ? per_peer : 0;
    std::vector<uint8_t> send(per_peer * static_cast<size_t>(across), static_cast<uint8_t>(rank));
    std::vector<uint8_t> recv(send.size());
    SR_RETURN_IF_ERROR(c.Barrier());
    const auto start = Clock::now();
    SR_RETURN_IF_ERROR(c.AllToAllV(send.data(), counts, recv.data(), counts, DType::kUInt8));
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    SR_RETURN_IF_ERROR(c.AllReduce(seconds, seconds, 1, DType::kFloat64, ReduceOp::kMax));
    *rate = static_cast<double>(send.size()) / std::max(*seconds, 1e-9);
    return c.AllReduce(rate, rate, 1, DType::kFloat64, ReduceOp::kMin);
  };
  // The first rounds also open the connections' windows: the size grows until a round is long
  // enough to time, then three rounds at that size give the figure, the best of them (a round
  // can lose half its rate to a congestion window that restarted after the barrier's pause).
  size_t per_peer = kFirstBytes;
  double seconds = 0, rate = 0, best = 0;
  SR_RETURN_IF_ERROR(round(per_peer, &seconds, &rate));  // warm-up
  while (per_peer < kMostBytes) {
    SR_RETURN_IF_ERROR(round(per_peer, &seconds, &rate));
    if (seconds >= quarter) break;
    per_peer = std::min(per_peer * 4, kMostBytes);
  }
  for (int i = 0; i < 3; ++i) {
    SR_RETURN_IF_ERROR(round(per_peer, &seconds, &rate));
    best = std::max(best, rate);
  }
  *bytes_per_s = best;
  return Status::Ok();
}

Status MeasureCollectiveRound(Communicator& c, double* ms) {
  const int size = c.Size();
  *ms = 0;
  if (size <= 1) return Status::Ok();
  const std::vector<size_t> counts(static_cast<size_t>(size), 1);
  std::vector<double> send(static_cast<size_t>(size), 1.0), recv(send.size());
  auto rounds = [&](int n) {
    for (int i = 0; i < n; ++i)
      SR_RETURN_IF_ERROR(c.AllToAllV(send.data(), counts, recv.data(), counts, DType::kFloat64));
    return Status::Ok();
  };
  SR_RETURN_IF_ERROR(rounds(4));  // warm-up: every pair's first message, the caches
  SR_RETURN_IF_ERROR(c.Barrier());
  // Timed in kGroups groups: a cost every round pays (ranks waiting to be scheduled) is in
  // each group's mean, while one descheduling of a few ms on a loaded machine, which a whole
  // step absorbs, lands in one group and the median leaves it out.
  constexpr int kGroups = 4;
  double group_ms[kGroups];
  for (double& g : group_ms) {
    const auto start = Clock::now();
    SR_RETURN_IF_ERROR(rounds(kRoundsTimed / kGroups));
    g = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
        (kRoundsTimed / kGroups);
  }
  std::sort(group_ms, group_ms + kGroups);
  double median = (group_ms[kGroups / 2 - 1] + group_ms[kGroups / 2]) / 2;
  SR_RETURN_IF_ERROR(c.AllReduce(&median, &median, 1, DType::kFloat64, ReduceOp::kMax));
  *ms = median;
  return Status::Ok();
}

}  // namespace shardrec::comm
