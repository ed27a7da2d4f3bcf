// A stand-in for libshardrec_cuda.so for the embedding entries of the plugin table: one pretend
// device whose memory is host memory (fake_device_memory.h) and whose emb_* entries run the HOST
// kernels (kernels.h, optim::PartialRowStats / Apply) after checking that every device-side
// pointer lies inside a live device block. The device bodies themselves are verified against the
// host kernels by the simt tests; this double verifies what libshardrec.so does around them:
// the marshalling into the C structs (dispatch.cc) and which memory it hands over.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/exec.h"
#include "impl/core/plugin_abi.h"
#include "impl/core/simt.h"
#include "impl/embedding/gpu/plugin_structs.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/device_status.h"
#include "impl/embedding/kernels/simt/grad_body.h"
#include "impl/embedding/kernels/simt/mean_body.h"
#include "impl/embedding/kernels/simt/stats_body.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"
#include "tests/support/fake_plugins/fake_device_checks.h"
#include "tests/support/fake_plugins/fake_device_memory.h"
#include "tests/support/fake_plugins/fake_nccl.h"
#include "tests/support/fake_plugins/fake_plugin_state.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace shardrec::fake {
namespace {

// The plugin side of the C boundary, as impl/cuda_plugin/plugin_status.h has it (which tests of
// the embedding module may not include): a Status becomes a code and a truncated message.
int32_t ToPlugin(const Status& s, shardrec_plugin_status_t* out) {
  const auto code = static_cast<int32_t>(s.code());
  if (out != nullptr) {
    out->code = code;
    const size_t n = std::min(s.message().size(), sizeof(out->message) - 1);
    std::memcpy(out->message, s.message().data(), n);
    out->message[n] = '\0';
  }
  return code;
}

template <typename Body>
int32_t Reported(shardrec_plugin_status_t* out, const char* what, Body&& body) noexcept {
  try {
    return ToPlugin(body(), out);
  } catch (const StatusError& e) {
    return ToPlugin(e.status(), out);
  } catch (const std::bad_alloc&) {
    return ToPlugin(Status::OutOfMemory("out of host memory in ", what), out);
  } catch (...) {
    return ToPlugin(Status::Internal("unexpected exception in ", what), out);
  }
}
namespace sb = embedding::kernels::simt_body;

int32_t Fail(shardrec_plugin_status_t* st, const char* text) {
  return ToPlugin(Status::Cuda(text), st);
}

const char* Path() { return "/fake/embedding/libshardrec_cuda.so"; }
void Versions(shardrec_plugin_versions_t* v) {
  v->built_cuda_runtime = 13000;
  v->built_nccl = 22809;
  v->cuda_driver = 13010;
  v->cuda_runtime = 13000;
  v->nccl = 22809;
}
int32_t DeviceCount(int32_t* n, shardrec_plugin_status_t* st) {
  *n = 1;
  return ToPlugin(Status::Ok(), st);
}
int32_t Alloc(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Reported(st, "fake device_alloc", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    // cudaMalloc's answer for a block the device has not got (without touching host memory).
    if (bytes > kMaxBlock)
      return Status::OutOfMemory("fake device: out of memory (", bytes, " bytes asked, blocks of ",
                                 kMaxBlock, " at most)");
    if (bytes > 0) g_rt[kRtDeviceAlloc].fetch_add(1);
    *out = Mem().Alloc(bytes);
    return Status::Ok();
  });
}
int32_t Free(int32_t, void* p, shardrec_plugin_status_t* st) {
  Queue().DrainAll();
  return ToPlugin(Mem().Free(p) ? Status::Ok()
                                : Status::InvalidArgument("fake device_free: not a device block"),
                  st);
}
int32_t HostAlloc(size_t bytes, void** out, shardrec_plugin_status_t* st) {
  if (bytes > kMaxBlock) {
    *out = nullptr;
    return ToPlugin(Status::OutOfMemory("fake cudaMallocHost: out of memory (", bytes, " bytes)"),
                    st);
  }
  if (bytes > 0) g_rt[kRtHostAlloc].fetch_add(1);
  *out = bytes == 0 ? nullptr : new uint8_t[bytes];
  return ToPlugin(Status::Ok(), st);
}
// Pinned allocations made without naming a device (host_alloc: on a real GPU, with whatever
// device the calling thread has current, device 0's context created when it has none).
std::atomic<int64_t> g_host_allocs_without_device{0};
int32_t HostAllocAny(size_t bytes, void** out, shardrec_plugin_status_t* st) {
  if (bytes > 0) g_host_allocs_without_device.fetch_add(1);
  return HostAlloc(bytes, out, st);
}
int32_t HostAllocOn(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  const Status s = CheckDevice(device);
  if (!s.ok()) return ToPlugin(s, st);
  return HostAlloc(bytes, out, st);
}
int32_t HostFree(void* p, shardrec_plugin_status_t* st) {
  Queue().DrainAll();
  delete[] static_cast<uint8_t*>(p);
  return ToPlugin(Status::Ok(), st);
}
int32_t Memcpy(int32_t, void* dst, const void* src, size_t bytes, int32_t kind, void* stream,
               shardrec_plugin_status_t* st) {
  return Reported(st, "fake memcpy", [&]() -> Status {
    if (CopyFails()) return Status::Cuda("fake memcpy: injected device failure");
    const bool to_dev = kind == SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE ||
                        kind == SHARDREC_PLUGIN_COPY_DEVICE_TO_DEVICE;
    const bool from_dev = kind == SHARDREC_PLUGIN_COPY_DEVICE_TO_HOST ||
                          kind == SHARDREC_PLUGIN_COPY_DEVICE_TO_DEVICE;
    if (to_dev) SR_RETURN_IF_ERROR(Mem().Check(dst, bytes, "memcpy destination"));
    if (from_dev) SR_RETURN_IF_ERROR(Mem().Check(src, bytes, "memcpy source"));
    if (kind == SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE && bytes > 0)
      SR_RETURN_IF_ERROR(Mem().CheckHost(src, "memcpy host source"));
    if (kind == SHARDREC_PLUGIN_COPY_DEVICE_TO_HOST && bytes > 0)
      SR_RETURN_IF_ERROR(Mem().CheckHost(dst, "memcpy host destination"));
    if (bytes == 0) return Status::Ok();
    if (kind == SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE) g_rt[kRtCopyToDevice].fetch_add(1);
    if (kind == SHARDREC_PLUGIN_COPY_DEVICE_TO_HOST) g_rt[kRtCopyToHost].fetch_add(1);
    if (Queue().deferred()) {
      Queue().Push(stream, [=] { std::memmove(dst, src, bytes); });
    } else {
      std::memmove(dst, src, bytes);
    }
    return Status::Ok();
  });
}
int32_t Memset(int32_t, void* dst, int32_t v, size_t bytes, void* stream,
               shardrec_plugin_status_t* st) {
  return Reported(st, "fake memset", [&]() -> Status {
    SR_RETURN_IF_ERROR(Mem().Check(dst, bytes, "memset destination"));
    if (bytes == 0) return Status::Ok();
    if (Queue().deferred()) {
      Queue().Push(stream, [=] { std::memset(dst, v, bytes); });
    } else {
      std::memset(dst, v, bytes);
    }
    return Status::Ok();
  });
}
int32_t StreamWait(int32_t, void* stream, int64_t, shardrec_plugin_status_t* st) {
  g_rt[kRtSync].fetch_add(1);
  // A failed wait leaves the stream's work queued, as a device that reports an error may.
  if (WaitFails()) return Fail(st, "fake stream_wait: injected device failure");
  Queue().Wait(stream);
  return ToPlugin(Status::Ok(), st);
}
int32_t StreamCreate(int32_t device, void** stream, shardrec_plugin_status_t* st) {
  return Reported(st, "fake stream_create", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    *stream = new uint8_t[1];
    g_streams_live.fetch_add(1);
    return Status::Ok();
  });
}
int32_t StreamDestroy(int32_t, void* stream, shardrec_plugin_status_t* st) {
  if (stream != nullptr) {
    Queue().Wait(stream);  // queued work completes first, as cudaStreamDestroy lets it
    delete[] static_cast<uint8_t*>(stream);
    g_streams_live.fetch_sub(1);
  }
  return ToPlugin(Status::Ok(), st);
}
int32_t LinearForward(int32_t, const shardrec_plugin_linear_t*, const float*, const float*,
                      const float*, float*, void*, int32_t*, void*, shardrec_plugin_status_t* st) {
  return Fail(st, "fake: no dense layers here");
}
int32_t LinearBackward(int32_t, const shardrec_plugin_linear_t*, const float*, const float*,
                       const float*, const float*, const void*, float*, float*, float*, void*,
                       shardrec_plugin_status_t* st) {
  return Fail(st, "fake: no dense layers here");
}

