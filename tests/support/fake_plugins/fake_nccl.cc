// The fake plugin's NCCL double (fake_nccl.h): communicators whose members are threads of this
// process, collectives as bounded rendezvous over the fake device memory.
#include "tests/support/fake_plugins/fake_nccl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/reduce.h"
#include "impl/core/check.h"
#include "impl/core/dtype.h"

namespace shardrec::fake::nccl {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_counters[kNumCounters];

// What one member brings to a rendezvous: its send buffer and the per-rank counts or scalars
// the operation needs from every member.
struct Post {
  const void* send = nullptr;
  size_t count = 0;
  std::vector<size_t> counts;
  int32_t color = 0;
  int32_t key = 0;
};

// State shared by the members of one communicator. A round is one collective: every member
// posts (arrived), then every member computes its result from the posts into its own scratch
// (computed); the round ends when the last one has, and only then does any member write its
// receive buffer, so in-place operations never read a peer's overwritten bytes.
struct Group {
  explicit Group(int n) : size(n), posts(static_cast<size_t>(n)) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t round = 0;
  int arrived = 0;
  int computed = 0;
  bool all_arrived = false;
  Status broken;  // a member gave up on a round or aborted: no later round can complete
  std::vector<Post> posts;
  std::map<int32_t, std::shared_ptr<Group>> children;  // Split of the current round, by color
};

struct Member {
  Member(std::shared_ptr<Group> group, int r, int64_t timeout)
      : g(std::move(group)), rank(r), timeout_ms(timeout) {}
  std::shared_ptr<Group> g;
  const int rank;
  std::atomic<int64_t> timeout_ms;
  mutable std::mutex mu;
  Status poison;

