// Setting up a host's shared-memory segment for a communicator, collectively over the wrapped
// communicator itself (so a Split's children set theirs up over their own group, with no store
// of their own). Every rank takes part and every rank reaches the same verdict:
//  1. the ranks share their host identity (rendezvous/host_identity.h: the boot id and network
//     namespace, so "hosts" that are network namespaces of one machine stay apart) and whether
//     they want the transport (SHARDREC_SHM, the device, the group's size): shared memory only
//     when all agree and all are on one host;
//  2. rank 0 creates the segment under a fresh name and writes a random cookie into it, and
//     broadcasts name, size and cookie;
//  3. the others map it and check the cookie; every rank writes a mark derived from the cookie
//     and its rank; an all-reduce says whether all mapped it, after which rank 0 unlinks the
//     name (a crash from then on leaves nothing in /dev/shm);
//  4. every rank checks every other rank's mark in its own mapping, which proves the memory is
//     physically shared (two containers with one boot id and network namespace but private
//     /dev/shm mounts would map different files of one name), and a second all-reduce agrees.
// A rank that cannot create or map the segment makes the whole group fall back to the wrapped
// communicator; only a failure of the wrapped communicator's own collectives is an error.
#pragma once

#include <memory>
#include <string>

#include "impl/comm/communicator.h"
#include "impl/comm/shm/layout.h"
#include "impl/comm/shm/segment.h"
#include "impl/core/status.h"

namespace shardrec::comm::shm {

// Groups larger than this keep the wrapped transport: the mailboxes grow with the square of the
// group, and hosts with more ranks than this are not what the transport is tuned for.
inline constexpr int kMaxRanks = 16;

// Whether this process allows the transport: SHARDREC_SHM unset, or set to anything but "0".
bool EnabledByEnv();

struct HostSegment {
  std::unique_ptr<Segment> segment;
  Layout layout;
};

// Collective over `comm` (see above). *out is empty when the group keeps the wrapped transport;
// *why (optional) says why. Errors: those of comm's collectives.
Status SetUpHostSegment(Communicator& comm, std::unique_ptr<HostSegment>* out,
                        std::string* why = nullptr);

}  // namespace shardrec::comm::shm
