// Backend selection and the three ways to create communicators.
#include "impl/comm/factory.h"

#include <gloo/transport/tcp/device.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "impl/comm/gloo/gloo_communicator.h"
#include "impl/comm/nccl/nccl_backend.h"
#include "impl/comm/rendezvous/rank_arrival.h"
#include "impl/comm/rendezvous/stores.h"
#include "impl/comm/shm/shm_communicator.h"
#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "impl/core/thread_pool.h"

namespace shardrec::comm {

namespace {

Status CheckOptions(const CommOptions& o, std::chrono::milliseconds* timeout) {
  if (o.timeout.count() < 0)
    return Status::InvalidArgument("timeout ", o.timeout.count(), " ms must not be negative");
  *timeout = o.timeout.count() == 0 ? kDefaultTimeout : o.timeout;
  const auto b = static_cast<int32_t>(o.backend);
  if (b < 0 || b > 2)
    return Status::InvalidArgument("backend ", b, " is not one of auto, gloo, nccl");
  if (o.store_grace.count() < 0) {
    return Status::InvalidArgument("store grace ", o.store_grace.count(),
                                   " ms must not be negative");
  }
  if (o.device.is_cuda() && o.device.index < 0) {
    return Status::InvalidArgument("device index ", o.device.index, " must not be negative");
  }
  return Status::Ok();
}

std::chrono::milliseconds StoreGrace(const CommOptions& o, std::chrono::milliseconds timeout) {
  return o.store_grace.count() > 0 ? o.store_grace : std::min(kDefaultStoreGrace, timeout);
}

std::string BindHost(const CommOptions& o, const std::string& fallback) {
  if (!o.bind_address.empty()) return o.bind_address;
  if (const char* env = std::getenv("SHARDREC_SOCKET_IFADDR"); env != nullptr && *env != '\0')
    return env;
  return fallback.empty() ? "127.0.0.1" : fallback;
}

Status CreateOnBackend(std::shared_ptr<Store> store, const std::string& prefix, int world, int rank,
                       const CommOptions& options, const std::string& default_host,
                       std::unique_ptr<Communicator>* out,
                       std::chrono::steady_clock::time_point deadline,
                       std::shared_ptr<gloo::transport::Device> gloo_device) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  std::chrono::milliseconds timeout{0};
  SR_RETURN_IF_ERROR(CheckOptions(options, &timeout));
  if (!store) return Status::InvalidArgument("store must not be null");
  if (world < 1) return Status::InvalidArgument("world size ", world, " must be >= 1");
  if (rank < 0 || rank >= world)
    return Status::InvalidArgument("rank ", rank, " is outside [0, ", world, ")");
  // An unusable GPU is reported the same way whichever backend would have driven it.
  SR_RETURN_IF_ERROR(core::CheckDevice(options.device));
  if (UsesNccl(options)) {
    if (!options.device.is_cuda()) {
      return Status::InvalidArgument("the NCCL backend needs a CUDA device, got ",
                                     options.device.ToString());
    }
    return nccl::CreateNcclCommunicator(store.get(), prefix, world, rank, options.device.index,
                                        timeout, out);
  }
  GlooConfig config;
  config.store = std::move(store);
  config.prefix = prefix;
  config.world = world;
  config.rank = rank;
  config.device = options.device;
  config.timeout = timeout;
  config.bind_host = BindHost(options, default_host);
  config.gloo_device = std::move(gloo_device);
  if (deadline != std::chrono::steady_clock::time_point{}) {
    config.create_timeout = std::max(std::chrono::milliseconds(1),
                                     std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline - std::chrono::steady_clock::now()));
  }
  // Ranks that share a host exchange through shared memory instead of Gloo's loopback sockets
  // (shm/shm_communicator.h); the group decides collectively, so every rank wraps.
  std::unique_ptr<Communicator> gloo;
  SR_RETURN_IF_ERROR(CreateGlooCommunicator(config, &gloo));
  // A device communicator stays unwrapped: its collectives take device buffers, so even the
  // set-up's host-memory vote could not run over it, and its payloads are staged anyway.
  if (world < 2 || !config.device.is_host()) {
    *out = std::move(gloo);
    return Status::Ok();
  }
  return shm::ShmCommunicator::Wrap(std::move(gloo), out);
}

