// Agreements on a refusal: one small all-reduce in which a rank that refused its own arguments
// still takes part, so its peers fail at once instead of waiting out their timeout in an exchange
// it never joins.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// One all-reduce (8 bytes) of whether this rank refused: *refusing becomes the lowest refusing
// rank, or -1 when none did. Every rank of `comm` must call it, a refusing one too. The buffer is
// host memory, so `comm` must take host buffers (a host communicator, or a device one whose
// collectives accept them). Returns the communicator's error when the exchange failed
// (*refusing unchanged).
Status FindRefusingRank(Communicator& comm, bool refused, int64_t* refusing);

// FindRefusingRank that also compares `same`, values every rank must give alike (a table's index,
// a digest of sizes), in the same all-reduce (two more words each): bit k of *differ is set when
// some rank gave another same[k] (at most 64 values). A transport given different sizes on
// different ranks may abort the process (Gloo's pair thread throws when a message outgrows the
// buffer posted for it), so calls whose sizes follow from such values compare them before any data
// moves. Each value must be above INT64_MIN (it is negated); Digest63 makes one of a list.
Status FindRefusingRank(Communicator& comm, bool refused, std::span<const int64_t> same,
                        int64_t* refusing, uint64_t* differ);

// A digest of `values` (their number included) in [0, 2^63), for FindRefusingRank's `same`.
int64_t Digest63(std::span<const int64_t> values);

// One all-reduce of this rank's verdict on its own arguments (`local`). A rank that refused them
// still takes part, so every rank fails at once naming the lowest refusing rank, where its peers
// would otherwise wait out their timeout in an exchange it never joins. Returns `local` when it
// is an error, InvalidArgument naming the refusing rank when a peer refused, the
// communicator's error when the all-reduce failed, else Ok. `what` names the object in that
// message ("DDP bucketer"). Over a device communicator (whose collectives take device buffers)
// it exchanges nothing and returns `local`: a refusing rank there fails alone. The same
// all-reduce compares `same` (values every rank must give alike, as in FindRefusingRank: options
// that size the later exchanges): when no rank refused but one gave other values,
// InvalidArgument on every rank, "the ranks' arguments to create the <what> differ: <differ>".
Status AgreeToCreate(Communicator& comm, const Status& local, std::string_view what,
                     std::span<const int64_t> same = {}, std::string_view differ = "");

// After AgreeToCreate: whether every rank gave the same `counts` (the sizes of the tensors or
// units a creation registers, which size its later exchanges). One all-gather of a digest per
// rank; InvalidArgument on every rank naming the first rank that differs from rank 0, `what`
// naming the registration ("DDP registrations").
Status AgreeOnCounts(Communicator& comm, std::span<const int64_t> counts, std::string_view what);

// As AgreeToCreate, for a collective call other than a creation (a checkpoint save, a delta
// export): a rank that refused its own arguments (`local`) still takes part, so its peers fail at
// once with InvalidArgument naming it and `call` ("checkpoint save"), before any rank changes
// anything. Over a device communicator it exchanges nothing and returns `local`.
// The same all-reduce compares `same` as AgreeToCreate does (say a table's index): "the ranks'
// arguments to the <call> differ: <differ>".
Status AgreeOnArguments(Communicator& comm, const Status& local, std::string_view call,
                        std::span<const int64_t> same = {}, std::string_view differ = "");

// A split's first exchange gathers every member's (color, key, rank); a member refusing the split
// sends this color instead (no int32 color is this), so the others fail with it at once.
constexpr int64_t kRefusedSplitColor = INT64_MIN / 2;
// Over `all` (Size() triples of that exchange): OK when no member refused, else InvalidArgument,
// this rank's own ("out must not be null") when it refused.
Status SplitRefusal(std::span<const int64_t> all, bool refused_here);

// What one rank is about to call: the collective (`kind`, any code the caller picks), then up to
// three numbers every rank must give alike (count, element type, op or root).
struct CallSignature {
  int64_t kind = 0;
  std::array<int64_t, 3> args{};
  const char* what = "";  // the collective's name, for messages ("allreduce")
  bool sized = true;      // messages give the three numbers (false: a barrier)
};

// One small all-reduce of every rank's signature and verdict on its own arguments (`local`)
// before a collective whose sizes come from its caller (the C API's raw collectives). A
// transport given different sizes on different ranks may corrupt memory or abort the process
// (Gloo's pair thread throws when a message outgrows the buffer posted for it), so a mismatch is
// refused before any of the caller's data moves: every rank fails with InvalidArgument saying
// the ranks' calls differ. A rank that refused its arguments (a NULL buffer, a bad type) gets
// `local` back and its peers InvalidArgument naming it, at once. A failed exchange is returned
// with the call's description as context (built only on failure). Over a device communicator
// it exchanges nothing and returns `local`.
Status AgreeOnCall(Communicator& comm, const CallSignature& call, const Status& local);

}  // namespace shardrec::comm
