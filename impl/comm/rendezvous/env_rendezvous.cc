// Launcher conventions: which variables each launcher sets, how rank 0's address and port
// follow from them, and Slurm's compressed host lists.
#include "impl/comm/rendezvous/env_rendezvous.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "impl/core/check.h"

extern char** environ;

namespace shardrec::comm {

namespace {

// Finds `name`; nullptr when unset. An empty value counts as unset, as launchers and shells
// treat `VAR=` as "not given".
const std::string* Find(const EnvVars& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return nullptr;
  return &it->second;
}

bool ToInt64(const std::string& s, int64_t* out) {
  // strtoll skips leading white space; a launcher never writes any, so "RANK= 0" is malformed.
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+'))
    return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

// Reads an integer in [lo, hi]. Absent: kInvalidArgument when required, else *out untouched.
Status ReadInt(const EnvVars& env, const std::string& convention, const char* name, int64_t lo,
               int64_t hi, bool required, int64_t* out) {
  const std::string* v = Find(env, name);
  if (v == nullptr) {
    if (!required) return Status::Ok();
    return Status::InvalidArgument(convention, " launch detected, but ", name,
                                   " is not set (it is required)");
  }
  int64_t x = 0;
  if (!ToInt64(*v, &x) || x < lo || x > hi) {
    return Status::InvalidArgument(convention, " launch: ", name, "='", *v,
                                   "' is not an integer in [", lo, ", ", hi, "]");
  }
  *out = x;
  return Status::Ok();
}

Nonce HashNonce(const std::string& text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  Nonce n{};
  for (int i = 0; i < 8; ++i) {
    n[i] = static_cast<uint8_t>(h.low64 >> (8 * i));
    n[8 + i] = static_cast<uint8_t>(h.high64 >> (8 * i));
  }
  return n;
}

// Rank, world, local rank and local size from one convention's four variable names.
Status ReadRanks(const EnvVars& env, LaunchEnv* e, const char* rank, const char* world,
                 const char* local_rank, const char* local_size) {
  int64_t w = 0, r = 0, lr = -1, ls = -1;
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, world, 1, kMaxLaunchWorld, true, &w));
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, rank, 0, w - 1, true, &r));
  if (local_size != nullptr)
    SR_RETURN_IF_ERROR(ReadInt(env, e->convention, local_size, 1, w, false, &ls));
  if (local_rank != nullptr) {
    SR_RETURN_IF_ERROR(
        ReadInt(env, e->convention, local_rank, 0, ls > 0 ? ls - 1 : w - 1, false, &lr));
  }
  e->world = static_cast<int>(w);
  e->rank = static_cast<int>(r);
  e->rank_var = rank;
  e->world_var = world;
  e->local_rank = static_cast<int>(lr);
  e->local_size = static_cast<int>(ls);
  return Status::Ok();
}

Status ReadPort(const EnvVars& env, const std::string& convention, const char* name,
                uint16_t* out) {
  int64_t p = 0;
  SR_RETURN_IF_ERROR(ReadInt(env, convention, name, 1, 65535, true, &p));
  *out = static_cast<uint16_t>(p);
  return Status::Ok();
}

// MPI launchers publish no master address. MASTER_ADDR / MASTER_PORT when the user exported
// them; else, when every rank is on this host, the loopback address; else an error saying what
// to export. The port falls back to one derived from `job_var` when set, else the default.
Status MpiMaster(const EnvVars& env, const char* job_var, const char* local_size_var,
                 LaunchEnv* e) {
  if (const std::string* addr = Find(env, "MASTER_ADDR")) {
    e->master_host = *addr;
  } else if (e->local_size == e->world || e->world == 1) {
    e->master_host = "127.0.0.1";
  } else if (e->local_size < 0) {
    return Status::InvalidArgument(
        e->convention, " launch of ", e->world, " ranks: MASTER_ADDR is not set and ",
        local_size_var,
        " is missing, so this rank cannot tell that every rank is on this host (MPI launchers "
        "publish no rank-0 address; export MASTER_ADDR=<rank 0's host> and pass it to every rank, "
        "e.g. mpirun -x MASTER_ADDR)");
  } else {
    return Status::InvalidArgument(
        e->convention, " launch across several hosts (", local_size_var, " ", e->local_size, " of ",
        e->world,
        " ranks here): MASTER_ADDR is not set (MPI launchers "
        "publish no rank-0 address; export MASTER_ADDR=<rank 0's host> and pass it to every rank, "
        "e.g. mpirun -x MASTER_ADDR)");
  }
  if (Find(env, "MASTER_PORT") != nullptr) {
    e->port_source = "MASTER_PORT";
    return ReadPort(env, e->convention, "MASTER_PORT", &e->master_port);
  }
  int64_t job = -1;
  if (job_var != nullptr) {
    SR_RETURN_IF_ERROR(
        ReadInt(env, e->convention, job_var, 0, std::numeric_limits<int64_t>::max(), false, &job));
  }
  if (job >= 0) {
    e->master_port = static_cast<uint16_t>(kJobPortBase + job % kJobPortSpan);
    e->port_source = StrCat(kJobPortBase, " + ", job_var, " % ", kJobPortSpan);
  } else {
    e->master_port = kDefaultMasterPort;
    e->port_source = "the default port";
  }
  return Status::Ok();
}