// A session refused because a rank was claimed twice can reach a rank that had claimed its own
// number as a broken connection to a peer, or as silence until its timeout (the refused ranks
// drop what they had begun); the store, which refuses every later request of that session, then
// says why. The question gets at most half a second (at least 50 ms, so a timed-out duplicate
// claimant still learns of the refusal), on every backend and every way in.
Status Create(std::shared_ptr<Store> store, const std::string& prefix, int world, int rank,
              const CommOptions& options, const std::string& default_host,
              std::unique_ptr<Communicator>* out,
              std::chrono::steady_clock::time_point deadline = {},
              std::shared_ptr<gloo::transport::Device> gloo_device = nullptr) {
  std::shared_ptr<Store> asked = store;
  Status s = CreateOnBackend(std::move(store), prefix, world, rank, options, default_host, out,
                             deadline, std::move(gloo_device));
  if (s.ok() || s.code() == Code::kInvalidUsage || !asked) return s;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  const Status why = asked->RefusalReason(
      std::clamp(left, std::chrono::milliseconds(50), std::chrono::milliseconds(500)));
  return why.ok() ? s : why;
}

// A failed creation returns by its deadline: rank 0's hosted store lingers for the other ranks
// only in the time left, at most `grace` (they share the deadline, so at a timeout there is none).
Status FinishCreate(TcpStore& store, Status s, std::chrono::milliseconds grace,
                    std::chrono::steady_clock::time_point deadline) {
  if (s.ok()) return s;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  store.set_linger(std::clamp(left, std::chrono::milliseconds(0), grace));
  return s;
}

}  // namespace

bool UsesNccl(const CommOptions& options) {
  return options.backend == Backend::kNccl ||
         (options.backend == Backend::kAuto && options.device.is_cuda());
}

Device LocalGroupDevice(const CommOptions& options, int rank) {
  if (UsesNccl(options) && options.device.is_cuda()) {
    return Device::Cuda(options.device.index + rank);
  }
  return options.device;
}

Status CreateCommunicator(std::shared_ptr<Store> store, const std::string& key_prefix, int world,
                          int rank, const CommOptions& options,
                          std::unique_ptr<Communicator>* out) {
  return Create(std::move(store), key_prefix, world, rank, options, "", out);
}

Status CreateCommunicatorFromUniqueId(const UniqueId& id, int world, int rank,
                                      const CommOptions& options,
                                      std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  std::chrono::milliseconds timeout{0};
  SR_RETURN_IF_ERROR(CheckOptions(options, &timeout));
  if (world < 1) return Status::InvalidArgument("world size ", world, " must be >= 1");
  if (rank < 0 || rank >= world)
    return Status::InvalidArgument("rank ", rank, " is outside [0, ", world, ")");
  // Connecting to the store, claiming the rank and meeting the others share one deadline.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::shared_ptr<TcpStore> store;
  SR_RETURN_IF_ERROR(ConnectUniqueIdStore(id, rank, timeout, &store));
  store->set_linger(StoreGrace(options, timeout));
  const std::string local = store->local_host();
  std::shared_ptr<TcpStore> keep = store;
  return FinishCreate(*keep,
                      Create(std::move(store), "comm", world, rank, options, local, out, deadline),
                      StoreGrace(options, timeout), deadline);
}

