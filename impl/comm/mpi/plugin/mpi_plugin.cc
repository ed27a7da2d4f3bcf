// libshardrec_mpi.so: the plain-C table of impl/comm/mpi/mpi_plugin_abi.h over the system's MPI.
// Every entry only starts or tests nonblocking operations, under one process-wide mutex, so the
// plugin needs MPI_THREAD_SERIALIZED and never blocks on a peer; the one blocking call,
// MPI_Comm_split, runs on a thread of its own (mpi_plugin_abi.h, "Threads").
#include <dlfcn.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/mpi/mpi_plugin_abi.h"
#include "impl/comm/mpi/plugin/plugin_internal.h"

namespace shardrec_mpi_plugin {

std::mutex& Mu() {
  static auto* mu = new std::mutex;
  return *mu;
}

int32_t Fail(shardrec_plugin_status_t* st, int32_t code, const char* fmt, ...) {
  if (st != nullptr) {
    st->code = code;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(st->message, sizeof(st->message), fmt, ap);
    va_end(ap);
  }
  return code;
}

int32_t Ok(shardrec_plugin_status_t* st) {
  if (st != nullptr) {
    st->code = 0;
    st->message[0] = '\0';
  }
  return 0;
}

std::string ErrorText(int err) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(err);
  return std::string(buf, static_cast<size_t>(len));
}

int32_t FromMpi(shardrec_plugin_status_t* st, int err, const char* what) {
  if (err == MPI_SUCCESS) return Ok(st);
  return Fail(st, kRemote, "%s failed: %s", what, ErrorText(err).c_str());
}

namespace {

// Live communicators, so that the exit handler can tell whether operations are in flight.
std::set<shardrec_mpi_comm*>& Live() {
  static auto* live = new std::set<shardrec_mpi_comm*>;
  return *live;
}

bool g_initialized_here = false;
bool g_left_in_flight = false;  // a communicator was forgotten with requests outstanding
// Split threads still inside MPI_Comm_split (a member never came): MPI must not be finalized.
std::atomic<int> g_split_threads{0};

// MPI's main thread, when this plugin initialises MPI. MPI_Init_thread waits for every process
// of the job (a launcher's fence), and nothing bounds that wait, so it runs on a thread of its
// own and Create waits for it only until the caller's deadline; a later Create waits again. The
// same thread calls MPI_Finalize at exit, since MPI asks that of the thread that initialised it.
struct MainThread {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool returned = false;  // MPI_Init_thread returned (with `err`)
  int err = MPI_SUCCESS;
  bool finalize = false;  // exit asks for MPI_Finalize
  bool done = false;      // ... which has returned (or was not needed)
};

MainThread& Main() {
  static auto* m = new MainThread;  // never destroyed: the thread may outlive every static
  return *m;
}

void RunMain() {
  MainThread& m = Main();
  int provided = 0;
  const int err = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  std::unique_lock<std::mutex> lock(m.mu);
  m.err = err;
  m.returned = true;
  m.cv.notify_all();
  m.cv.wait(lock, [&] { return m.finalize; });
  if (err == MPI_SUCCESS) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  m.done = true;
  m.cv.notify_all();
}

// Starts MPI's main thread (once) and waits until MPI_Init_thread returned or `timeout_ms` passed.
int32_t InitMpi(int64_t timeout_ms, shardrec_plugin_status_t* st) {
  MainThread& m = Main();
  std::unique_lock<std::mutex> lock(m.mu);
  if (!m.started) {
    m.started = true;
    std::thread(RunMain).detach();
  }
  const bool returned = m.cv.wait_for(
      lock, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms), [&] { return m.returned; });
  if (!returned) {
    return Fail(
        st, kTimeout,
        "MPI_Init_thread, which libshardrec calls for this process, did not return within "
        "%lld ms: another process of the MPI job has not started or has not called MPI_Init "
        "or shardrec_comm_create_mpi yet (MPI waits for every process of the job); a later "
        "call waits for it again",
        static_cast<long long>(timeout_ms));
  }
  if (m.err != MPI_SUCCESS)
    return Fail(st, kUnsupported, "MPI_Init_thread failed (code %d)", m.err);
  g_initialized_here = true;
  return Ok(st);
}

// At process exit, MPI_Finalize (on MPI's main thread) if this plugin initialised MPI, unless
// operations are still in flight (a timed-out collective or split): finalizing then would wait for
// the stalled peer forever; Open MPI's launcher reports the missing finalize and ends the job
// instead. MPI_Init_thread still waiting at exit is left to the process's end.
struct Finalizer {
  ~Finalizer() {
    // First, and without the mutex: a split thread stuck in MPI_Comm_split may hold it.
    if (g_split_threads.load() > 0) return;
    std::lock_guard<std::mutex> lock(Mu());
    if (!g_initialized_here || g_left_in_flight) return;
    for (const shardrec_mpi_comm* c : Live()) {
      if (!c->pending.empty()) return;
    }
    MainThread& m = Main();
    std::unique_lock<std::mutex> main_lock(m.mu);
    m.finalize = true;
    m.cv.notify_all();
    m.cv.wait(main_lock, [&] { return m.done; });
  }
} g_finalizer;