// ---- Embedding entries ------------------------------------------------------------------------

int32_t StatusBytes(int32_t device, size_t* bytes, shardrec_plugin_status_t* st) {
  return Reported(st, "fake emb_status_bytes", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    *bytes = sizeof(sb::DeviceStatus);
    return Status::Ok();
  });
}

// The real entry's messages, from the block the fake lookup filled.
int32_t ReadStatus(int32_t device, void* block, const char* what, int64_t timeout_ms, void* stream,
                   shardrec_plugin_status_t* st) {
  g_rt[kRtSync].fetch_add(1);
  if (WaitFails()) return Fail(st, "fake emb_read_status: injected device failure");
  Queue().Wait(stream);
  return Reported(st, "fake emb_read_status", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (timeout_ms <= 0)
      return Status::InvalidArgument("stream wait timeout must be positive, got ", timeout_ms);
    if (block == nullptr) return Status::Ok();
    SR_RETURN_IF_ERROR(Mem().Check(block, sizeof(sb::DeviceStatus), "status block"));
    sb::DeviceStatus s;
    std::memcpy(&s, block, sizeof(s));
    std::memset(block, 0, sizeof(s));
    const char* w = what != nullptr ? what : "embedding kernels";
    if (s.code == sb::kStatusRowOutOfRange)
      return Status::InvalidArgument(w, ": a row outside its shard at position ",
                                     sb::FirstPosition(s), " (left out)");
    if (s.code != sb::kStatusOk) return Status::InvalidArgument(w, ": status code ", s.code);
    return Status::Ok();
  });
}

