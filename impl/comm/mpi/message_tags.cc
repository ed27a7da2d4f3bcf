// Error messages for mismatched MPI messages (message_tags.h).
#include "impl/comm/mpi/message_tags.h"

#include <cstring>

#include "impl/core/check.h"

namespace shardrec::comm::mpi {

namespace {

Part PartOf(int32_t tag) { return static_cast<Part>(tag / 2); }

// A part as a user would name the call, with its path where a call has several.
std::string PartName(int32_t tag) {
  switch (PartOf(tag)) {
    case Part::kAllReduce:
      return "an allreduce (small-buffer path)";
    case Part::kAllReduceScatter:
      return "an allreduce (large-buffer path, reduce-scatter step)";
    case Part::kAllReduceGather:
      return "an allreduce (large-buffer path, all-gather step)";
    case Part::kDirectAllReduce:
      return "an allreduce (direct-read path)";
    case Part::kReduceScatter:
      return "a reducescatterv";
    case Part::kDirectReduceScatter:
      return "a reducescatterv (direct-read path)";
    case Part::kAllGather:
      return "an allgatherv";
    case Part::kAllToAll:
      return "an alltoallv";
    case Part::kBroadcast:
    case Part::kBroadcastFailed:
      return "a broadcast";
    case Part::kBarrier:
      return "a barrier";
    case Part::kSplit:
      return "a split";
    case Part::kProbe:
      return "the first allreduce or reducescatterv of 1 MiB or more (its direct-read probe)";
  }
  return StrCat("an unknown kind of message (tag ", tag, ")");
}

// The call a part belongs to: two parts of one call mean the ranks passed it different counts
// (a count picks the path), not that they called different collectives. Null: either of two.
const char* CallOf(int32_t tag) {
  switch (PartOf(tag)) {
    case Part::kAllReduce:
    case Part::kAllReduceScatter:
    case Part::kAllReduceGather:
    case Part::kDirectAllReduce:
      return "allreduce";
    case Part::kReduceScatter:
    case Part::kDirectReduceScatter:
      return "reducescatterv";
    case Part::kProbe:
      return nullptr;
    default:
      return "other";
  }
}

std::string Size(const shardrec_mpi_mismatch_t& m) {
  return m.truncated != 0 ? StrCat("more than ", m.bytes, " bytes") : StrCat(m.bytes, " bytes");
}

}  // namespace

std::string DescribeMismatch(const shardrec_mpi_mismatch_t& m) {
  if (PartOf(m.tag) == Part::kBroadcastFailed && PartOf(m.expected_tag) == Part::kBroadcast) {
    return StrCat("rank ", m.peer,
                  ", which passes this broadcast on to this rank, could not receive it (its own "
                  "error names the cause, usually a count that differs from the root's)");
  }
  const bool broadcast = PartOf(m.expected_tag) == Part::kBroadcast;
  const char* counts = broadcast ? "different counts or roots" : "different counts";
  const std::string sent = StrCat("rank ", m.peer, " sent ", Size(m), " for ", PartName(m.tag));
  const std::string want = StrCat(" where this rank expected ", m.expected_bytes, " bytes for ",
                                  PartName(m.expected_tag));
  if (PartOf(m.tag) == PartOf(m.expected_tag)) {
    return StrCat(sent, m.tag != m.expected_tag ? " in a different number of messages" : "", want,
                  ": the ranks passed ", counts);
  }
  const char* a = CallOf(m.tag);
  const char* b = CallOf(m.expected_tag);
  if (a != nullptr && b != nullptr && std::strcmp(a, b) == 0 && std::strcmp(a, "other") != 0)
    return StrCat(sent, want, ": the ranks passed ", a,
                  " different counts, which took different paths");
  return StrCat(sent, want,
                ": the ranks called different collectives (every rank must make the same calls on "
                "a communicator, in the same order), or one with ",
                counts);
}

}  // namespace shardrec::comm::mpi
