#include "impl/comm/agree.h"

#include <cstdint>
#include <string>

#include "impl/core/check.h"

namespace shardrec::comm {

Status FindRefusingRank(Communicator& comm, bool refused, int64_t* refusing) {
  // Under kMax: Size() - rank for a refusing rank (largest for the lowest), else 0.
  int64_t v = refused ? comm.Size() - comm.Rank() : 0;
  SR_RETURN_IF_ERROR(comm.AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kMax));
  *refusing = v == 0 ? -1 : comm.Size() - v;
  return Status::Ok();
}

namespace {

// AgreeToCreate and AgreeOnArguments: `local` on a refusing rank, `refused(r)` on the others when
// rank r refused.
template <typename Refused>
Status AgreeOnVerdict(Communicator& comm, const Status& local, Refused&& refused) {
  if (!comm.device().is_host()) return local;
  int64_t refusing = -1;
  const Status exchanged = FindRefusingRank(comm, !local.ok(), &refusing);
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(exchanged);
  if (refusing >= 0) return refused(refusing);
  return Status::Ok();
}

}  // namespace

Status AgreeToCreate(Communicator& comm, const Status& local, std::string_view what) {
  return AgreeOnVerdict(comm, local, [&](int64_t r) {
    return Status::InvalidArgument("rank ", r, " refused to create the ", what,
                                   " (its error says why)");
  });
}

Status AgreeOnArguments(Communicator& comm, const Status& local, std::string_view call) {
  return AgreeOnVerdict(comm, local, [&](int64_t r) {
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
  // Under kMax: the signature and its negation (max and -min: equal exactly when all agree),
  // then Size() - rank for a rank that refused its arguments (else 0). Every value is above
  // INT64_MIN (the callers' counts fit in int64), so each negates.
  constexpr size_t kSig = 4;
  const int64_t sig[kSig] = {call.kind, call.args[0], call.args[1], call.args[2]};
  int64_t v[2 * kSig + 1];
  for (size_t k = 0; k < kSig; ++k) {
    v[k] = sig[k];
    v[kSig + k] = -sig[k];
  }
  v[2 * kSig] = local.ok() ? 0 : comm.Size() - comm.Rank();
  const Status exchanged = comm.AllReduce(v, v, 2 * kSig + 1, DType::kInt64, ReduceOp::kMax);
  if (!local.ok()) return local;
  if (!exchanged.ok()) return exchanged.WithContext(StrCat("agreeing on the ", Describe(call)));
  const auto agreed = [&](size_t k) { return v[k] == -v[kSig + k]; };
  if (v[2 * kSig] != 0) {
    // The refusing rank's call is named only when every rank called this kind of collective
    // (sizes may differ: they may be what it refused).
    const int64_t refusing = comm.Size() - v[2 * kSig];
    if (agreed(0)) {
      return Status::InvalidArgument("rank ", refusing, " refused its ", call.what,
                                     " call (its error says why); no data moved");
    }
    return Status::InvalidArgument("rank ", refusing,
                                   " refused its arguments (its error says why), and the ranks "
                                   "called different collectives (this rank: ",
                                   call.what, "); no data moved");
  }
  for (size_t k = 0; k < kSig; ++k) {
    if (!agreed(k)) {
      return Status::InvalidArgument(
          "the ranks called different collectives or gave different sizes: this rank called ",
          Describe(call), "; every rank must make the same call with the same count, element ",
          "type and op (or root)");
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
