// Measures the local disk a tiered table's store would use (docs/disk-tier.md, "Planning"):
// random 4 KiB reads per second at a queue depth of several threads, the read bandwidth of
// 1 MiB sequential reads, and the free space, on a scratch file in the given directory.
#pragma once

#include <cstdint>
#include <string>

#include "impl/core/status.h"

namespace shardrec::planner {

struct DiskCalibration {
  double read_iops = 0;     // random 4 KiB reads per ms, all threads together
  double read_bw = 0;       // bytes per ms of 1 MiB sequential reads
  uint64_t free_bytes = 0;  // space the file system gives this user (statvfs f_bavail)
  bool direct_io = false;   // reads bypassed the page cache (O_DIRECT)
  double elapsed_ms = 0;    // wall time of the whole calibration
};

// Writes a scratch file of `file_bytes` (a multiple of 1 MiB, at least 1 MiB) in `dir`, reads
// it with `threads` threads of random 4 KiB reads for about half of `budget_ms` and sequentially
// for about a quarter, and removes it. Reads use O_DIRECT where the file system takes it (else
// the page cache answers them, and the figure is the cache's: `direct_io` says which).
// kNotFound when `dir` does not exist; kIo naming the file and the call when the file cannot be
// written or read (a full disk); the file is removed on every path. Thread-safe; concurrent
// calls disturb each other's figures.
Status CalibrateDisk(const std::string& dir, uint64_t file_bytes, int threads, double budget_ms,
                     DiskCalibration* out);

}  // namespace shardrec::planner
