#include "impl/comm/agree.h"

#include <cstdint>
#include <string>

#include "impl/core/check.h"

namespace shardrec::comm {

Status AgreeToCreate(Communicator& comm, const Status& local, std::string_view what) {
  if (!comm.device().is_host()) return local;
  // Under kMin over (refusing rank, else Size()): the lowest refusing rank, or Size().
  int64_t first = local.ok() ? comm.Size() : comm.Rank();
  const Status exchanged = comm.AllReduce(&first, &first, 1, DType::kInt64, ReduceOp::kMin);
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(exchanged);
  if (first < comm.Size()) {
    return Status::InvalidArgument("rank ", first, " refused to create the ", what,
                                   " (its error says why)");
  }
  return Status::Ok();
}

namespace {

// "allreduce of 8 elements of type 0 (op or root 0)", or the bare name of an unsized call.
std::string Describe(const CallSignature& call) {
  if (!call.sized) return call.what;
  return StrCat(call.what, " of ", call.args[0], " elements of type ", call.args[1],
                " (op or root ", call.args[2], ")");
}

}  // namespace

Status AgreeOnCall(Communicator& comm, const CallSignature& call) {
  if (!comm.device().is_host()) return Status::Ok();
  // Under kMax: the signature and its negation (max and -min: equal exactly when all agree).
  // Every value is above INT64_MIN (the callers' counts fit in int64), so each negates.
  constexpr size_t kSig = 4;
  const int64_t sig[kSig] = {call.kind, call.args[0], call.args[1], call.args[2]};
  int64_t v[2 * kSig];
  for (size_t k = 0; k < kSig; ++k) {
    v[k] = sig[k];
    v[kSig + k] = -sig[k];
  }
  const Status exchanged = comm.AllReduce(v, v, 2 * kSig, DType::kInt64, ReduceOp::kMax);
  if (!exchanged.ok()) return exchanged.WithContext(StrCat("agreeing on the ", Describe(call)));
  for (size_t k = 0; k < kSig; ++k) {
    if (v[k] != -v[kSig + k]) {
      return Status::InvalidArgument(
          "the ranks called different collectives or gave different sizes: this rank called ",
          Describe(call), "; every rank must make the same call with the same count, element ",
          "type and op (or root)");
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
