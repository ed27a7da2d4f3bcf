// Large all-reduces and reduce-scatters between MPI ranks of one host by reading the peers'
// buffers directly (Linux cross-memory attach, process_vm_readv): each rank pulls its block of
// every peer's input a cache-sized chunk at a time and sums it while the chunk is hot, then (an
// all-reduce) pulls the peers' reduced blocks straight into its output. Per rank that is one pass
// over the input and one over the output fewer than receiving whole halves into a scratch buffer
// and reducing from there; the sum keeps the rank order of the message path, so the bits are the
// same.
#if defined(__linux__)
#include <sys/uio.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "impl/comm/mpi/mpi_communicator.h"
#include "impl/comm/reduce.h"
#include "impl/core/check.h"

namespace shardrec::comm::mpi {

namespace {

// Bytes of one peer's block pulled and reduced at a time: small enough that the W-1 pulled chunks
// and the output chunk stay in a core's L2 (1 MiB or more on current x86) at world 4.
constexpr size_t kDirectChunkBytes = size_t{128} << 10;

// A value at a fixed address in this process that a peer reads to prove it can reach this
// process's memory: the same pid on another host, another pid namespace, or a ptrace policy that
// forbids the read all fail this test, and the rank falls back to messages.
const uint64_t& Cookie() {
  static const uint64_t cookie = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  }();
  return cookie;
}

// Reads `bytes` at `remote` in process `pid` into `local`; false with errno on failure.
bool ReadPeer(int64_t pid, uint64_t remote, void* local, size_t bytes) {
#if !defined(__linux__)
  // No cross-memory attach: the probe fails and every byte goes as a message.
  (void)pid, (void)remote, (void)local, (void)bytes;
  errno = ENOSYS;
  return false;
#else
  auto* dst = static_cast<uint8_t*>(local);
  while (bytes > 0) {
    // One call moves at most ~2 GiB on Linux; a short read continues where it stopped.
    const size_t n = std::min(bytes, size_t{1} << 30);
    iovec l{dst, n};
    iovec r{reinterpret_cast<void*>(remote), n};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(pid), &l, 1, &r, 1, 0);
    if (got <= 0) {
      if (got == 0) errno = EFAULT;
      return false;
    }
    dst += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return true;
#endif
}

}  // namespace

Status MpiCommunicator::GatherWords(Part part, const char* what, int64_t* mine, size_t n,
                                    int64_t* all, std::chrono::milliseconds timeout) {
  // An all-gather named after the collective it serves, so that a timeout names that one.
  const Block block{reinterpret_cast<uint8_t*>(mine), n * sizeof(int64_t)};
  std::vector<Block> sends(size_, block), recvs(size_);
  for (int r = 0; r < size_; ++r) recvs[r] = {reinterpret_cast<uint8_t*>(all + r * n), block.bytes};
  return Exchange(part, what, sends, recvs, timeout);
}

bool DirectAllowedByEnv() {
  const char* env = std::getenv("SHARDREC_MPI_DIRECT");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

Status MpiCommunicator::ProbeDirect(const char* what, std::chrono::milliseconds timeout) {
  // Collective, run once by every rank at the same call (the first large all-reduce), so every
  // rank reaches the same answer: direct only if every rank allows it and can read every other.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Member storage: after a timeout a late peer's message may still land in these words.
  const size_t w = static_cast<size_t>(size_);
  direct_words_.assign(5 * w + 4, 0);
  int64_t* all = direct_words_.data();
  int64_t* oks = all + 4 * w;
  int64_t* mine = oks + w;
  mine[0] = static_cast<int64_t>(getpid());
  mine[1] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&Cookie()));
  mine[2] = static_cast<int64_t>(Cookie());
  mine[3] = direct_allowed_ ? 1 : 0;
  SR_RETURN_IF_ERROR(GatherWords(Part::kProbe, what, mine, 4, all, Remaining(deadline)));
  int64_t ok = 1;
  for (int r = 0; r < size_ && ok; ++r) {
    if (all[4 * r + 3] == 0) ok = 0;
    if (r == rank_ || !ok) continue;
    uint64_t seen = 0;
    ok = ReadPeer(all[4 * r], static_cast<uint64_t>(all[4 * r + 1]), &seen, sizeof(seen)) &&
         seen == static_cast<uint64_t>(all[4 * r + 2]);
  }
  mine[0] = ok;
  SR_RETURN_IF_ERROR(GatherWords(Part::kProbe, what, mine, 1, oks, Remaining(deadline)));
  const bool direct = std::all_of(oks, oks + w, [](int64_t v) { return v == 1; });
  peer_pids_.resize(size_);
  for (int r = 0; r < size_; ++r) peer_pids_[r] = all[4 * r];
  direct_ = direct ? 1 : -1;
  return Status::Ok();
}

