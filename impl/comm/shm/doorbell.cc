#include "impl/comm/shm/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace shardrec::comm::shm {

namespace {

// Not FUTEX_PRIVATE: the word is shared between processes.
long Futex(uint32_t* word, int op, uint32_t value, const timespec* limit) {
  return ::syscall(SYS_futex, word, op, value, limit, nullptr, 0);
}

}  // namespace

void Ring(RankLine* line) {
  Shared(&line->doorbell).fetch_add(1, std::memory_order_seq_cst);
  if (Shared(&line->sleepers).load(std::memory_order_seq_cst) != 0)
    Futex(&line->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

void Sleep(RankLine* line, uint32_t seen, std::chrono::nanoseconds limit) {
  if (limit.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  Shared(&line->sleepers).fetch_add(1, std::memory_order_seq_cst);
  Futex(&line->doorbell, FUTEX_WAIT, seen, &ts);  // returns at once if the doorbell moved
  Shared(&line->sleepers).fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace shardrec::comm::shm
