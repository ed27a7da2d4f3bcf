// Whether a peer process of the segment is still there. A rank killed in the middle of a
// collective never flags its abort and its rings stop, so a peer waiting in the segment would
// wait out its whole timeout, where Gloo learns of the death from the closed socket at once. Each
// rank leaves its process's identity in its rank line (layout.h); a waiting peer looks it up in
// /proc whenever it wakes with nothing to do.
#pragma once

#include <cstdint>

namespace shardrec::comm::shm {

// A process as /proc names it: the pid, the pid namespace it is read in (the inode of
// /proc/self/ns/pid) and its start time in clock ticks since boot, which tells a reused pid apart.
struct ProcessId {
  int32_t pid = 0;
  uint64_t pid_ns = 0;
  uint64_t start_ticks = 0;
};

// This process.
ProcessId SelfProcess();

// True when `p` has certainly exited or was killed: no such pid, another process under its pid,
// or a zombie. False while it runs or is stopped, and whenever this process cannot tell (another
// pid namespace, an unreadable /proc): then the timeout still ends the wait.
bool ProcessGone(const ProcessId& p);

}  // namespace shardrec::comm::shm
