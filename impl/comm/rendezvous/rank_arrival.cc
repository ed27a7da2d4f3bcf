// WaitForRanks and rank 0's reachable address (rank_arrival.h).
#include "impl/comm/rendezvous/rank_arrival.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <vector>

#include "impl/comm/rendezvous/socket_util.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

constexpr const char* kReachPrefix = "reach/";

std::chrono::milliseconds Left(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now()));
}

}  // namespace

Status WaitForRanks(Store& store, const std::string& prefix, int world, int self,
                    std::chrono::steady_clock::time_point deadline, const std::string& what) {
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (r == self) continue;
    // Once one key is late the deadline has passed: the rest are only looked at, not waited
    // for, so that the error lists every absent rank at once.
    const auto wait = missing.empty() ? std::max(Left(deadline), std::chrono::milliseconds(1))
                                      : std::chrono::milliseconds(0);
    Status s = store.Wait({prefix + std::to_string(r)}, wait);
    if (s.code() == Code::kTimeout) {
      missing.push_back(r);
      continue;
    }
    SR_RETURN_IF_ERROR(s);
  }
  if (missing.empty()) return Status::Ok();
  // Named up to a screenful; a world of thousands says how many more.
  constexpr size_t kNamed = 32;
  std::string list;
  for (size_t i = 0; i < std::min(missing.size(), kNamed); ++i)
    list += StrCat(i == 0 ? "" : ", ", missing[i]);
  if (missing.size() > kNamed) list += StrCat(" and ", missing.size() - kNamed, " more");
  return Status::Timeout(what, ": rank", missing.size() == 1 ? " " : "s ", list, " of ", world,
                         " did not arrive before the deadline (not started, started late, or "
                         "unable to reach rank 0's store)");
}

bool IsLoopbackHost(const std::string& host) {
  net::Endpoint e;
  if (!net::ParseHost(host, &e).ok()) return false;
  if (e.family == AF_INET) return e.addr[0] == 127;
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::equal(e.addr, e.addr + 16, kLoop6);
}

Status PublishReach(Store& store, int rank, const std::string& reached_host) {
  return store.Set(StrCat(kReachPrefix, rank),
                   std::vector<uint8_t>(reached_host.begin(), reached_host.end()));
}

Status RankZeroHost(Store& store, int world, std::chrono::steady_clock::time_point deadline,
                    std::string* host) {
  if (world < 2 || !IsLoopbackHost(*host)) return Status::Ok();
  // A world this process cannot hold a socket per peer for fails at once when the mesh is made,
  // naming the open-file limit: not after waiting here for every rank first.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(world) + 64 > limit.rlim_cur)
    return Status::Ok();
  SR_RETURN_IF_ERROR(WaitForRanks(store, kReachPrefix, world, 0, deadline,
                                  "rank 0 (whose store address is a loopback one) waiting for "
                                  "every rank to say where it reached it"));
  for (int r = 1; r < world; ++r) {
    std::vector<uint8_t> v;
    SR_RETURN_IF_ERROR(store.Get(StrCat(kReachPrefix, r), std::chrono::milliseconds(1), &v));
    std::string reached(v.begin(), v.end());
    if (!IsLoopbackHost(reached)) {
      *host = std::move(reached);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