int32_t Lookup(int32_t device, const shardrec_plugin_lookup_job_t* jobs, size_t num_jobs,
               void* block, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallLookup].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_lookup", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunLookup(Mem(), jobs, num_jobs, static_cast<sb::DeviceStatus*>(block));
  });
}

int32_t WorkspaceBytes(int32_t device, int64_t num_ids, int32_t cols, int32_t num_row_stats,
                       size_t* bytes, shardrec_plugin_status_t* st) {
  return Reported(st, "fake emb_backward_workspace_bytes", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    *bytes =
        embedding::kernels::BackwardWorkspaceBytes(ExecContext(), num_ids, cols, num_row_stats);
    return Status::Ok();
  });
}

int32_t GroupRows(int32_t device, const shardrec_plugin_runs_t* runs, void* ws, size_t ws_bytes,
                  int64_t* num_unique, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallGroupRows].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_group_rows", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunGroupRows(Mem(), runs, ws, ws_bytes, num_unique);
  });
}

int32_t AggregateGrads(int32_t device, const shardrec_plugin_runs_t* runs, const float* grads,
                       int64_t grad_stride, int32_t cols, float scale, void* ws,
                       int64_t* unique_rows, float* row_grads, void* stream,
                       shardrec_plugin_status_t* st) {
  g_calls[kCallAggregate].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_aggregate_grads", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunAggregateGrads(Mem(), runs, grads, grad_stride, cols, scale, ws, unique_rows,
                             row_grads);
  });
}

int32_t FusedBackward(int32_t device, const shardrec_plugin_runs_t* runs, const float* grads,
                      int64_t grad_stride, float scale, const shardrec_plugin_optimizer_t* config,
                      int64_t step, int32_t full_dim, const shardrec_plugin_shard_t* shard,
                      void* ws, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallFused].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_fused_backward", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunFusedBackward(Mem(), runs, grads, grad_stride, scale, config, step, full_dim, shard,
                            ws);
  });
}

int32_t PartialRowStats(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                        const shardrec_plugin_shard_t* shard,
                        const shardrec_plugin_row_update_t* update, float* partial, void* stream,
                        shardrec_plugin_status_t* st) {
  g_calls[kCallPartial].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_partial_row_stats", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunRowPhase(Mem(), config, step, 0, shard, update, partial, nullptr, 1);
  });
}