Status Torchrun(const EnvVars& env, LaunchEnv* e) {
  e->convention = "torchrun";
  SR_RETURN_IF_ERROR(ReadRanks(env, e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
  const std::string* addr = Find(env, "MASTER_ADDR");
  if (addr == nullptr) {
    return Status::InvalidArgument(
        "torchrun launch detected (RANK / WORLD_SIZE), but MASTER_ADDR "
        "is not set (it is required)");
  }
  e->master_host = *addr;
  e->port_source = "MASTER_PORT";
  SR_RETURN_IF_ERROR(ReadPort(env, e->convention, "MASTER_PORT", &e->master_port));
  // torchrun's agent already serves torch's own store on MASTER_PORT of the master node and
  // tells its workers so; ours takes the next port.
  const std::string* agent = Find(env, "TORCHELASTIC_USE_AGENT_STORE");
  if (agent != nullptr && (*agent == "True" || *agent == "true" || *agent == "1")) {
    if (e->master_port == 65535) {
      return Status::InvalidArgument(
          "torchrun launch: MASTER_PORT=65535 is held by torchrun's "
          "agent and leaves no next port for libshardrec's store");
    }
    ++e->master_port;
    e->port_source = "MASTER_PORT + 1, as torchrun's agent store holds MASTER_PORT";
  }
  return Status::Ok();
}

Status Slurm(const EnvVars& env, LaunchEnv* e) {
  e->convention = "Slurm";
  SR_RETURN_IF_ERROR(ReadRanks(env, e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr));
  int64_t node = -1;
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, "SLURM_NODEID", 0, kMaxLaunchWorld, false, &node));
  const std::string* tasks = Find(env, "SLURM_TASKS_PER_NODE");
  if (tasks != nullptr && node >= 0) {
    int n = 0;
    Status s = SlurmTasksOnNode(*tasks, static_cast<int>(node), &n);
    if (!s.ok()) return s.WithContext("Slurm launch: SLURM_TASKS_PER_NODE");
    if (n > e->world || (e->local_rank >= 0 && e->local_rank >= n)) {
      return Status::InvalidArgument(
          "Slurm launch: SLURM_TASKS_PER_NODE=", *tasks, " puts ", n, " tasks on node ", node,
          ", which does not fit SLURM_NTASKS=", e->world, " and SLURM_LOCALID=", e->local_rank);
    }
    e->local_size = n;
  }
  if (const std::string* addr = Find(env, "MASTER_ADDR")) {
    e->master_host = *addr;
  } else {
    const char* var = Find(env, "SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
    const std::string* list = Find(env, var);
    if (list == nullptr) {
      return Status::InvalidArgument(
          "Slurm launch detected (SLURM_PROCID), but neither "
          "MASTER_ADDR nor SLURM_JOB_NODELIST is set (an empty value counts as unset)");
    }
    std::vector<std::string> hosts;
    Status s = ExpandSlurmHostList(*list, &hosts, 1);
    if (!s.ok() && hosts.empty()) return s.WithContext(StrCat("Slurm launch: ", var));
    e->master_host = hosts.front();
  }
  if (Find(env, "MASTER_PORT") != nullptr) {
    e->port_source = "MASTER_PORT";
    return ReadPort(env, e->convention, "MASTER_PORT", &e->master_port);
  }
  int64_t job = -1;
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, "SLURM_JOB_ID", 0,
                             std::numeric_limits<int64_t>::max(), false, &job));
  if (job < 0) {
    return Status::InvalidArgument(
        "Slurm launch: neither MASTER_PORT nor SLURM_JOB_ID is set "
        "(the store's port is MASTER_PORT, else derived from the job id)");
  }
  e->master_port = static_cast<uint16_t>(kJobPortBase + job % kJobPortSpan);
  e->port_source = StrCat(kJobPortBase, " + SLURM_JOB_ID % ", kJobPortSpan);
  return Status::Ok();
}

