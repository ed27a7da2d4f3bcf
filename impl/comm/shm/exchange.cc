#include "impl/comm/shm/exchange.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "impl/comm/shm/doorbell.h"
#include "impl/comm/shm/liveness.h"
#include "impl/core/check.h"

namespace shardrec::comm::shm {

namespace {

// About 20-50 us of spinning before sleeping: a peer that is already in the same collective
// answers within that, and on an oversubscribed host a longer spin takes the CPU the peer needs.
constexpr int kSpins = 512;
// A sleeper wakes at least this often to look at the deadline, its peers' abort flags and its
// stop condition (an abort of an ancestor communicator reaches the wrapped one, not this ring).
constexpr std::chrono::milliseconds kLongestSleep{20};

void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Status Exchanger::PeerAborted(const char* what) const {
  for (int p = 0; p < layout_.geometry().world; ++p) {
    if (p == rank_) continue;
    const uint32_t flag = Shared(&layout_.rank(p)->aborted).load(std::memory_order_acquire);
    if (flag == kTimedOut)
      return Status::Timeout("shared-memory ", what, ": rank ", p,
                             " timed out waiting in it (a peer that does not answer)");
    if (flag != kNotAborted)
      return Status::Remote("shared-memory ", what, ": rank ", p,
                            " aborted its communicator or saw it fail");
  }
  return Status::Ok();
}

uint64_t Exchanger::Chunks(size_t bytes) const {
  const size_t slot = layout_.geometry().slot_bytes;
  return std::max<uint64_t>(1, (bytes + slot - 1) / slot);
}

void Exchanger::Push(int to, const OutMessage& m, Flow& f, bool* moved) {
  const Geometry& g = layout_.geometry();
  auto posted = Shared(layout_.posted(rank_, to));
  auto consumed = Shared(layout_.consumed(rank_, to));
  uint32_t p = posted.load(std::memory_order_relaxed);  // written by this rank only
  bool any = false;
  while (f.done < f.chunks) {
    if (p - consumed.load(std::memory_order_acquire) >= g.slots) break;
    const uint32_t slot = p % g.slots;
    const uint64_t offset = f.done * g.slot_bytes;
    const uint64_t len = std::min<uint64_t>(g.slot_bytes, f.bytes - offset);
    *layout_.chunk(rank_, to, slot) = ChunkHeader{op_, f.bytes, offset, len};
    if (len > 0) std::memcpy(layout_.payload(rank_, to, slot), m.data + offset, len);
    posted.store(++p, std::memory_order_release);
    ++f.done;
    any = true;
  }
  if (any) {
    Ring(layout_.rank(to));
    *moved = true;
  }
}

Status Exchanger::Pull(int from, const InMessage& m, Flow& f, const char* what, bool* moved) {
  const Geometry& g = layout_.geometry();
  auto posted = Shared(layout_.posted(from, rank_));
  auto consumed = Shared(layout_.consumed(from, rank_));
  uint32_t c = consumed.load(std::memory_order_relaxed);  // written by this rank only
  bool any = false;
  Status s;
  while (f.done < f.chunks) {
    if (posted.load(std::memory_order_acquire) == c) break;
    const uint32_t slot = c % g.slots;
    const ChunkHeader h = *layout_.chunk(from, rank_, slot);
    const uint64_t offset = f.done * g.slot_bytes;
    if (h.op != op_ || h.total != f.bytes || h.offset != offset ||
        h.len != std::min<uint64_t>(g.slot_bytes, f.bytes - offset)) {
      s = Status::Remote("shared-memory ", what, ": rank ", from, " sent ", h.total,
                         " bytes in its collective #", h.op, " where rank ", rank_, " expects ",
                         f.bytes, " bytes in its collective #", op_,
                         " (the ranks' calls or counts disagree)");
      break;
    }
    if (h.len > 0) std::memcpy(m.data + offset, layout_.payload(from, rank_, slot), h.len);
    consumed.store(++c, std::memory_order_release);
    ++f.done;
    any = true;
  }
  if (any) {
    Ring(layout_.rank(from));
    *moved = true;
  }
  return s;
}

Status Exchanger::Run(std::span<const OutMessage> out, std::span<const InMessage> in,
                      const char* what, std::chrono::milliseconds timeout,
                      const std::function<Status()>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int n = layout_.geometry().world;
  SR_CHECK(out.size() == static_cast<size_t>(n) && in.size() == static_cast<size_t>(n));
  ++op_;
  const auto me = static_cast<size_t>(rank_);
  SR_CHECK(out[me].bytes == in[me].bytes);
  if (out[me].bytes > 0) std::memcpy(in[me].data, out[me].data, out[me].bytes);
  std::vector<Flow> sends(n), recvs(n);
  int open = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    sends[p] = Flow{out[p].bytes, Chunks(out[p].bytes), 0};
    recvs[p] = Flow{in[p].bytes, Chunks(in[p].bytes), 0};
    open += 2;
  }
  SR_RETURN_IF_ERROR(PeerAborted(what));
  RankLine* mine = layout_.rank(rank_);
  int idle = 0;
  for (;;) {
    // Read before looking, so a ring during the look is not slept through.
    const uint32_t seen = Shared(&mine->doorbell).load(std::memory_order_seq_cst);
    bool moved = false;
    for (int p = 0; p < n; ++p) {
      if (p == rank_) continue;
      if (sends[p].done < sends[p].chunks) {
        Push(p, out[p], sends[p], &moved);
        if (sends[p].done == sends[p].chunks) --open;
      }
      if (recvs[p].done < recvs[p].chunks) {
        SR_RETURN_IF_ERROR(Pull(p, in[p], recvs[p], what, &moved));
        if (recvs[p].done == recvs[p].chunks) --open;
      }
    }
    if (open == 0) return Status::Ok();
    if (moved) {
      idle = 0;
      continue;
    }
    SR_RETURN_IF_ERROR(PeerAborted(what));
    if (++idle < kSpins) {
      Relax();
      continue;
    }
    SR_RETURN_IF_ERROR(stop());
    for (int p = 0; p < n; ++p) {
      if (p == rank_ || (sends[p].done == sends[p].chunks && recvs[p].done == recvs[p].chunks))
        continue;
      const RankLine* line = layout_.rank(p);
      if (ProcessGone({line->pid, line->pid_ns, line->start_ticks})) {
        return Status::Remote("shared-memory ", what, " on rank ", rank_, ": rank ", p,
                              " (process ", line->pid,
                              ") is gone, exited or killed in the middle of the collective");
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string owed;
      for (int p = 0; p < n; ++p) {
        if (p == rank_) continue;
        if (sends[p].done < sends[p].chunks || recvs[p].done < recvs[p].chunks)
          owed += (owed.empty() ? "" : ", ") + std::to_string(p);
      }
      return Status::Timeout("shared-memory ", what, " on rank ", rank_,
                             " did not complete within ", timeout.count(),
                             " ms (still exchanging with rank ", owed, ")");
    }
    Sleep(mine, seen, std::min<std::chrono::nanoseconds>(deadline - now, kLongestSleep));
  }
}

}  // namespace shardrec::comm::shm
