// Which ranks share a host, decided by what two hosts cannot share by accident: the kernel's
// boot id (random per boot of a machine) and the identity of the network namespace the process
// runs in (the inode and device of /proc/self/ns/net). Containers and network namespaces on one
// machine often share a host name (the UTS namespace is separate, and many images leave it at a
// default), so the name alone merged them into one node; a process without /proc falls back to
// the host name.
#pragma once

#include <cstdint>
#include <string>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// This process's host identity as text ("boot <id> netns <dev>:<inode>", or "host <name>" where
// /proc is unreadable). Two processes get the same text exactly when they run on one machine in
// one network namespace (and so reach each other over its loopback).
std::string HostIdentity();

// Collective over a host communicator: every rank shares its HostIdentity(); the ranks with this
// rank's identity form its host, in rank order. Errors: those of the all-gather.
Status DeriveLocalPosition(Communicator& c, int32_t* local_rank, int32_t* local_size);

}  // namespace shardrec::comm