// Kubeflow Trainer v2 (TrainJob) sets only the node-level PET_* variables: one process per node
// unless torchrun spawns more (and then sets RANK, read first). With PET_NPROC_PER_NODE > 1 and
// no torchrun, each process's index on its node comes from LOCAL_RANK, which the manifest or
// the program starting the processes must set.
Status Kubeflow(const EnvVars& env, LaunchEnv* e) {
  e->convention = "Kubeflow Trainer";
  int64_t nodes = 0, per_node = 0, node = 0, local = 0;
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, "PET_NNODES", 1, kMaxLaunchWorld, true, &nodes));
  SR_RETURN_IF_ERROR(
      ReadInt(env, e->convention, "PET_NPROC_PER_NODE", 1, kMaxLaunchWorld, true, &per_node));
  if (nodes * per_node > kMaxLaunchWorld) {
    return Status::InvalidArgument(e->convention,
                                   " launch: PET_NNODES x PET_NPROC_PER_NODE = ", nodes * per_node,
                                   " ranks, more than ", kMaxLaunchWorld);
  }
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, "PET_NODE_RANK", 0, nodes - 1, true, &node));
  if (per_node > 1 && Find(env, "LOCAL_RANK") == nullptr) {
    return Status::InvalidArgument(
        e->convention, " launch of ", per_node,
        " processes per node (PET_NPROC_PER_NODE) without torchrun: LOCAL_RANK must give each "
        "process's index on its node (0 .. PET_NPROC_PER_NODE - 1)");
  }
  SR_RETURN_IF_ERROR(ReadInt(env, e->convention, "LOCAL_RANK", 0, per_node - 1, false, &local));
  e->world = static_cast<int>(nodes * per_node);
  e->rank = static_cast<int>(node * per_node + local);
  e->rank_var = "PET_NODE_RANK x PET_NPROC_PER_NODE + LOCAL_RANK";
  e->world_var = "PET_NNODES x PET_NPROC_PER_NODE";
  e->local_rank = static_cast<int>(local);
  e->local_size = static_cast<int>(per_node);
  const std::string* addr = Find(env, "PET_MASTER_ADDR");
  if (addr == nullptr) {
    return Status::InvalidArgument(e->convention,
                                   " launch detected (PET_NNODES), but PET_MASTER_ADDR is not set "
                                   "(it is required)");
  }
  e->master_host = *addr;
  e->port_source = "PET_MASTER_PORT";
  return ReadPort(env, e->convention, "PET_MASTER_PORT", &e->master_port);
}

// The MPI and Slurm rank / size variables that are set and disagree with torchrun's, as text.
// Compared as written, so that a malformed RANK still gets the note.
std::string Disagreeing(const EnvVars& env) {
  const std::string* t_rank = Find(env, "RANK");
  const std::string* t_size = Find(env, "WORLD_SIZE");
  auto same = [](const std::string* a, const std::string* b) {
    return a == nullptr || (b != nullptr && *a == *b);
  };
  static const char* const kPairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  std::string out;
  for (const auto& pair : kPairs) {
    const std::string* rank = Find(env, pair[0]);
    const std::string* size = Find(env, pair[1]);
    if (same(rank, t_rank) && same(size, t_size)) continue;
    for (int i = 0; i < 2; ++i) {
      const std::string* v = i == 0 ? rank : size;
      if (v != nullptr) out += StrCat(out.empty() ? "" : ", ", pair[i], "=", *v);
    }
  }
  return out;
}

}  // namespace

