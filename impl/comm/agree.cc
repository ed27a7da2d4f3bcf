#include "impl/comm/agree.h"

#include <cstdint>
#include <string>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/rng.h"

namespace shardrec::comm {

Status FindRefusingRank(Communicator& comm, bool refused, int64_t* refusing) {
  // Under kMax: Size() - rank for a refusing rank (largest for the lowest), else 0.
  int64_t v = refused ? comm.Size() - comm.Rank() : 0;
  SR_RETURN_IF_ERROR(comm.AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kMax));
  *refusing = v == 0 ? -1 : comm.Size() - v;
  return Status::Ok();
}

Status FindRefusingRank(Communicator& comm, bool refused, std::span<const int64_t> same,
                        int64_t* refusing, uint64_t* differ) {
  // Under kMax: each value and its negation (max and -min: equal exactly when all agree), then
  // Size() - rank for a refusing rank, as above.
  const size_t n = same.size();
  SR_CHECK(n <= 64);
  std::vector<int64_t> v(2 * n + 1);
  for (size_t k = 0; k < n; ++k) {
    SR_CHECK(same[k] != INT64_MIN);
    v[k] = same[k];
    v[n + k] = -same[k];
  }
  v[2 * n] = refused ? comm.Size() - comm.Rank() : 0;
  SR_RETURN_IF_ERROR(comm.AllReduce(v.data(), v.data(), v.size(), DType::kInt64, ReduceOp::kMax));
  *refusing = v[2 * n] == 0 ? -1 : comm.Size() - v[2 * n];
  *differ = 0;
  for (size_t k = 0; k < n; ++k)
    if (v[k] != -v[n + k]) *differ |= uint64_t{1} << k;
  return Status::Ok();
}

Status SplitRefusal(std::span<const int64_t> all, bool refused_here) {
  if (refused_here) return Status::InvalidArgument("out must not be null");
  for (size_t r = 0; 3 * r < all.size(); ++r) {
    if (all[3 * r] == kRefusedSplitColor)
      return Status::InvalidArgument(
          "rank ", r, " refused its split (its error says why); nothing was created");
  }
  return Status::Ok();
}

int64_t Digest63(std::span<const int64_t> values) {
  uint64_t d = Mix64(values.size());
  for (int64_t x : values) d = Mix64(d ^ static_cast<uint64_t>(x));
  return static_cast<int64_t>(d >> 1);
}

namespace {

// AgreeToCreate and AgreeOnArguments, in one all-reduce: `local` on a refusing rank,
// `refused(r)` on the others when rank r refused, else InvalidArgument saying `differ` (with
// `what_differs`, naming the call) when a rank gave other `same` values.
template <typename Refused>
Status AgreeOnVerdict(Communicator& comm, const Status& local, std::span<const int64_t> same,
                      std::string_view what_differs, std::string_view differ, Refused&& refused) {
  if (!comm.device().is_host()) return local;
  int64_t refusing = -1;
  uint64_t differs = 0;
  const Status exchanged = FindRefusingRank(comm, !local.ok(), same, &refusing, &differs);
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(exchanged);
  if (refusing >= 0) return refused(refusing);
  if (differs != 0)
    return Status::InvalidArgument(what_differs, " differ: ", differ, "; no rank changed anything");
  return Status::Ok();
}

}  // namespace

Status AgreeToCreate(Communicator& comm, const Status& local, std::string_view what,
                     std::span<const int64_t> same, std::string_view differ) {
  return AgreeOnVerdict(comm, local, same, StrCat("the ranks' arguments to create the ", what),
                        differ, [&](int64_t r) {
                          return Status::InvalidArgument("rank ", r, " refused to create the ",
                                                         what, " (its error says why)");
                        });
}

Status AgreeOnCounts(Communicator& comm, std::span<const int64_t> counts, std::string_view what) {
  const int64_t digest = Digest63(counts);
  std::vector<int64_t> all(static_cast<size_t>(comm.Size()));
  std::vector<size_t> ones(all.size(), 1);
  SR_RETURN_IF_ERROR(comm.AllGatherV(&digest, 1, all.data(), ones, DType::kInt64));
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    return Status::InvalidArgument(what, " differ across ranks: rank ", r,
                                   " gave other counts than rank 0 (this rank: ", counts.size(),
                                   " of ", total, " elements in all)");
  }
  return Status::Ok();
}

Status AgreeOnArguments(Communicator& comm, const Status& local, std::string_view call,
                        std::span<const int64_t> same, std::string_view differ) {
  return AgreeOnVerdict(
      comm, local, same, StrCat("the ranks' arguments to the ", call), differ, [&](int64_t r) {
        return Status::InvalidArgument("rank ", r, " refused its arguments to the ", call,
                                       " (its error says why); no rank changed anything");
      });
}

namespace {

// "allreduce of 8 elements of type 0 (op or root 0)", or the bare name of an unsized call.
std::string Describe(const CallSignature& call) {
  if (!call.sized) return call.what;
  return StrCat(call.what, " of ", call.args[0], " elements of type ", call.args[1],
                " (op or root ", call.args[2], ")");
}

}  // namespace

Status AgreeOnCall(Communicator& comm, const CallSignature& call, const Status& local) {
  if (!comm.device().is_host()) return local;
  const int64_t sig[] = {call.kind, call.args[0], call.args[1], call.args[2]};
  int64_t refusing = -1;
  uint64_t differ = 0;
  const Status exchanged = FindRefusingRank(comm, !local.ok(), sig, &refusing, &differ);
  if (!local.ok()) return local;
  if (!exchanged.ok()) return exchanged.WithContext(StrCat("agreeing on the ", Describe(call)));
  if (refusing >= 0) {
    // The refusing rank's call is named only when every rank called this kind of collective
    // (sizes may differ: they may be what it refused).
    if ((differ & 1) == 0) {
      return Status::InvalidArgument("rank ", refusing, " refused its ", call.what,
                                     " call (its error says why); no data moved");
    }
    return Status::InvalidArgument("rank ", refusing,
                                   " refused its arguments (its error says why), and the ranks "
                                   "called different collectives (this rank: ",
                                   call.what, "); no data moved");
  }
  if (differ != 0) {
    return Status::InvalidArgument(
        "the ranks called different collectives or gave different sizes: this rank called ",
        Describe(call), "; every rank must make the same call with the same count, element ",
        "type and op (or root)");
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