  Status Usable() const {
    std::lock_guard<std::mutex> lock(mu);
    if (poison.ok()) return Status::Ok();
    return Status::InvalidUsage("NCCL communicator (rank ", rank, " of ", g->size,
                                ") is unusable after an earlier error: ", poison.ToString());
  }
  Status Fail(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (poison.ok()) poison = s;
    return s;
  }
};

Member* From(shardrec_plugin_nccl_t* c) { return reinterpret_cast<Member*>(c); }
shardrec_plugin_nccl_t* To(Member* m) { return reinterpret_cast<shardrec_plugin_nccl_t*>(m); }

template <typename Body>
int32_t Reported(shardrec_plugin_status_t* st, const char* what, Body&& body) noexcept {
  try {
    return FakeReport(body(), st);
  } catch (const StatusError& e) {
    return FakeReport(e.status(), st);
  } catch (const std::bad_alloc&) {
    return FakeReport(Status::OutOfMemory("out of host memory in fake ", what), st);
  } catch (...) {
    return FakeReport(Status::Internal("unexpected exception in fake ", what), st);
  }
}

Status CheckType(int32_t dtype) {
  if (dtype < 0 || dtype > static_cast<int32_t>(DType::kUInt8))
    return Status::InvalidArgument("unsupported dtype ", dtype);
  return Status::Ok();
}

size_t Bytes(size_t elements, int32_t dtype) {
  return elements * DTypeSize(static_cast<DType>(dtype));
}

size_t Sum(const size_t* counts, int n) {
  size_t s = 0;
  for (int i = 0; i < n; ++i) s += counts[i];
  return s;
}

// Device memory, as the GPU would demand: a host pointer (or one past its block) is refused.
Status CheckDev(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return Status::Ok();
  if (p == nullptr) return Status::InvalidArgument(what, " must not be NULL when it holds data");
  return FakeDeviceMemory().Check(p, bytes, what);
}

Clock::time_point Deadline(const Member& m, int64_t timeout_ms) {
  const int64_t t = timeout_ms > 0 ? timeout_ms : m.timeout_ms.load();
  return Clock::now() + std::chrono::milliseconds(t);
}

// One collective round for member `m`: posts `post`, waits (bounded) for every member, runs
// `compute` over all posts (it fills the member's scratch), waits until every member has
// computed. A member missing at the deadline breaks the group: the waiting members get
// kTimeout and are poisoned, as the real communicator's watchdog aborts them.
Status Rendezvous(Member& m, const char* what, int64_t timeout_ms, Post post,
                  const std::function<Status(const std::vector<Post>&)>& compute) {
  SR_RETURN_IF_ERROR(m.Usable());
  const Clock::time_point deadline = Deadline(m, timeout_ms);
  const int64_t waited = timeout_ms > 0 ? timeout_ms : m.timeout_ms.load();
  Group& g = *m.g;
  std::unique_lock<std::mutex> l(g.mu);
  auto broke = [&](const Status& why) {
    if (why.code() == Code::kTimeout)
      return Status::Timeout("NCCL ", what, " on rank ", m.rank, " of ", g.size,
                             " did not complete within ", waited,
                             " ms (a missing or stalled peer?); the communicator was aborted");
    return Status::Remote("NCCL ", what, " on rank ", m.rank, " of ", g.size,
                          ": a peer's communicator failed: ", why.message());
  };
  if (!g.broken.ok()) {
    const Status s = broke(g.broken);
    l.unlock();
    return m.Fail(s);
  }
  const uint64_t round = g.round;
  g.posts[static_cast<size_t>(m.rank)] = std::move(post);
  if (++g.arrived == g.size) {
    g.all_arrived = true;
    g.cv.notify_all();
  }
  if (!g.cv.wait_until(l, deadline, [&] { return g.all_arrived || !g.broken.ok(); }) ||
      !g.all_arrived) {
    if (g.broken.ok()) g.broken = Status::Timeout(what);
    g.cv.notify_all();
    const Status s = broke(g.broken);
    l.unlock();
    return m.Fail(s);
  }
  l.unlock();
  const Status computed = compute(g.posts);
  l.lock();
  if (++g.computed == g.size) {
    ++g.round;
    g.arrived = 0;
    g.computed = 0;
    g.all_arrived = false;
    g.children.clear();
    g.cv.notify_all();
  } else if (!g.cv.wait_until(l, deadline, [&] { return g.round != round || !g.broken.ok(); }) ||
             g.round == round) {
    if (g.broken.ok()) g.broken = Status::Timeout(what);
    g.cv.notify_all();
    const Status s = broke(g.broken);
    l.unlock();
    return m.Fail(s);
  }
  l.unlock();
  // Mismatched counts are a caller's error that NCCL would turn into a hang or garbage; the
  // double names it and poisons the member.
  if (!computed.ok()) return m.Fail(computed);
  return Status::Ok();
}

// Writes the computed bytes into the member's receive buffer and counts the collective.
void Commit(void* recv, const std::vector<uint8_t>& bytes) {
  if (!bytes.empty()) std::memcpy(recv, bytes.data(), bytes.size());
  g_counters[kCollectives].fetch_add(1);
  g_counters[kBytes].fetch_add(static_cast<int64_t>(bytes.size()));
}

// out = reduction over the members' blocks at `offset` elements, in rank order (kAvg: the sum
// divided by the group size).
Status ReduceBlocks(const std::vector<Post>& posts, size_t offset, size_t count, int32_t dtype,
                    int32_t op, std::vector<uint8_t>* out) {
  comm::ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(
      comm::GetReduceFn(static_cast<DType>(dtype), static_cast<comm::ReduceOp>(op), &fn));
  const size_t bytes = Bytes(count, dtype);
  out->assign(bytes, 0);
  if (bytes == 0) return Status::Ok();
  const size_t at = Bytes(offset, dtype);
  std::memcpy(out->data(), static_cast<const uint8_t*>(posts[0].send) + at, bytes);
  for (size_t r = 1; r < posts.size(); ++r)
    fn(out->data(), out->data(), static_cast<const uint8_t*>(posts[r].send) + at, count);
  if (op == static_cast<int32_t>(comm::ReduceOp::kAvg))
    comm::DivideBy(out->data(), count, static_cast<DType>(dtype), static_cast<int>(posts.size()));
  return Status::Ok();
}

struct Pending {
  explicit Pending(int w) : world(w), claimed(static_cast<size_t>(w), false) {}
  const int world;
  std::vector<bool> claimed;
  int joined = 0;
  bool complete = false;
  std::shared_ptr<Group> group;
};

struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::shared_ptr<Pending>> pending;
};