int32_t Apply(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
              int32_t full_dim, const shardrec_plugin_shard_t* shard,
              const shardrec_plugin_row_update_t* update, const float* full, void* stream,
              shardrec_plugin_status_t* st) {
  g_calls[kCallApply].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_apply", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunRowPhase(Mem(), config, step, full_dim, shard, update, nullptr, full, 2);
  });
}

int32_t RouteTempBytes(int32_t device, int64_t max_items, size_t* bytes,
                       shardrec_plugin_status_t* st) {
  return Reported(st, "fake emb_route_temp_bytes", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (bytes == nullptr) return Status::InvalidArgument("bytes must not be NULL");
    if (max_items < 1) return Status::InvalidArgument("route scratch for ", max_items, " items");
    *bytes = 256;  // the host scan needs none; some, so that the caller's carving is exercised
    return Status::Ok();
  });
}

int32_t Route(int32_t device, const shardrec_plugin_route_t* route, int32_t phase, void* temp,
              size_t temp_bytes, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallRoute].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_route", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunRoute(Mem(), route, phase, temp, temp_bytes);
  });
}

// The MEAN divide runs the single-source body (simt/mean_body.h) on host warps over fake device
// memory, after checking that the output and every divisor array lie inside live blocks.
int32_t DivideMeans(int32_t device, float* out, int64_t rows, int64_t stride,
                    const shardrec_plugin_mean_job_t* jobs, size_t num_jobs, void* stream,
                    shardrec_plugin_status_t* st) {
  g_calls[kCallMean].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_divide_means", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (num_jobs > 0 && jobs == nullptr) return Status::InvalidArgument("jobs must not be NULL");
    if (rows < 0 || stride < 0) return Status::InvalidArgument("negative sizes");
    if (rows == 0 || num_jobs == 0) return Status::Ok();
    SR_RETURN_IF_ERROR(
        Mem().Check(out, static_cast<size_t>(rows * stride) * sizeof(float), "mean output"));
    for (size_t j = 0; j < num_jobs; ++j) {
      if (jobs[j].col < 0 || jobs[j].cols < 0 || jobs[j].col + jobs[j].cols > stride)
        return Status::InvalidArgument("mean job ", j, ": columns outside the rows");
      SR_RETURN_IF_ERROR(
          Mem().Check(jobs[j].div, static_cast<size_t>(rows) * sizeof(float), "mean divisors"));
    }
    for (size_t first = 0; first < num_jobs; first += sb::kMaxMeanJobs) {
      auto p = std::make_unique<sb::MeanParams>();
      p->out = out;
      p->rows = rows;
      p->stride = stride;
      for (size_t j = first; j < num_jobs && j < first + sb::kMaxMeanJobs; ++j)
        p->jobs[p->num_jobs++] = sb::MeanJobDesc{jobs[j].col, jobs[j].cols, jobs[j].div};
      simt::HostWarp w(0);
      for (int64_t item = 0; item < static_cast<int64_t>(p->num_jobs) * rows; ++item)
        sb::MeanItem(w, *p, item);
    }
    return Status::Ok();
  });
}

// The device unpack runs the single-source steps (simt/unpack_body.h) on the host executor over
// fake device memory, after checking every array the steps touch.
int32_t Unpack(int32_t device, const shardrec_plugin_unpack_t* unpack, void* temp,
               size_t temp_bytes, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallUnpack].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_unpack", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunUnpack(Mem(), unpack, temp, temp_bytes);
  });
}

// Orders the waiter after the waitee's queued work by running that work now (a device would run
// it before the waiter's later work; running it early keeps the order).
int32_t StreamWaitStream(int32_t device, void* waiter, void* waitee, shardrec_plugin_status_t* st) {
  return Reported(st, "fake stream_wait_stream", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (waiter != waitee) Queue().BeforeKernel(waitee);
    return Status::Ok();
  });
}

