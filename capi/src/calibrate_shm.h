// The calibration's probe of the shared-memory transport (planner::CalibrateOptions::shm_probe):
// the collectives of the ranks of one host timed through the comm layer's own communicators.
#pragma once

#include "impl/core/status.h"
#include "impl/planner/calibrate.h"

namespace shardrec::capi {

// Creates a local group of two rank threads (Gloo wrapped by the shared-memory transport, as
// every host group of two or more ranks is: comm/shm/shm_communicator.h) and, when the group
// took shared memory, times on it, each the median of up to three rounds within about
// `budget_ms` (the first round always runs): the bytes each rank sends per ms in an all-to-all
// of 4 MiB per rank, and the latency of an all-reduce of one int64 whose ranks arrive apart
// (from the later rank's arrival to the return of the rank asleep waiting for it). When the group
// stays on Gloo (SHARDREC_SHM=0, no room in /dev/shm) *out says so and nothing is timed.
// Errors: those of creating the group (kIo, kTimeout) and of its collectives (kTimeout, kRemote).
Status ProbeSharedMemory(double budget_ms, planner::SharedMemoryFigures* out);

}  // namespace shardrec::capi