Registry& Reg() {
  static Registry* r = new Registry;  // outlives every caller's static destructors
  return *r;
}

}  // namespace

int64_t Counter(int32_t which) {
  return which >= 0 && which < kNumCounters ? g_counters[which].load() : -1;
}

int32_t UniqueId(uint8_t* id, size_t len, shardrec_plugin_status_t* st) {
  return Reported(st, "ncclGetUniqueId", [&]() -> Status {
    if (id == nullptr || len != SHARDREC_PLUGIN_NCCL_ID_BYTES)
      return Status::InvalidArgument("NCCL unique id buffer must hold ",
                                     SHARDREC_PLUGIN_NCCL_ID_BYTES, " bytes, got ", len);
    static std::atomic<uint64_t> serial{0};
    static std::mutex mu;
    static std::mt19937_64 rng{std::random_device{}()};
    std::memset(id, 0, len);
    const uint64_t n = serial.fetch_add(1) + 1;
    uint64_t r = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      r = rng();
    }
    std::memcpy(id, &n, sizeof(n));
    std::memcpy(id + sizeof(n), &r, sizeof(r));
    return Status::Ok();
  });
}

int32_t Create(const uint8_t* id, size_t len, int32_t world, int32_t rank, int32_t device,
               int64_t timeout_ms, shardrec_plugin_nccl_t** out, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL communicator creation", [&]() -> Status {
    if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
    *out = nullptr;
    if (id == nullptr || len != SHARDREC_PLUGIN_NCCL_ID_BYTES)
      return Status::InvalidArgument("NCCL unique id must have ", SHARDREC_PLUGIN_NCCL_ID_BYTES,
                                     " bytes, got ", len);
    if (world < 1 || rank < 0 || rank >= world || device < 0 || timeout_ms <= 0)
      return Status::InvalidArgument("invalid NCCL communicator arguments: world ", world,
                                     ", rank ", rank, ", device ", device, ", timeout ", timeout_ms,
                                     " ms");
    if (device != 0) return Status::InvalidArgument("fake device: no device ", device);
    const std::string key(reinterpret_cast<const char*>(id), len);
    Registry& reg = Reg();
    std::unique_lock<std::mutex> l(reg.mu);
    std::shared_ptr<Pending>& slot = reg.pending[key];
    if (slot == nullptr) slot = std::make_shared<Pending>(world);
    const std::shared_ptr<Pending> p = slot;
    if (p->world != world)
      return Status::InvalidArgument("NCCL communicator creation: rank ", rank, " says world ",
                                     world, " but another rank of this id said ", p->world);
    if (p->claimed[static_cast<size_t>(rank)])
      return Status::InvalidUsage("NCCL communicator creation: rank ", rank,
                                  " was claimed twice with this id");
    p->claimed[static_cast<size_t>(rank)] = true;
    if (++p->joined == world) {
      p->group = std::make_shared<Group>(world);
      p->complete = true;
      reg.pending.erase(key);
      reg.cv.notify_all();
    } else if (!reg.cv.wait_until(l, Clock::now() + std::chrono::milliseconds(timeout_ms),
                                  [&] { return p->complete; })) {
      p->claimed[static_cast<size_t>(rank)] = false;
      if (--p->joined == 0) {
        auto it = reg.pending.find(key);
        if (it != reg.pending.end() && it->second == p) reg.pending.erase(it);
      }
      return Status::Timeout("NCCL communicator initialisation (rank ", rank, " of ", world,
                             ") did not complete within ", timeout_ms,
                             " ms (is every rank running and reachable?); aborted");
    }
    *out = To(new Member(p->group, rank, timeout_ms));
    g_counters[kCreated].fetch_add(1);
    g_counters[kLive].fetch_add(1);
    return Status::Ok();
  });
}

