// Creating communicators: from any rendezvous store, from a unique id, or as a local group of
// N ranks in one process. Picks the backend (Gloo on host devices, NCCL on CUDA devices).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/rendezvous/env_rendezvous.h"
#include "impl/comm/rendezvous/store.h"
#include "impl/comm/rendezvous/unique_id.h"

namespace shardrec::comm {

enum class Backend : int32_t { kAuto = 0, kGloo = 1, kNccl = 2 };

struct CommOptions {
  Backend backend = Backend::kAuto;
  Device device;                         // host by default
  std::chrono::milliseconds timeout{0};  // 0: kDefaultTimeout (5 minutes)
  // Address the Gloo TCP device binds to. Empty: SHARDREC_SOCKET_IFADDR, else the local address
  // of the connection to the unique id's store (the interface that routes to rank 0), else
  // 127.0.0.1.
  std::string bind_address;
  // Unique id and environment rendezvous: how long destroying rank 0's last communicator waits
  // for the other ranks to disconnect from the store it hosts. 0: kDefaultStoreGrace (capped at
  // the timeout). After an abort it does not wait at all.
  std::chrono::milliseconds store_grace{0};
};

inline constexpr std::chrono::milliseconds kDefaultStoreGrace{2000};

// Collective over `world` ranks that share `store`; keys live under `key_prefix`. Use a fresh
// prefix per communicator on a shared store (splits are namespaced automatically).
// Errors: kInvalidArgument, kNoDevice, kUnsupported (NCCL in a CPU build), kTimeout, kRemote, kIo.
Status CreateCommunicator(std::shared_ptr<Store> store, const std::string& key_prefix, int world,
                          int rank, const CommOptions& options, std::unique_ptr<Communicator>* out);

// Every rank, rank 0 included, connects to the id's TCP store and meets the others there.
Status CreateCommunicatorFromUniqueId(const UniqueId& id, int world, int rank,
                                      const CommOptions& options,
                                      std::unique_ptr<Communicator>* out);

// From the launcher's variables (`env`, see env_rendezvous.h): rank 0 hosts the TCP store on
// every interface at the master port; the others connect with retry until the timeout; then as
// from a unique id. `launch` (optional) receives what was read. Errors: those of ParseLaunchEnv,
// kIo when rank 0 cannot listen on the port, kTimeout, kRemote, kInvalidUsage (rank claimed
// twice), and those of CreateCommunicator.
Status CreateCommunicatorFromEnv(const EnvVars& env, const CommOptions& options,
                                 std::unique_ptr<Communicator>* out, LaunchEnv* launch = nullptr);

// The same from a launch already read: ParseLaunchEnv's, or ExplicitTcpLaunch's (tcp_launch.h)
// for an address handed in code. Errors as CreateCommunicatorFromEnv's after the parse.
Status CreateCommunicatorFromLaunch(LaunchEnv e, const CommOptions& options,
                                    std::unique_ptr<Communicator>* out,
                                    LaunchEnv* launch = nullptr);

// N communicators for N threads of this process (memory store), created concurrently on
// internal threads. All or nothing: on failure *out is left empty. With NCCL (explicitly, or
// automatically for a CUDA device) rank r runs on device.index + r, since NCCL refuses two ranks
// of one communicator on the same GPU; with Gloo every rank uses `device` (several ranks on one
// GPU, staged through host memory).
Status CreateLocalGroup(int n, const CommOptions& options,
                        std::vector<std::unique_ptr<Communicator>>* out);

// Whether `options` select the NCCL backend.
bool UsesNccl(const CommOptions& options);

// The device rank `rank` of a local group uses (see CreateLocalGroup).
Device LocalGroupDevice(const CommOptions& options, int rank);

}  // namespace shardrec::comm