// The gradient check and packing run the single-source bodies (simt/grad_body.h) on host
// executors over fake device memory, after checking every array they touch.
int32_t CheckFinite(int32_t device, const shardrec_plugin_finite_t* finite, void* stream,
                    shardrec_plugin_status_t* st) {
  g_calls[kCallFinite].fetch_add(1);
  Queue().BeforeKernel(stream);
  return Reported(st, "fake emb_check_finite", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (finite == nullptr) return Status::InvalidArgument("finite must not be NULL");
    const sb::FiniteParams p = embedding::kernels::abi::FromAbi(*finite);
    if (p.n < 0) return Status::InvalidArgument("negative size");
    if (p.n > 0)
      SR_RETURN_IF_ERROR(Mem().Check(p.x, static_cast<size_t>(p.n) * 4, "finite-check input"));
    SR_RETURN_IF_ERROR(Mem().Check(p.flag, 8, "finite-check flag"));
    SR_RETURN_IF_ERROR(Mem().Check(p.result, sizeof(sb::FiniteResult), "finite-check result"));
    sb::HostRouteExec ex;
    sb::FiniteSteps(ex, p);
    return Status::Ok();
  });
}

int32_t PackGrads(int32_t device, const shardrec_plugin_pack_t* pack, int64_t rows, void* stream,
                  shardrec_plugin_status_t* st) {
  g_calls[kCallPack].fetch_add(1);
  Queue().BeforeKernel(stream);
  return Reported(st, "fake emb_pack_grads", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (pack == nullptr) return Status::InvalidArgument("pack must not be NULL");
    const sb::PackParams p = embedding::kernels::abi::FromAbi(*pack);
    if (p.num_jobs < 0 || rows < 0) return Status::InvalidArgument("negative sizes");
    if (rows == 0) return Status::Ok();
    const auto n = static_cast<size_t>(p.num_jobs);
    SR_RETURN_IF_ERROR(Mem().Check(p.jobs, n * sizeof(sb::PackJob), "pack job table"));
    SR_RETURN_IF_ERROR(Mem().Check(p.first_row, (n + 1) * 8, "pack row table"));
    if (p.first_row[0] != 0 || p.first_row[n] != rows)
      return Status::InvalidArgument("fake emb_pack_grads: the row table does not span the rows");
    for (size_t j = 0; j < n; ++j) {
      const sb::PackJob& job = p.jobs[j];
      if (job.count != p.first_row[j + 1] - p.first_row[j])
        return Status::InvalidArgument("fake emb_pack_grads: job ", j, " count");
      if (job.count == 0) continue;
      SR_RETURN_IF_ERROR(
          Mem().Check(job.targets, static_cast<size_t>(job.count) * 8, "pack targets"));
      SR_RETURN_IF_ERROR(
          Mem().Check(job.dst, static_cast<size_t>(job.count * job.cols) * 4, "pack destination"));
      for (int64_t k = 0; k < job.count; ++k) {
        const int64_t t = job.targets[k];
        SR_RETURN_IF_ERROR(Mem().Check(p.grad + t * p.stride + job.col,
                                       static_cast<size_t>(job.cols) * 4, "pack gradient row"));
        if (job.div != nullptr) SR_RETURN_IF_ERROR(Mem().Check(job.div + t, 4, "pack divisor"));
      }
    }
    simt::HostWarp w(0);
    for (int64_t item = 0; item < rows; ++item) sb::PackItem(w, p, item);
    return Status::Ok();
  });
}

// The data-parallel steps and the counted row phases run the single-source bodies
// (simt/dp_body.h, simt/row_phase_body.h) on host executors over fake device memory, after
// checking every array they touch (fake_dp_checks.cc).
int32_t DpWorkspaceBytes(int32_t device, int64_t max_ids, int64_t num_keys, size_t* bytes,
                         shardrec_plugin_status_t* st) {
  return Reported(st, "fake emb_dp_workspace_bytes", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunDpWorkspaceBytes(max_ids, num_keys, bytes);
  });
}

int32_t DpStep(int32_t device, const shardrec_plugin_dp_t* dp, int32_t phase, void* ws,
               size_t ws_bytes, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallDpStep].fetch_add(1);
  Queue().BeforeKernel(stream);
  return Reported(st, "fake emb_dp_step", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunDpStep(Mem(), dp, phase, ws, ws_bytes);
  });
}

int32_t RowPhaseCounted(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                        int32_t full_dim, const shardrec_plugin_shard_t* shard,
                        const shardrec_plugin_counted_rows_t* rows, float* partial,
                        const float* full, int32_t phase, void* stream,
                        shardrec_plugin_status_t* st) {
  g_calls[kCallRowPhaseCounted].fetch_add(1);
  Queue().BeforeKernel(stream);
  return Reported(st, "fake emb_row_phase_counted", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunRowPhaseCounted(Mem(), config, step, full_dim, shard, rows, partial, full, phase);
  });
}