void Destroy(shardrec_plugin_nccl_t* comm) {
  if (comm == nullptr) return;
  delete From(comm);
  g_counters[kLive].fetch_sub(1);
}

void SetTimeout(shardrec_plugin_nccl_t* comm, int64_t timeout_ms) {
  if (comm != nullptr && timeout_ms > 0) From(comm)->timeout_ms.store(timeout_ms);
}

int32_t AllReduce(shardrec_plugin_nccl_t* comm, const void* send, void* recv, size_t count,
                  int32_t dtype, int32_t op, void* stream, int64_t timeout_ms,
                  shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL allreduce", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    Member& m = *From(comm);
    SR_RETURN_IF_ERROR(CheckType(dtype));
    comm::ReduceFn fn = nullptr;
    SR_RETURN_IF_ERROR(
        comm::GetReduceFn(static_cast<DType>(dtype), static_cast<comm::ReduceOp>(op), &fn));
    SR_RETURN_IF_ERROR(CheckDev(send, Bytes(count, dtype), "allreduce send buffer"));
    SR_RETURN_IF_ERROR(CheckDev(recv, Bytes(count, dtype), "allreduce recv buffer"));
    if (count == 0) return m.Usable();
    FakeStreamReached(stream);
    std::vector<uint8_t> result;
    Post post;
    post.send = send;
    post.count = count;
    SR_RETURN_IF_ERROR(Rendezvous(
        m, "allreduce", timeout_ms, std::move(post), [&](const std::vector<Post>& posts) -> Status {
          for (const Post& q : posts)
            if (q.count != count)
              return Status::InvalidArgument("allreduce counts differ between ranks: ", count,
                                             " and ", q.count);
          return ReduceBlocks(posts, 0, count, dtype, op, &result);
        }));
    Commit(recv, result);
    return Status::Ok();
  });
}

int32_t AllToAllV(shardrec_plugin_nccl_t* comm, const void* send, const size_t* send_counts,
                  void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                  int64_t timeout_ms, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL alltoallv", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    if (send_counts == nullptr) return Status::InvalidArgument("send_counts must not be NULL");
    if (recv_counts == nullptr) return Status::InvalidArgument("recv_counts must not be NULL");
    Member& m = *From(comm);
    const int n = m.g->size;
    SR_RETURN_IF_ERROR(CheckType(dtype));
    SR_RETURN_IF_ERROR(CheckDev(send, Bytes(Sum(send_counts, n), dtype), "alltoallv send buffer"));
    SR_RETURN_IF_ERROR(CheckDev(recv, Bytes(Sum(recv_counts, n), dtype), "alltoallv recv buffer"));
    FakeStreamReached(stream);
    std::vector<uint8_t> result;
    Post post;
    post.send = send;
    post.counts.assign(send_counts, send_counts + n);
    SR_RETURN_IF_ERROR(Rendezvous(
        m, "alltoallv", timeout_ms, std::move(post), [&](const std::vector<Post>& posts) -> Status {
          result.resize(Bytes(Sum(recv_counts, n), dtype));
          size_t at = 0;
          for (int p = 0; p < n; ++p) {
            const Post& q = posts[static_cast<size_t>(p)];
            const size_t got = q.counts[static_cast<size_t>(m.rank)];
            if (got != recv_counts[p])
              return Status::InvalidArgument("alltoallv: rank ", p, " sends ", got,
                                             " elements to rank ", m.rank, ", which expects ",
                                             recv_counts[p]);
            const size_t from = Sum(q.counts.data(), m.rank);
            if (got > 0)
              std::memcpy(result.data() + at,
                          static_cast<const uint8_t*>(q.send) + Bytes(from, dtype),
                          Bytes(got, dtype));
            at += Bytes(got, dtype);
          }
          return Status::Ok();
        }));
    Commit(recv, result);
    return Status::Ok();
  });
}