namespace {

// The store key set once a launched session's communicator is formed.
const char* const kSessionFormed = "session/formed";

// Connects a launched rank to the store on the launcher's port. A process that has never been
// in a session there (a rank restarted alone after a failure) can meet the failed session's
// store while rank 0 is still leaving it: a dead rank's claim is released when its connection
// hangs up, so it would join that session and read its stale addresses, and the others, in the
// next session, would wait for it until their timeout. A store whose session was formed is
// therefore left, like one this process left, and the rank waits for its successor.
Status ConnectToSession(const net::Endpoint& server, const LaunchEnv& e,
                        std::chrono::milliseconds timeout,
                        std::chrono::steady_clock::time_point deadline,
                        std::shared_ptr<TcpStoreServer> hosted, std::shared_ptr<TcpStore>* out) {
  const bool hosts = hosted != nullptr;  // a store this rank just started has no past session
  for (;;) {
    const auto left = std::max(std::chrono::milliseconds(1),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    std::shared_ptr<TcpStore> store;
    SR_RETURN_IF_ERROR(TcpStore::Connect(server, e.nonce, std::min(timeout, left),
                                         std::move(hosted), &store, TcpStore::Address::kReused,
                                         e.attempt));
    if (hosts) {
      *out = std::move(store);
      return Status::Ok();
    }
    Status formed = store->Get(kSessionFormed, std::chrono::milliseconds(0), nullptr);
    if (formed.code() == Code::kTimeout) {
      *out = std::move(store);
      return Status::Ok();
    }
    SR_RETURN_IF_ERROR(formed);
    store.reset();  // remembered as left: the next connection waits for another instance
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::Timeout(
          "the rendezvous store is still the one of a session formed before "
          "this process started (its rank ",
          e.rank,
          " failed): rank 0 did not re-create it within the timeout (every "
          "surviving rank must destroy its communicator and create again)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

Status CreateCommunicatorFromEnv(const EnvVars& env, const CommOptions& options,
                                 std::unique_ptr<Communicator>* out, LaunchEnv* launch) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  std::chrono::milliseconds timeout{0};
  SR_RETURN_IF_ERROR(CheckOptions(options, &timeout));
  LaunchEnv e;
  SR_RETURN_IF_ERROR(ParseLaunchEnv(env, &e));
  return CreateCommunicatorFromLaunch(std::move(e), options, out, launch);
}

Status CreateCommunicatorFromLaunch(LaunchEnv e, const CommOptions& options,
                                    std::unique_ptr<Communicator>* out, LaunchEnv* launch) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  std::chrono::milliseconds timeout{0};
  SR_RETURN_IF_ERROR(CheckOptions(options, &timeout));
  const std::string where =
      StrCat(e.convention, " launch (rank ", e.rank, " of ", e.world, ", store ", e.master_host,
             ":", e.master_port, " from ", e.port_source, ")");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  net::Endpoint server;
  // Every error names the launch, and notes mpirun's or srun's variables that disagree with
  // torchrun's (stale RANK / WORLD_SIZE are the usual cause of a launch that cannot meet).
  auto fail = [&](const Status& why) { return WithDisagreement(e, why.WithContext(where)); };
  Status s = net::ResolveHostBy(e.master_host, deadline, &server);
  if (!s.ok()) return fail(s);
  server.port = e.master_port;
  std::shared_ptr<TcpStoreServer> hosted;
  if (e.rank == 0) {
    // Every interface, as torch's TCP store: the master address may be a name (a Kubernetes
    // service, a Slurm node) that does not map to one local interface.
    bool in_use = false;
    s = TcpStoreServer::Start(server, /*any_interface=*/true, e.nonce, &hosted, e.master_port,
                              &in_use, e.attempt);
    if (in_use) return RankZeroPortInUse(e).WithContext(where);
    if (!s.ok()) return fail(s.WithContext("rank 0 cannot host the store"));
  }
  std::shared_ptr<TcpStore> store;
  // The port is the launcher's, so a re-creation may meet the previous session's store there
  // while rank 0 is still leaving it: the client waits for the new one.
  s = ConnectToSession(server, e, timeout, deadline, std::move(hosted), &store);
  if (!s.ok()) return fail(s);
  s = store->Claim(StrCat("rank ", e.rank));
  if (!s.ok()) {
    store->set_linger(std::min(timeout, std::chrono::milliseconds(1000)));
    return fail(s);
  }
  store->set_linger(StoreGrace(options, timeout));
  // Ranks may spell rank 0's address differently (127.0.0.1 or localhost on rank 0, its
  // interface address or a service name on the others): the session does not depend on the
  // spelling, and rank 0 binds where the others reached it, not to loopback.
  std::string local = store->local_host();
  if (e.rank != 0) {
    s = PublishReach(*store, e.rank, server.HostString());
  } else if (BindHost(options, "") == "127.0.0.1") {  // no address chosen by the caller
    s = RankZeroHost(*store, e.world, deadline, &local);
  }
  if (!s.ok()) {
    store->set_linger(std::min(timeout, std::chrono::milliseconds(1000)));
    return fail(s);
  }
  std::shared_ptr<TcpStore> keep = store;
  s = FinishCreate(*keep,
                   Create(std::move(store), "comm", e.world, e.rank, options, local, out, deadline),
                   StoreGrace(options, timeout), deadline);
  if (!s.ok()) return fail(s);
  // Every rank has met (the mesh needed each one's address): a process started after this,
  // such as a rank restarted alone, belongs to the next session, not this one.
  // A rank number claimed twice after this rank's last creation call refused the session: the
  // member that heard it has left, so this rank fails now rather than at its first collective.
  s = keep->Set(kSessionFormed, {1});
  if (s.code() == Code::kInvalidUsage) {
    out->reset();
    return fail(s);
  }
  if (launch != nullptr) *launch = std::move(e);
  return Status::Ok();
}

namespace {

// A Gloo group in one process holds, for each ordered pair of ranks, a listening socket while it
// connects and a connected one after: up to 2 n (n - 1) descriptors. A group past the process's
// open-file limit used to fail at its timeout (or far past it: 1024 ranks took 96 s) blaming a
// missing peer; it is refused at once, naming the limit.
Status CheckLocalGroupSockets(int n) {
  rlimit limit{};
  if (n < 2 || ::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return Status::Ok();
  const uint64_t need = 2 * static_cast<uint64_t>(n) * static_cast<uint64_t>(n - 1);
  if (need + 64 <= limit.rlim_cur) return Status::Ok();
  return Status::InvalidArgument(
      "a local group of ", n,
      " ranks holds a TCP connection between every two of its ranks, up "
      "to ",
      need, " sockets in this process, more than its open-file limit of ", limit.rlim_cur,
      " (ulimit -n; raise it, or use fewer ranks: creation also slows as the sockets' ports fill, "
      "about 4 s for 96 ranks on 2 cores)");
}

}  // namespace

Status CreateLocalGroup(int n, const CommOptions& options,
                        std::vector<std::unique_ptr<Communicator>>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (n < 1) return Status::InvalidArgument("group size ", n, " must be >= 1");
  std::chrono::milliseconds timeout{0};
  SR_RETURN_IF_ERROR(CheckOptions(options, &timeout));
  if (!UsesNccl(options)) SR_RETURN_IF_ERROR(CheckLocalGroupSockets(n));
  auto store = std::make_shared<MemoryStore>();
  CommOptions local = options;
  if (local.bind_address.empty()) local.bind_address = "127.0.0.1";
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  // More ranks than CPUs this process may use (UsableCpus): one Gloo device (one event-loop
  // thread) for the whole group. Gloo's loop skips a connection whose lock another thread holds
  // and polls it again at once, so with a loop per rank on oversubscribed cores the loops spin
  // while the lock holders wait to be scheduled (4 rank threads on 2 cores: a toy step 16 ms,
  // ~90% of it in the kernel; 2.9 ms with one loop). With enough cores a loop per rank receives
  // in parallel (2 ranks on 2 cores: one shared loop made a small collective 0.12 -> 0.22 ms).
  std::shared_ptr<gloo::transport::Device> shared_device;
  if (!UsesNccl(local) && n > UsableCpus()) {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = local.bind_address;
      shared_device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      return Status::Io("local group: cannot bind the Gloo TCP device to '", local.bind_address,
                        "': ", e.what());
    }
  }
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommOptions mine = local;
        mine.device = LocalGroupDevice(local, r);
        results[r] = Create(store, "local", n, r, mine, "127.0.0.1", &comms[r], {}, shared_device);
      } catch (const std::exception& e) {
        results[r] = Status::Internal("creating local rank ", r, ": ", e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (results[r].ok()) continue;
    std::string context = StrCat("local group rank ", r);
    if (UsesNccl(local) && n > 1) {
      context += StrCat(" (NCCL takes one GPU per rank: this group needs cuda:", local.device.index,
                        "..cuda:", local.device.index + n - 1,
                        "; for several ranks on one GPU choose the gloo backend)");
    }
    return results[r].WithContext(context);
  }
  *out = std::move(comms);
  return Status::Ok();
}

}  // namespace shardrec::comm
