// Which collective, and which part of it, an MPI message belongs to: its tag. Every rank tags
// the messages of one call alike, and a receive checks the tag and size of what arrived
// (mpi_plugin_abi.h, "Messages"), so ranks that called different collectives, or one with
// different counts or roots, fail with both named instead of exchanging wrong data.
#pragma once

#include <cstdint>
#include <string>

#include "impl/comm/mpi/mpi_plugin_abi.h"

namespace shardrec::comm::mpi {

// Parts of collectives whose messages must never pair with another part's. Values are part of
// the wire between ranks of one build only; append new ones.
enum class Part : int32_t {
  kAllReduce = 1,        // a small all-reduce: every rank's whole buffer to every rank
  kAllReduceScatter,     // a large all-reduce, its reduce-scatter step
  kAllReduceGather,      // a large all-reduce, its all-gather step
  kDirectAllReduce,      // an all-reduce by direct reads: addresses and barriers
  kReduceScatter,        // reduce-scatter-v
  kDirectReduceScatter,  // reduce-scatter-v by direct reads
  kAllGather,            // all-gather-v
  kAllToAll,             // all-to-all-v
  kBroadcast,            // a broadcast, from the parent in its tree
  kBroadcastFailed,      // instead of a broadcast's data: the parent could not receive it
  kBarrier,              // a barrier: one empty message to every peer
  kSplit,                // a split's exchange of colors and keys
  kProbe,                // whether the ranks can read each other's memory (mpi_direct.cc)
};

// The tag of a message of `part`: the last message of a block (a block longer than one
// message goes as several, chunking.h) has its own, so that ranks cutting a block into
// different numbers of messages notice at the first one that differs.
constexpr int32_t TagOf(Part part, bool last) {
  return static_cast<int32_t>(part) * 2 + (last ? 1 : 0);
}

// What `m` means, for an error message: "rank 1 sent a message of an allgatherv (16 bytes)
// where this rank expected one of an allreduce (32 bytes): ...".
std::string DescribeMismatch(const shardrec_mpi_mismatch_t& m);

}  // namespace shardrec::comm::mpi