int32_t AllGatherV(shardrec_plugin_nccl_t* comm, const void* send, size_t send_count, void* recv,
                   const size_t* recv_counts, int32_t dtype, void* stream, int64_t timeout_ms,
                   shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL allgatherv", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    if (recv_counts == nullptr) return Status::InvalidArgument("recv_counts must not be NULL");
    Member& m = *From(comm);
    const int n = m.g->size;
    SR_RETURN_IF_ERROR(CheckType(dtype));
    if (send_count != recv_counts[m.rank])
      return Status::InvalidArgument("allgatherv send count ", send_count,
                                     " differs from recv_counts[", m.rank,
                                     "] = ", recv_counts[m.rank]);
    SR_RETURN_IF_ERROR(CheckDev(send, Bytes(send_count, dtype), "allgatherv send buffer"));
    SR_RETURN_IF_ERROR(CheckDev(recv, Bytes(Sum(recv_counts, n), dtype), "allgatherv recv buffer"));
    if (Sum(recv_counts, n) == 0) return m.Usable();
    FakeStreamReached(stream);
    std::vector<uint8_t> result;
    Post post;
    post.send = send;
    post.count = send_count;
    SR_RETURN_IF_ERROR(
        Rendezvous(m, "allgatherv", timeout_ms, std::move(post),
                   [&](const std::vector<Post>& posts) -> Status {
                     result.resize(Bytes(Sum(recv_counts, n), dtype));
                     size_t at = 0;
                     for (int p = 0; p < n; ++p) {
                       const Post& q = posts[static_cast<size_t>(p)];
                       if (q.count != recv_counts[p])
                         return Status::InvalidArgument("allgatherv: rank ", p, " sends ", q.count,
                                                        " elements, rank ", m.rank, " expects ",
                                                        recv_counts[p]);
                       if (q.count > 0)
                         std::memcpy(result.data() + at, q.send, Bytes(q.count, dtype));
                       at += Bytes(q.count, dtype);
                     }
                     return Status::Ok();
                   }));
    Commit(recv, result);
    return Status::Ok();
  });
}

int32_t ReduceScatterV(shardrec_plugin_nccl_t* comm, const void* send, void* recv,
                       const size_t* recv_counts, int32_t dtype, int32_t op, void* stream,
                       int64_t timeout_ms, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL reducescatterv", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    if (recv_counts == nullptr) return Status::InvalidArgument("recv_counts must not be NULL");
    Member& m = *From(comm);
    const int n = m.g->size;
    SR_RETURN_IF_ERROR(CheckType(dtype));
    comm::ReduceFn fn = nullptr;
    SR_RETURN_IF_ERROR(
        comm::GetReduceFn(static_cast<DType>(dtype), static_cast<comm::ReduceOp>(op), &fn));
    const size_t total = Sum(recv_counts, n);
    SR_RETURN_IF_ERROR(CheckDev(send, Bytes(total, dtype), "reducescatterv send buffer"));
    SR_RETURN_IF_ERROR(
        CheckDev(recv, Bytes(recv_counts[m.rank], dtype), "reducescatterv recv buffer"));
    if (total == 0) return m.Usable();
    FakeStreamReached(stream);
    std::vector<uint8_t> result;
    Post post;
    post.send = send;
    post.counts.assign(recv_counts, recv_counts + n);
    SR_RETURN_IF_ERROR(Rendezvous(m, "reducescatterv", timeout_ms, std::move(post),
                                  [&](const std::vector<Post>& posts) -> Status {
                                    for (const Post& q : posts)
                                      if (q.counts != posts[0].counts)
                                        return Status::InvalidArgument(
                                            "reducescatterv counts differ between ranks");
                                    return ReduceBlocks(posts, Sum(recv_counts, m.rank),
                                                        recv_counts[m.rank], dtype, op, &result);
                                  }));
    Commit(recv, result);
    return Status::Ok();
  });
}

