// Measures the figures the host cost model needs on this machine, in a fraction of a second:
// the random-row gather bandwidth a lookup sees, the collectives of the ranks of one node on the
// shared-memory transport they use (timed by the comm layer through a probe the caller passes
// in), a loopback TCP connection's bandwidth and latency (what Gloo between those ranks costs
// where shared memory is unavailable), the hand-off of the node's ranks as threads, and, reported
// only, the streaming copy bandwidth. The NIC between nodes needs a peer and is not measured.
#pragma once

#include <cstdint>

#include "impl/core/status.h"
#include "impl/planner/topology.h"

namespace shardrec::planner {

// A pooled lookup over one fp32 table (row_floats per row): bag b sums the rows
// rows[offsets[b] .. offsets[b+1]) into out + b * row_floats.
using BagSumFn = void (*)(const float* table, int64_t table_rows, int32_t row_floats,
                          const int64_t* offsets, int64_t num_bags, const int64_t* rows,
                          float* out);

// What the collectives of two ranks of one host cost on the shared-memory transport (bytes/ms,
// ms). `available` is false when the comm layer keeps such a group on Gloo (the transport turned
// off, or /dev/shm cannot hold its segment); the figures are then 0.
struct SharedMemoryFigures {
  bool available = false;
  double bw = 0;  // bytes each rank sends per ms in a large all-to-all
  // One small collective (an all-reduce of one integer) whose ranks arrive apart: from the later
  // rank's arrival to the return of the one asleep waiting for it.
  double latency = 0;
};

// Times the shared-memory route within about `budget_ms` (medians of its own rounds). The
// planner sits below the comm layer, so the caller passes the comm layer's own collectives in.
using SharedMemoryProbeFn = Status (*)(double budget_ms, SharedMemoryFigures* out);

struct CalibrateOptions {
  // Ranks are threads of one process (a local communicator group): they also wait for one
  // another at each collective (the C API adds handoff_latency to the collective latency).
  bool ranks_share_memory = false;
  // Threads each rank's lookup runs on.
  int32_t threads_per_rank = 1;
  // Ranks that run at once on this machine: the gather runs on ranks_per_node x
  // threads_per_rank threads at once (at most one per usable CPU: more would not read faster)
  // and each rank is credited its share, so ranks that oversubscribe the cores or saturate
  // memory see it; the hand-off is a barrier of this many threads (at least 2, at most 4 per
  // usable CPU).
  int32_t ranks_per_node = 1;
  // Soft budget for the whole measurement; rounds after the first stop once it is spent.
  double budget_ms = 250.0;
  // The kernel the gather is timed with. The C API passes the collections' own lookup, so the
  // figure is what their lookups reach with their vector width and prefetch distance on this
  // machine (the planner sits below the kernels and cannot call them itself). Null: a portable
  // loop, which can read faster or slower than the lookup depending on the machine.
  BagSumFn bag_sum = nullptr;
  // Times the shared-memory transport (the C API passes a probe over a local group of its
  // communicators). Null: not measured (Calibration::shm stays unavailable).
  SharedMemoryProbeFn shm_probe = nullptr;
};

// All bandwidths bytes/ms, latencies ms (the planner's units).
struct Calibration {
  // Random 256-byte rows of a 64 MiB table evicted from the caches, summed per bag (bag_sum).
  double gather_bw = 0;
  double stream_bw = 0;  // memcpy of 32 MiB: bytes copied per ms
  // The collectives of ranks of one host on shared memory (CalibrateOptions::shm_probe).
  SharedMemoryFigures shm;
  // Gloo's route between ranks of one host where shared memory is unavailable.
  double loopback_bw = 0;       // 16 MiB over a 127.0.0.1 TCP connection
  double loopback_latency = 0;  // half a 1-byte round trip over that connection
  // One synchronisation point of ranks_per_node (>= 2) threads that work between them: the
  // mean round time beyond the work (mutex + condvar; includes waits for descheduled peers).
  double handoff_latency = 0;
  // Per-id host work scale: ranks_per_node over the CPUs this process may use (UsableCpus), >= 1
  // (each rank's host work runs mostly on one thread).
  double oversubscription = 1;
  double elapsed_ms = 0;  // wall time of the whole calibration
};

// Runs the measurements on the calling thread (plus one helper thread for the loopback and
// hand-off pairs, and what the probe starts). Each figure is the median of up to three rounds,
// so one descheduled round on a loaded machine does not decide it. Thread-safe: uses only its
// own buffers and sockets. Errors: kIo when a loopback socket cannot be opened or fails (the
// message names the call); the probe's.
Status Calibrate(const CalibrateOptions& options, Calibration* out);

}  // namespace shardrec::planner
