// The libshardrec side of the NCCL backend: exchanges the NCCL unique id through the rendezvous
// store, asks the CUDA plugin to build the communicator, and wraps the plugin's opaque handle
// in a comm::CheckedCommunicator. No CUDA or NCCL header is used here; every call goes through the
// plugin's plain-C table.
#include <atomic>
#include <chrono>
#include <vector>

#include "impl/comm/checked_communicator.h"
#include "impl/comm/nccl/nccl_backend.h"
#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::comm::nccl {
namespace {

using Clock = std::chrono::steady_clock;

// A Communicator whose every operation is one call of the plugin table, each collective behind
// the checked prologue the host backends share (checked_communicator.h).
class PluginNcclCommunicator final : public CheckedCommunicator {
 public:
  PluginNcclCommunicator(const shardrec_cuda_plugin_table_t* t, shardrec_plugin_nccl_t* h, int rank,
                         int size, int device, std::chrono::milliseconds timeout)
      : t_(t), h_(h), rank_(rank), size_(size), device_(device), timeout_ms_(timeout.count()) {}
  ~PluginNcclCommunicator() override { t_->nccl_destroy(h_); }

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  Device device() const override { return Device::Cuda(device_); }
  const char* backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::milliseconds(timeout_ms_.load());
  }
  void set_timeout(std::chrono::milliseconds timeout) override {
    if (timeout.count() <= 0) return;
    timeout_ms_.store(timeout.count());
    t_->nccl_set_timeout(h_, timeout.count());
  }

  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override;
  void Abort() override { t_->nccl_abort(h_); }
  Status AsyncError() const override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(t_->nccl_async_error(h_, &st), st);
  }

 protected:
  // The checked prologue (CheckedCommunicator) has run: one caller, usable, the host-side
  // argument checks (one entry per rank in every count span, which the table's bare arrays need)
  // and the timeout resolved; the plugin checks the device buffers.
  Status DoAllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                     const Call& call) override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(
        t_->nccl_all_reduce(h_, send, recv, count, static_cast<int32_t>(dtype),
                            static_cast<int32_t>(op), call.stream, call.timeout.count(), &st),
        st);
  }
  Status DoAllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                     std::span<const size_t> recv_counts, DType dtype, const Call& call) override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(
        t_->nccl_all_to_all_v(h_, send, send_counts.data(), recv, recv_counts.data(),
                              static_cast<int32_t>(dtype), call.stream, call.timeout.count(), &st),
        st);
  }
  Status DoAllGatherV(const void* send, size_t send_count, void* recv,
                      std::span<const size_t> recv_counts, DType dtype, const Call& call) override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(
        t_->nccl_all_gather_v(h_, send, send_count, recv, recv_counts.data(),
                              static_cast<int32_t>(dtype), call.stream, call.timeout.count(), &st),
        st);
  }
  Status DoReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                          DType dtype, ReduceOp op, const Call& call) override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(
        t_->nccl_reduce_scatter_v(h_, send, recv, recv_counts.data(), static_cast<int32_t>(dtype),
                                  static_cast<int32_t>(op), call.stream, call.timeout.count(), &st),
        st);
  }
  Status DoBroadcast(void* buf, size_t count, DType dtype, int root, const Call& call) override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(t_->nccl_broadcast(h_, buf, count, static_cast<int32_t>(dtype), root,
                                               call.stream, call.timeout.count(), &st),
                            st);
  }
  Status DoBarrier(const Call& call) override {
    shardrec_plugin_status_t st{};
    return core::FromPlugin(t_->nccl_barrier(h_, call.stream, call.timeout.count(), &st), st);
  }

 private:
  const shardrec_cuda_plugin_table_t* const t_;
  shardrec_plugin_nccl_t* const h_;
  const int rank_;
  const int size_;
  const int device_;
  std::atomic<int64_t> timeout_ms_;
};