Status ParseLaunchEnv(const EnvVars& env, LaunchEnv* out) {
  LaunchEnv e;
  if (Find(env, "RANK") || Find(env, "WORLD_SIZE")) {
    e.disagreeing = Disagreeing(env);
    SR_RETURN_IF_ERROR(WithDisagreement(e, Torchrun(env, &e)));
  } else if (Find(env, "OMPI_COMM_WORLD_RANK") || Find(env, "OMPI_COMM_WORLD_SIZE")) {
    e.convention = "Open MPI";
    SR_RETURN_IF_ERROR(ReadRanks(env, &e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"));
    SR_RETURN_IF_ERROR(MpiMaster(env, "OMPI_MCA_ess_base_jobid", "OMPI_COMM_WORLD_LOCAL_SIZE", &e));
  } else if (Find(env, "PMI_RANK") || Find(env, "PMI_SIZE")) {
    e.convention = "MPICH";
    SR_RETURN_IF_ERROR(
        ReadRanks(env, &e, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"));
    SR_RETURN_IF_ERROR(MpiMaster(env, nullptr, "MPI_LOCALNRANKS", &e));
  } else if (Find(env, "SLURM_PROCID")) {
    SR_RETURN_IF_ERROR(Slurm(env, &e));
  } else if (Find(env, "PET_NNODES")) {
    SR_RETURN_IF_ERROR(Kubeflow(env, &e));
  } else {
    return Status::NotFound(
        "no launcher environment found: set the torchrun variables (MASTER_ADDR, MASTER_PORT, "
        "RANK, WORLD_SIZE), Kubeflow Trainer's (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, "
        "PET_MASTER_ADDR, PET_MASTER_PORT), or run under mpirun (Open MPI, MPICH) or srun");
  }
  // torchrun's agent restarts the whole job with the count raised: a process of the previous
  // attempt still running is of another session, however alike its other variables.
  if (const std::string* restart = Find(env, "TORCHELASTIC_RESTART_COUNT")) {
    e.restart_count = *restart;
    uint64_t count = 0;
    const char* end = restart->data() + restart->size();
    const auto [at, ec] = std::from_chars(restart->data(), end, count);
    if (ec == std::errc() && at == end && !restart->empty() &&
        count < std::numeric_limits<uint64_t>::max())
      e.attempt = count + 1;
  }
  const std::string attempt = e.restart_count.empty() ? "" : ":restart " + e.restart_count;
  if (const std::string* token = Find(env, "SHARDREC_RENDEZVOUS_TOKEN")) {
    e.nonce = HashNonce("shardrec-token:" + *token + attempt);
    e.has_token = true;
  } else {
    // No secret: every rank derives the same public nonce (torch's TCP store trust model). Not
    // from the master address: ranks spell it differently (127.0.0.1 on rank 0, a service name
    // or an interface address elsewhere) and reach the same store all the same.
    e.nonce =
        HashNonce(StrCat("shardrec-env:", e.convention, ":", e.world, ":", e.master_port, attempt));
  }
  *out = std::move(e);
  return Status::Ok();
}

Status WithDisagreement(const LaunchEnv& e, Status s) {
  if (s.ok() || e.disagreeing.empty()) return s;
  return Status(s.code(), StrCat(s.message(), " (note: ", e.disagreeing,
                                 " are set too and disagree with RANK / WORLD_SIZE, which are read "
                                 "first: if those are left over from an earlier run, unset them)"));
}

Status RankZeroPortInUse(const LaunchEnv& e) {
  const bool torchrun = e.convention == "torchrun";
  return WithDisagreement(
      e, Status::Io("rank 0 cannot host the store: port ", e.master_port,
                    " is already in use on this host. Most likely another process already hosts "
                    "rank 0's store there: two processes were started as rank 0 (this one read ",
                    e.rank_var, "=", e.rank, " and ", e.world_var, "=", e.world,
                    torchrun ? "; RANK / WORLD_SIZE left in the environment of every process "
                               "give them all the same rank, and come before mpirun's and srun's "
                               "own variables"
                             : "",
                    "), or another program or job holds the port (export MASTER_PORT to choose "
                    "another)"));
}

Status SlurmTasksOnNode(const std::string& tasks_per_node, int node, int* out) {
  // Items "N" or "N(xM)", comma-separated.
  int seen = 0;
  size_t pos = 0;
  while (pos <= tasks_per_node.size()) {
    size_t comma = tasks_per_node.find(',', pos);
    if (comma == std::string::npos) comma = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(pos, comma - pos);
    int64_t count = 0, repeat = 1;
    const size_t paren = item.find("(x");
    const std::string head = paren == std::string::npos ? item : item.substr(0, paren);
    if (!ToInt64(head, &count) || count < 1) {
      return Status::InvalidArgument("'", tasks_per_node, "' is not a Slurm tasks-per-node list");
    }
    if (paren != std::string::npos) {
      if (item.back() != ')' ||
          !ToInt64(item.substr(paren + 2, item.size() - paren - 3), &repeat) || repeat < 1) {
        return Status::InvalidArgument("'", tasks_per_node, "' is not a Slurm tasks-per-node list");
      }
    }
    if (node < seen + repeat) {
      *out = static_cast<int>(count);
      return Status::Ok();
    }
    seen += static_cast<int>(repeat);
    pos = comma + 1;
  }
  return Status::InvalidArgument("node ", node, " is beyond the ", seen, " nodes of '",
                                 tasks_per_node, "'");
}

namespace {

// One bracket group's names ("01-04,07" -> 01 02 03 04 07), zero padding kept.
Status ExpandRange(const std::string& spec, const std::string& list,
                   std::vector<std::string>* out) {
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    const std::string lo_s = dash == std::string::npos ? item : item.substr(0, dash);
    const std::string hi_s = dash == std::string::npos ? item : item.substr(dash + 1);
    int64_t lo = 0, hi = 0;
    if (lo_s.empty() || lo_s.find_first_not_of("0123456789") != std::string::npos || hi_s.empty() ||
        hi_s.find_first_not_of("0123456789") != std::string::npos || !ToInt64(lo_s, &lo) ||
        !ToInt64(hi_s, &hi) || hi < lo || hi - lo > (1 << 20)) {
      return Status::InvalidArgument("'", list, "' is not a Slurm host list (bad range '", item,
                                     "')");
    }
    for (int64_t v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo_s.size()) s.insert(0, lo_s.size() - s.size(), '0');
      out->push_back(std::move(s));
    }
    pos = comma + 1;
  }
  return Status::Ok();
}

}  // namespace

Status ExpandSlurmHostList(const std::string& list, std::vector<std::string>* hosts,
                           size_t max_hosts) {
  hosts->clear();
  if (list.empty()) return Status::InvalidArgument("the Slurm host list is empty");
  size_t pos = 0;
  while (pos < list.size()) {
    // One name: literal text and bracket groups up to a comma outside brackets.
    std::vector<std::string> names{""};
    while (pos < list.size() && list[pos] != ',') {
      if (list[pos] == '[') {
        const size_t close = list.find(']', pos);
        if (close == std::string::npos)
          return Status::InvalidArgument("'", list, "' is not a Slurm host list (unclosed '[')");
        std::vector<std::string> parts;
        SR_RETURN_IF_ERROR(ExpandRange(list.substr(pos + 1, close - pos - 1), list, &parts));
        std::vector<std::string> next;
        for (const std::string& n : names) {
          for (const std::string& p : parts) {
            next.push_back(n + p);
            if (next.size() > max_hosts) break;
          }
          if (next.size() > max_hosts) break;
        }
        names = std::move(next);
        pos = close + 1;
      } else if (list[pos] == ']') {
        return Status::InvalidArgument("'", list, "' is not a Slurm host list (stray ']')");
      } else {
        const size_t stop = list.find_first_of(",[]", pos);
        const std::string text = list.substr(pos, stop == std::string::npos ? stop : stop - pos);
        for (std::string& n : names) n += text;
        pos = stop == std::string::npos ? list.size() : stop;
      }
    }
    for (std::string& n : names) {
      if (n.empty()) return Status::InvalidArgument("'", list, "' has an empty host name");
      if (hosts->size() == max_hosts) {
        return Status::InvalidArgument("'", list, "' names more than ", max_hosts, " hosts");
      }
      hosts->push_back(std::move(n));
    }
    if (pos < list.size()) ++pos;  // the comma
  }
  return Status::Ok();
}

EnvVars ProcessEnv() {
  EnvVars env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const char* eq = std::strchr(*p, '=');
    if (eq != nullptr)
      env.emplace(std::string(*p, static_cast<size_t>(eq - *p)), std::string(eq + 1));
  }
  return env;
}

}  // namespace shardrec::comm