int32_t GroupRowsGated(int32_t device, const shardrec_plugin_runs_t* runs, void* ws,
                       size_t ws_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                       const int64_t* gate, void* stream, shardrec_plugin_status_t* st) {
  g_calls[kCallGroupRowsGated].fetch_add(1);
  Queue().BeforeKernel(stream);  // the kernel runs behind the copies queued before it
  return Reported(st, "fake emb_group_rows_gated", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    return RunGroupRowsGated(Mem(), runs, ws, ws_bytes, num_unique, num_unique_dev, gate);
  });
}

// The statistics' sum runs the single-source body (simt/stats_body.h) on the host executor over
// fake device memory, after checking the count, every source and the destination.
int32_t SumSources(int32_t device, const shardrec_plugin_sum_sources_t* sum, void* stream,
                   shardrec_plugin_status_t* st) {
  g_calls[kCallSumSources].fetch_add(1);
  Queue().BeforeKernel(stream);
  return Reported(st, "fake emb_sum_sources", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckDevice(device));
    if (sum == nullptr) return Status::InvalidArgument("sum must not be NULL");
    const sb::SumSourcesParams p = embedding::kernels::abi::FromAbi(*sum);
    if (p.num_sources < 0 || p.num_sources > sb::kMaxSumSources || p.row_floats < 0 ||
        p.max_rows < 0 || p.count == nullptr)
      return Status::InvalidArgument("fake emb_sum_sources: bad sizes or no count");
    SR_RETURN_IF_ERROR(Mem().Check(p.count, 8, "sum row count"));
    const size_t bytes = static_cast<size_t>(p.max_rows * p.row_floats) * 4;
    if (bytes == 0) return Status::Ok();
    SR_RETURN_IF_ERROR(Mem().Check(p.dst, bytes, "sum destination"));
    for (int32_t s = 0; s < p.num_sources; ++s)
      SR_RETURN_IF_ERROR(Mem().Check(p.sources[s], bytes, StrCat("sum source ", s)));
    sb::HostRouteExec ex;
    sb::SumSourcesSteps(ex, p);
    return Status::Ok();
  });
}

const shardrec_cuda_plugin_table_t kTable = {
    sizeof(shardrec_cuda_plugin_table_t),
    SHARDREC_CUDA_PLUGIN_ABI_VERSION,
    &Path,
    &Versions,
    &DeviceCount,
    &Alloc,
    &Free,
    &HostAllocAny,
    &HostFree,
    &Memcpy,
    &Memset,
    &StreamWait,
    &nccl::UniqueId,
    &nccl::Create,
    &nccl::Destroy,
    &nccl::SetTimeout,
    &nccl::AllReduce,
    &nccl::AllToAllV,
    &nccl::AllGatherV,
    &nccl::ReduceScatterV,
    &nccl::Broadcast,
    &nccl::Barrier,
    &nccl::Split,
    &nccl::Abort,
    &nccl::AsyncError,
    &LinearForward,
    &LinearBackward,
    &StatusBytes,
    &ReadStatus,
    &Lookup,
    &WorkspaceBytes,
    &GroupRows,
    &AggregateGrads,
    &FusedBackward,
    &PartialRowStats,
    &Apply,
    &RouteTempBytes,
    &Route,
    &StreamCreate,
    &StreamDestroy,
    &DivideMeans,
    &Unpack,
    &StreamWaitStream,
    &CheckFinite,
    &PackGrads,
    &DpWorkspaceBytes,
    &DpStep,
    &RowPhaseCounted,
    &GroupRowsGated,
    &SumSources,
    &HostAllocOn,
};

}  // namespace

// For the NCCL double (fake_nccl.h).
DeviceMemory& FakeDeviceMemory() { return Mem(); }
void FakeStreamReached(void* stream) { Queue().BeforeKernel(stream); }
int32_t FakeReport(const Status& s, shardrec_plugin_status_t* out) { return ToPlugin(s, out); }

}  // namespace shardrec::fake

FAKE_EXPORT uint32_t shardrec_cuda_plugin_abi_version() { return SHARDREC_CUDA_PLUGIN_ABI_VERSION; }

