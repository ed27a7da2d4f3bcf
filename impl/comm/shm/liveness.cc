#include "impl/comm/shm/liveness.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardrec::comm::shm {

namespace {

uint64_t PidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// The state letter and start time of /proc/<pid>/stat; false when there is no such process.
bool ReadStat(int32_t pid, char* state, uint64_t* start_ticks) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name (field 2) is in parentheses and may hold spaces: fields count from the last
  // ')'. After it: state (3), then fields 4..21, then starttime (22).
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  *state = *p;
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  *start_ticks = std::strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

ProcessId SelfProcess() {
  ProcessId me;
  me.pid = static_cast<int32_t>(::getpid());
  me.pid_ns = PidNamespace();
  char state = 0;
  if (!ReadStat(me.pid, &state, &me.start_ticks)) me.start_ticks = 0;
  return me;
}

bool ProcessGone(const ProcessId& p) {
  static const uint64_t mine = PidNamespace();
  if (p.pid <= 0 || p.pid_ns == 0 || p.start_ticks == 0 || p.pid_ns != mine) return false;
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(p.pid, &state, &start)) {
    // No such process, or no /proc to ask: only the first is an answer.
    struct stat st {};
    return ::stat("/proc/self/stat", &st) == 0;
  }
  return start != p.start_ticks || state == 'Z' || state == 'X';
}

}  // namespace shardrec::comm::shm