int ThreadLevel() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided == MPI_THREAD_MULTIPLE) return SHARDREC_MPI_THREAD_MULTIPLE;
  if (provided == MPI_THREAD_SERIALIZED) return SHARDREC_MPI_THREAD_SERIALIZED;
  if (provided == MPI_THREAD_FUNNELED) return SHARDREC_MPI_THREAD_FUNNELED;
  return SHARDREC_MPI_THREAD_SINGLE;
}

void FillInfo(MPI_Comm comm, shardrec_mpi_comm_info_t* info) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  info->rank = rank;
  info->size = size;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  info->world_size = world;
  info->thread_level = ThreadLevel();
  info->initialized_here = g_initialized_here ? 1 : 0;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string first(version, static_cast<size_t>(len));
  first = first.substr(0, first.find_first_of("\r\n"));
  std::snprintf(info->library, sizeof(info->library), "%s", first.c_str());
}

const char* PluginPath() {
  static std::string path = [] {
    Dl_info dl{};
    if (dladdr(reinterpret_cast<void*>(&PluginPath), &dl) == 0 || dl.dli_fname == nullptr)
      return std::string();
    char* real = realpath(dl.dli_fname, nullptr);
    std::string out = real != nullptr ? real : dl.dli_fname;
    std::free(real);
    return out;
  }();
  return path.c_str();
}

int32_t Create(int64_t fortran_comm, int64_t timeout_ms, shardrec_mpi_comm_t** out,
               shardrec_mpi_comm_info_t* info, shardrec_plugin_status_t* st) {
  if (out == nullptr || info == nullptr) return Fail(st, kInvalidArgument, "out must not be NULL");
  *out = nullptr;
  std::lock_guard<std::mutex> lock(Mu());
  // Once this plugin started MPI_Init_thread, its thread says whether MPI is up (MPI_Initialized
  // is not asked while that call may still be running).
  bool ours = false, up = false;
  {
    std::lock_guard<std::mutex> main_lock(Main().mu);
    ours = Main().started;
    up = Main().returned && Main().err == MPI_SUCCESS;
  }
  int initialized = 0, finalized = 0;
  if (!ours) MPI_Initialized(&initialized);
  if (ours ? !up : !initialized) {
    if (fortran_comm != 0) {
      return Fail(st, kInvalidArgument,
                  "MPI is not initialised, so communicator handle %lld cannot exist; pass 0 "
                  "(MPI_COMM_WORLD) or call MPI_Init_thread first",
                  static_cast<long long>(fortran_comm));
    }
    if (const int32_t rc = InitMpi(timeout_ms, st); rc != 0) return rc;
  }
  MPI_Finalized(&finalized);
  if (finalized) return Fail(st, kInvalidUsage, "MPI has already been finalized in this process");
  if (fortran_comm < INT_MIN || fortran_comm > INT_MAX) {
    return Fail(st, kInvalidArgument, "communicator handle %lld is not a Fortran MPI handle",
                static_cast<long long>(fortran_comm));
  }
  MPI_Comm parent =
      fortran_comm == 0 ? MPI_COMM_WORLD : MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
  if (parent == MPI_COMM_NULL) {
    return Fail(st, kInvalidArgument, "communicator handle %lld names no MPI communicator",
                static_cast<long long>(fortran_comm));
  }
  auto* c = new shardrec_mpi_comm;
  MPI_Request req = MPI_REQUEST_NULL;
  const int err = MPI_Comm_idup(parent, &c->comm, &req);
  if (err != MPI_SUCCESS) {
    delete c;
    return FromMpi(st, err, "MPI_Comm_idup");
  }
  c->pending.push_back(req);
  c->ops.emplace_back();
  c->needs_errhandler = true;
  FillInfo(parent, info);
  Live().insert(c);
  *out = c;
  return Ok(st);
}