Status PluginNcclCommunicator::Split(int color, int key, std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  out->reset();
  shardrec_plugin_status_t st{};
  shardrec_plugin_nccl_t* child = nullptr;
  int32_t rank = -1;
  int32_t size = 0;
  SR_RETURN_IF_ERROR(
      core::FromPlugin(t_->nccl_split(h_, color, key, &child, &rank, &size, &st), st));
  if (child != nullptr) {
    out->reset(new PluginNcclCommunicator(t_, child, rank, size, device_, this->timeout()));
  }
  return Status::Ok();
}

Status MakeUniqueId(const shardrec_cuda_plugin_table_t* t, int device, std::vector<uint8_t>* id) {
  SR_RETURN_IF_ERROR(core::CheckDevice(Device::Cuda(device)));
  id->assign(SHARDREC_PLUGIN_NCCL_ID_BYTES, 0);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->nccl_unique_id(id->data(), id->size(), &st), st);
}

Status Create(Store* store, const std::string& key_prefix, int world, int rank, int device,
              std::chrono::milliseconds timeout, std::unique_ptr<Communicator>* out) {
  const Clock::time_point deadline = Clock::now() + timeout;
  const shardrec_cuda_plugin_table_t* t = nullptr;
  const Status loaded = core::GetCudaPlugin(&t);
  const std::string key = key_prefix + "/nccl_id";
  std::vector<uint8_t> id;
  if (rank == 0) {
    Status made = loaded.ok() ? MakeUniqueId(t, device, &id) : loaded;
    // An empty value tells the other ranks that rank 0 failed, so they fail at once instead of
    // waiting for the timeout.
    Status published = store->Set(key, made.ok() ? id : std::vector<uint8_t>{});
    SR_RETURN_IF_ERROR(made);
    SR_RETURN_IF_ERROR(published);
  } else {
    SR_RETURN_IF_ERROR(loaded);
    SR_RETURN_IF_ERROR(core::CheckDevice(Device::Cuda(device)));
    SR_RETURN_IF_ERROR(store->Get(key, timeout, &id));
    if (id.empty()) {
      return Status::Remote("rank 0 could not create the NCCL unique id (see its error)");
    }
    if (id.size() != SHARDREC_PLUGIN_NCCL_ID_BYTES) {
      return Status::Corrupt("the NCCL unique id under store key '", key, "' has ", id.size(),
                             " bytes, expected ", SHARDREC_PLUGIN_NCCL_ID_BYTES);
    }
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) {
    return Status::Timeout("the NCCL unique id exchange used the whole ", timeout.count(),
                           " ms timeout");
  }
  shardrec_plugin_nccl_t* handle = nullptr;
  shardrec_plugin_status_t st{};
  SR_RETURN_IF_ERROR(core::FromPlugin(
      t->nccl_create(id.data(), id.size(), world, rank, device, left.count(), &handle, &st), st));
  if (handle == nullptr) return Status::Internal("the CUDA plugin returned no NCCL communicator");
  // The left-over budget bounded creation; later calls use the full configured timeout.
  t->nccl_set_timeout(handle, timeout.count());
  out->reset(new PluginNcclCommunicator(t, handle, rank, world, device, timeout));
  return Status::Ok();
}

}  // namespace

Status CreateNcclCommunicator(Store* store, const std::string& key_prefix, int world, int rank,
                              int device, std::chrono::milliseconds timeout,
                              std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  out->reset();
  if (store == nullptr) return Status::InvalidArgument("store must not be NULL");
  if (world < 1) return Status::InvalidArgument("world size must be >= 1, got ", world);
  if (rank < 0 || rank >= world) {
    return Status::InvalidArgument("rank ", rank, " is outside [0, ", world, ")");
  }
  if (device < 0) return Status::InvalidArgument("CUDA device index must be >= 0, got ", device);
  if (timeout.count() <= 0) {
    return Status::InvalidArgument("timeout must be positive, got ", timeout.count(), " ms");
  }
  Status s = Create(store, key_prefix, world, rank, device, timeout, out);
  if (!s.ok()) return s.WithContext(StrCat("NCCL communicator rank ", rank, " of ", world));
  return s;
}

}  // namespace shardrec::comm::nccl