FAKE_EXPORT const shardrec_cuda_plugin_table_t* shardrec_cuda_plugin_table(uint32_t abi) {
  return abi == SHARDREC_CUDA_PLUGIN_ABI_VERSION ? &shardrec::fake::kTable : nullptr;
}

// Test hook: how many times kernel entry `which` (0 lookup, 1 group_rows, 2 aggregate_grads,
// 3 fused_backward, 4 partial_row_stats, 5 apply, 6 route, 7 divide_means, 8 unpack,
// 9 check_finite, 10 pack_grads, 11 dp_step, 12 row_phase_counted, 13 group_rows_gated,
// 14 sum_sources) was called in this process; -1
// for another value.
FAKE_EXPORT int64_t shardrec_fake_embedding_calls(int32_t which) {
  using namespace shardrec::fake;
  return which >= 0 && which < kNumCalls ? g_calls[which].load() : -1;
}

// Test hook: how many times runtime service `which` was used in this process (0 host
// synchronisations: stream waits and emb_read_status; 1 host-to-device copies; 2 device-to-host
// copies; 3 device allocations; 4 pinned host allocations; 5 streams of stream_create not yet
// destroyed); -1 for another value.
FAKE_EXPORT int64_t shardrec_fake_runtime_calls(int32_t which) {
  using namespace shardrec::fake;
  if (which == kNumRtCalls) return g_streams_live.load();
  return which >= 0 && which < kNumRtCalls ? g_rt[which].load() : -1;
}

// Test hook: after `n` more successful host/device copies, the next one fails with a CUDA error
// (once); -1 disarms. Process-wide: tests that use it run their ranks in a known order.
FAKE_EXPORT void shardrec_fake_fail_copy_after(int64_t n) {
  shardrec::fake::g_copies_before_failure.store(n < 0 ? -1 : n);
}

// Test hook: after `n` more successful host waits (stream_wait, emb_read_status), the next one
// fails with a CUDA error and leaves the stream's work queued (once); -1 disarms.
FAKE_EXPORT void shardrec_fake_fail_wait_after(int64_t n) {
  shardrec::fake::g_waits_before_failure.store(n < 0 ? -1 : n);
}

// Test hook: pinned allocations made through host_alloc, which names no device, in this process.
FAKE_EXPORT int64_t shardrec_fake_host_allocs_without_device() {
  return shardrec::fake::g_host_allocs_without_device.load();
}

// Test hooks: a stream of the fake's own (as stream_create makes), and a host-to-device copy
// queued on a stream (with SHARDREC_FAKE_DEFER_COPIES it lands when that stream gets there), for
// black-box tests that write a device batch on a side stream. The copy returns 0, or -1 when the
// fake refuses it.
FAKE_EXPORT void* shardrec_fake_stream_create() {
  void* stream = nullptr;
  shardrec_plugin_status_t st{};
  return shardrec::fake::StreamCreate(0, &stream, &st) == 0 ? stream : nullptr;
}
FAKE_EXPORT void shardrec_fake_stream_destroy(void* stream) {
  shardrec_plugin_status_t st{};
  (void)shardrec::fake::StreamDestroy(0, stream, &st);
}
FAKE_EXPORT int32_t shardrec_fake_upload_async(void* dst, const void* src, size_t bytes,
                                               void* stream) {
  shardrec_plugin_status_t st{};
  return shardrec::fake::Memcpy(0, dst, src, bytes, SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE, stream,
                                &st) == 0
             ? 0
             : -1;
}

// Test hooks: a block of the fake's device memory (host memory the process may read and write
// directly), for callers that cannot reach the plugin table (black-box C API tests).
FAKE_EXPORT void* shardrec_fake_device_alloc(size_t bytes) {
  return shardrec::fake::Mem().Alloc(bytes);
}
FAKE_EXPORT void shardrec_fake_device_free(void* p) { (void)shardrec::fake::Mem().Free(p); }

// Test hook: counter `which` of the NCCL double (fake_nccl.h: 0 collectives run, summed over the
// member ranks; 1 payload bytes they received, all into fake device memory; 2 communicators
// created, splits included; 3 communicators alive); -1 for another value.
FAKE_EXPORT int64_t shardrec_fake_nccl_calls(int32_t which) {
  return shardrec::fake::nccl::Counter(which);
}