Status MpiCommunicator::Pull(const char* what, int peer, uint64_t remote, void* local,
                             size_t bytes) {
  if (ReadPeer(peer_pids_[peer], remote, local, bytes)) return Status::Ok();
  const int err = errno;
  return Poison(Status::Remote("MPI ", what, " on rank ", rank_, " of ", size_, ": reading ", bytes,
                               " bytes of rank ", peer, "'s buffer (process ", peer_pids_[peer],
                               ") failed: ", std::strerror(err),
                               err == ESRCH ? " (the peer process has exited)" : ""));
}

Status MpiCommunicator::DirectReduce(Part part, const char* what, const void* send, void* out,
                                     void* recv, std::span<const size_t> blocks, DType dtype,
                                     ReduceOp op, std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Round 1: the buffers' addresses and the call's size, which also shows that every rank has
  // entered the call (its input is ready and its output may be written). No message carries the
  // data here, so the size check the message path makes on every receive is made on these words:
  // a rank given a different count would read past a peer's buffer.
  // In the words ProbeDirect sized (3W received, then 3 sent), which outlive a timed-out call.
  constexpr size_t kWords = 3;
  int64_t* addr = direct_words_.data();
  int64_t* mine = addr + kWords * static_cast<size_t>(size_);
  size_t total = 0;
  for (size_t b : blocks) total += b;
  mine[0] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(send));
  mine[1] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(recv));  // 0: a reduce-scatter
  mine[2] = static_cast<int64_t>(total * width);
  SR_RETURN_IF_ERROR(GatherWords(part, what, mine, kWords, addr, Remaining(deadline)));
  for (int r = 0; r < size_; ++r) {
    // Every rank sees every rank's words, so every rank of a mismatched call fails here, before
    // any rank reads another's memory.
    const int64_t bytes = addr[kWords * static_cast<size_t>(r) + 2];
    if (bytes != mine[2]) {
      return Status::Remote("MPI ", what, " failed on rank ", rank_, " of ", size_, ": rank ", r,
                            " called it for ", bytes, " bytes where this rank called it for ",
                            mine[2],
                            " bytes: the ranks passed different counts (nothing was "
                            "read from any rank)");
    }
  }
  std::vector<size_t> offsets(size_);
  for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + blocks[r - 1];
  const size_t count = blocks[rank_];
  const size_t unit = std::max<size_t>(1, kDirectChunkBytes / width);
  const size_t slot = std::min(unit, count) * width;
  uint8_t* slots = Scratch(&exchange_scratch_, slot * static_cast<size_t>(size_));
  const uint8_t* own = static_cast<const uint8_t*>(send) + offsets[rank_] * width;
  // In place, ranks >= 2 sum into their own slot: their input is read after the sum has begun.
  const bool aliased = static_cast<const uint8_t*>(out) == own;
  std::vector<const uint8_t*> parts(size_);
  for (size_t done = 0; done < count; done += unit) {
    if (aborted_.load(std::memory_order_relaxed)) return Usable();
    const size_t n = std::min(unit, count - done);
    const size_t at = (offsets[rank_] + done) * width;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        parts[r] = own + done * width;
        continue;
      }
      uint8_t* dst = slots + static_cast<size_t>(r) * slot;
      SR_RETURN_IF_ERROR(Pull(what, r,
                              static_cast<uint64_t>(addr[kWords * static_cast<size_t>(r)]) + at,
                              dst, n * width));
      parts[r] = dst;
    }
    uint8_t* dst = static_cast<uint8_t*>(out) + done * width;
    uint8_t* acc = aliased && rank_ >= 2 ? slots + static_cast<size_t>(rank_) * slot : dst;
    // Rank order, as the message path and Gloo: ((b0 + b1) + b2) + ...
    fn(acc, parts[0], parts[1], n);
    for (int s = 2; s < size_; ++s) fn(acc, acc, parts[s], n);
    if (acc != dst) std::memcpy(dst, acc, n * width);
    if (op == ReduceOp::kAvg) DivideBy(dst, n, dtype, size_);
  }
  // Round 2: every block is reduced and no rank reads another's input any more, so each rank may
  // return (a reduce-scatter) or overwrite the rest of its output (in place: its input) with the
  // peers' blocks.
  SR_RETURN_IF_ERROR(EmptyExchange(part, what, Remaining(deadline)));
  if (recv == nullptr) return Status::Ok();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || blocks[r] == 0) continue;
    const size_t at = offsets[r] * width;
    SR_RETURN_IF_ERROR(Pull(what, r,
                            static_cast<uint64_t>(addr[kWords * static_cast<size_t>(r) + 1]) + at,
                            static_cast<uint8_t*>(recv) + at, blocks[r] * width));
  }
  // Round 3: no rank returns, and reuses its output, while a peer may still be reading it.
  return EmptyExchange(part, what, Remaining(deadline));
}

}  // namespace shardrec::comm::mpi