void Destroy(shardrec_mpi_comm_t* c) {
  if (c == nullptr) return;
  std::lock_guard<std::mutex> lock(Mu());
  Live().erase(c);
  if (c->children_in_flight.load() > 0 || c->split_state.load() == kSplitRunning) {
    // A split or duplicate of it still uses it (a member never came); leaked on purpose.
    g_left_in_flight = true;
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!c->pending.empty() && !finalized) {
    // Operations that timed out here may have completed since (the late peer arrived), some
    // with an error (a mismatched message; MPI_ERR_IN_STATUS): complete either way.
    int flag = 0;
    const int err = MPI_Testall(static_cast<int>(c->pending.size()), c->pending.data(), &flag,
                                MPI_STATUSES_IGNORE);
    if ((err == MPI_SUCCESS || err == MPI_ERR_IN_STATUS) && flag) c->pending.clear();
  }
  if (!c->pending.empty()) {
    // MPI may still write into the requests' buffers; the handle is leaked on purpose.
    g_left_in_flight = true;
    return;
  }
  // A duplicate whose MPI_Comm_idup completed only now (its creation had timed out) no longer
  // holds its parent, which may then be freed too.
  if (c->dup_parent != nullptr) c->dup_parent->children_in_flight.fetch_sub(1);
  if (!finalized && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  delete c;
}

// The body of a split's thread. Under MPI_THREAD_MULTIPLE it calls MPI_Comm_split without the
// mutex, so that the other communicators of this process (another thread's split among them)
// keep making progress while it waits for the members; under SERIALIZED MPI allows no other call
// meanwhile. `parent` and `child` outlive it: Destroy leaks both while it runs.
void RunSplit(shardrec_mpi_comm* parent, shardrec_mpi_comm* child, int color, int key,
              bool hold_mutex) {
  std::unique_lock<std::mutex> lock(Mu(), std::defer_lock);
  if (hold_mutex) lock.lock();
  MPI_Comm out = MPI_COMM_NULL;
  const int err = MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color, key, &out);
  if (err == MPI_SUCCESS && out != MPI_COMM_NULL) MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  child->comm = out;
  child->split_err = err;
  parent->children_in_flight.fetch_sub(1);
  child->split_state.store(kSplitDone, std::memory_order_release);
  g_split_threads.fetch_sub(1);
}

int32_t Split(shardrec_mpi_comm_t* c, int32_t color, int32_t key, shardrec_mpi_comm_t** out,
              shardrec_plugin_status_t* st) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(Mu());
  if (!c->pending.empty() || c->children_in_flight.load() > 0)
    return Fail(st, kInvalidUsage, "split of a communicator with operations in flight");
  auto* s = new shardrec_mpi_comm;
  s->split_state.store(kSplitRunning);
  c->children_in_flight.fetch_add(1);
  g_split_threads.fetch_add(1);
  try {
    std::thread(RunSplit, c, s, color, key, ThreadLevel() < SHARDREC_MPI_THREAD_MULTIPLE).detach();
  } catch (const std::exception& e) {
    c->children_in_flight.fetch_sub(1);
    g_split_threads.fetch_sub(1);
    delete s;
    return Fail(st, kRemote, "could not start a thread for MPI_Comm_split: %s", e.what());
  }
  Live().insert(s);
  *out = s;
  return Ok(st);
}

int32_t Dup(shardrec_mpi_comm_t* c, shardrec_mpi_comm_t** out, shardrec_plugin_status_t* st) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(Mu());
  if (!c->pending.empty() || c->children_in_flight.load() > 0)
    return Fail(st, kInvalidUsage, "duplicate of a communicator with operations in flight");
  auto* d = new shardrec_mpi_comm;
  MPI_Request req = MPI_REQUEST_NULL;
  const int err = MPI_Comm_idup(c->comm, &d->comm, &req);
  if (err != MPI_SUCCESS) {
    delete d;
    return FromMpi(st, err, "MPI_Comm_idup");
  }
  d->pending.push_back(req);
  d->ops.emplace_back();
  d->needs_errhandler = true;
  d->dup_parent = c;
  c->children_in_flight.fetch_add(1);
  Live().insert(d);
  *out = d;
  return Ok(st);
}

int32_t Describe(shardrec_mpi_comm_t* c, shardrec_mpi_comm_info_t* info,
                 shardrec_plugin_status_t* st) {
  std::lock_guard<std::mutex> lock(Mu());
  if (c->split_state.load(std::memory_order_acquire) == kSplitRunning)
    return Fail(st, kInvalidUsage, "describe of a communicator whose split is still running");
  if (c->comm == MPI_COMM_NULL) {
    *info = shardrec_mpi_comm_info_t{};
    info->rank = -1;
    return Ok(st);
  }
  FillInfo(c->comm, info);
  return Ok(st);
}

const shardrec_mpi_plugin_table_t kTable = {
    SHARDREC_MPI_PLUGIN_ABI_VERSION,
    sizeof(shardrec_mpi_plugin_table_t),
    &PluginPath,
    &Create,
    &Destroy,
    &Send,
    &Recv,
    &Test,
    &Split,
    &Describe,
    &Dup,
};

}  // namespace
}  // namespace shardrec_mpi_plugin

extern "C" __attribute__((visibility("default"))) uint32_t shardrec_mpi_plugin_abi_version(void) {
  return SHARDREC_MPI_PLUGIN_ABI_VERSION;
}

extern "C" __attribute__((visibility("default"))) const shardrec_mpi_plugin_table_t*
shardrec_mpi_plugin_table(uint32_t abi_version) {
  return abi_version == SHARDREC_MPI_PLUGIN_ABI_VERSION ? &shardrec_mpi_plugin::kTable : nullptr;
}