int32_t Broadcast(shardrec_plugin_nccl_t* comm, void* buf, size_t count, int32_t dtype,
                  int32_t root, void* stream, int64_t timeout_ms, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL broadcast", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    Member& m = *From(comm);
    SR_RETURN_IF_ERROR(CheckType(dtype));
    if (root < 0 || root >= m.g->size)
      return Status::InvalidArgument("broadcast root ", root, " is outside [0, ", m.g->size, ")");
    SR_RETURN_IF_ERROR(CheckDev(buf, Bytes(count, dtype), "broadcast buffer"));
    if (count == 0) return m.Usable();
    FakeStreamReached(stream);
    std::vector<uint8_t> result;
    Post post;
    post.send = buf;
    post.count = count;
    SR_RETURN_IF_ERROR(Rendezvous(
        m, "broadcast", timeout_ms, std::move(post), [&](const std::vector<Post>& posts) -> Status {
          const Post& q = posts[static_cast<size_t>(root)];
          if (q.count != count)
            return Status::InvalidArgument("broadcast counts differ: root has ", q.count, ", rank ",
                                           m.rank, " has ", count);
          const auto* from = static_cast<const uint8_t*>(q.send);
          result.assign(from, from + Bytes(count, dtype));
          return Status::Ok();
        }));
    Commit(buf, result);
    return Status::Ok();
  });
}

int32_t Barrier(shardrec_plugin_nccl_t* comm, void* stream, int64_t timeout_ms,
                shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL barrier", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    FakeStreamReached(stream);  // the barrier waits for the stream's earlier work too
    SR_RETURN_IF_ERROR(Rendezvous(*From(comm), "barrier", timeout_ms, Post{},
                                  [](const std::vector<Post>&) { return Status::Ok(); }));
    g_counters[kCollectives].fetch_add(1);
    return Status::Ok();
  });
}

int32_t Split(shardrec_plugin_nccl_t* comm, int32_t color, int32_t key,
              shardrec_plugin_nccl_t** out, int32_t* rank, int32_t* size,
              shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL split", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    if (out == nullptr || rank == nullptr || size == nullptr)
      return Status::InvalidArgument("split outputs must not be NULL");
    *out = nullptr;
    *rank = -1;
    *size = 0;
    Member& m = *From(comm);
    std::shared_ptr<Group> child;
    int new_rank = -1;
    Post post;
    post.color = color;
    post.key = key;
    SR_RETURN_IF_ERROR(
        Rendezvous(m, "split", 0, std::move(post), [&](const std::vector<Post>& posts) -> Status {
          if (color < 0) return Status::Ok();
          std::vector<std::pair<int32_t, int>> members;  // (key, old rank)
          for (size_t r = 0; r < posts.size(); ++r)
            if (posts[r].color == color) members.emplace_back(posts[r].key, static_cast<int>(r));
          std::sort(members.begin(), members.end());
          for (size_t i = 0; i < members.size(); ++i)
            if (members[i].second == m.rank) new_rank = static_cast<int>(i);
          std::lock_guard<std::mutex> lock(m.g->mu);
          std::shared_ptr<Group>& c = m.g->children[color];
          if (c == nullptr) c = std::make_shared<Group>(static_cast<int>(members.size()));
          child = c;
          return Status::Ok();
        }));
    if (child == nullptr) return Status::Ok();
    *out = To(new Member(child, new_rank, m.timeout_ms.load()));
    *rank = new_rank;
    *size = child->size;
    g_counters[kCreated].fetch_add(1);
    g_counters[kLive].fetch_add(1);
    return Status::Ok();
  });
}

void Abort(shardrec_plugin_nccl_t* comm) {
  if (comm == nullptr) return;
  Member& m = *From(comm);
  (void)m.Fail(Status::Remote("the NCCL communicator was aborted"));
  std::lock_guard<std::mutex> lock(m.g->mu);
  if (m.g->broken.ok()) m.g->broken = Status::Remote("rank ", m.rank, " aborted");
  m.g->cv.notify_all();
}

int32_t AsyncError(shardrec_plugin_nccl_t* comm, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL async error query", [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
    Member& m = *From(comm);
    std::lock_guard<std::mutex> lock(m.mu);
    return m.poison;
  });
}

}  // namespace shardrec::fake::nccl
