// The device step's verdict phase as an object that owns its state: the verdict's device words,
// their agreed part downloaded with the phase, and that download's ticket. DeviceStep composes
// it (step.h) and hands it the step's stream, staging and device for each call; the words'
// meaning and the two forms (a phase of its own, or queued first in the update phase as the
// gate the updates read) are step.h's. One thread at a time, as the step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/comm/communicator.h"
#include "impl/core/device_buffer.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/gpu/staging.h"

namespace shardrec::embedding {

struct DeviceVerdictWork;

// What a verdict call queues on: the step's device, stream, execution context and staging.
// Borrowed for the call only.
struct VerdictPhase {
  int device = 0;
  Stream stream = nullptr;
  const ExecContext* ctx = nullptr;
  DeviceStaging* staging = nullptr;
};

class DeviceVerdict {
 public:
  // Room for `words` of the verdict's words: 4 for Queue, 2 for QueueOwn (before a phase queues
  // anything: a growth waits).
  Status Reserve(int device, Stream stream, size_t words = 4);
  // Queues the verdict's words (DeviceVerdictWork) within a phase the caller began; their agreed
  // part comes down with the phase. *gate receives the agreed word's device address.
  Status Queue(const VerdictPhase& ph, const DeviceVerdictWork& v, const int64_t** gate);
  // Queues a verdict phase's own work (this rank's flag up, all-reduced over `comm`, the agreed
  // word down into *agreed once the caller has ended the phase); the caller begins and ends it.
  Status QueueOwn(const VerdictPhase& ph, comm::Communicator* comm, int64_t local_flag,
                  int64_t* agreed);
  // After the download of the last Queue arrived: the agreed word, the first non-finite element
  // of the checked gradient (-1 when none) and its value.
  void Read(int64_t* agreed, int64_t* first_bad, float* bad_value) const;
  // Whether the last Queue's download has arrived.
  bool Arrived(const DeviceStaging& staging) const { return staging.delivered() >= ticket_; }

 private:
  core::DeviceBuffer words_;  // [0] this rank's flag, [1] the agreed one, [2, 4) the check
  int64_t host_[3] = {};      // the agreed word and the first non-finite element, downloaded
  uint64_t ticket_ = 0;       // their download (DeviceStaging::Download)
};

}  // namespace shardrec::embedding
