// The device engine (engine.h) of a GPU collection: parameters on one CUDA device, the heavy
// kernels there through the CUDA plugin (step.h says which phases and waits each call
// takes), routing, bookkeeping and the host-buffer exchanges on the host. Over a device (NCCL)
// communicator of its own device the payloads travel between device buffers and the host-buffer
// collectives go through a staging wrapper (impl/comm/staged_comm.h); what the plugin and every
// rank serve is agreed at creation (the capability words).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "impl/embedding/engine.h"
#include "impl/embedding/gpu/route.h"
#include "impl/embedding/gpu/route_backend.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

class DeviceEngine final : public Engine {
 public:
  using Engine::Engine;

  Status Available() const override;
  Status Init(const comm::Communicator& comm) override;
  Status HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) override;
  // Traits: over NCCL the input exchange completes in StartInputDist (engine.cc says why),
  // and a GPU collection's step keeps to its one host wait (the stream-ordered calls): a rank that
  // refuses its pipelined output buffer fails alone, and the next backward's gated verdict fails
  // it on every rank. Over a host communicator the step waits on the host in every phase anyway,
  // and agrees as a host collection does (whose ranks it may share a group with).
  Status Connect(const int64_t* agreed, const std::shared_ptr<comm::Communicator>& given) override;

  // (`terms.mode` is kNone here: a device collection never agrees in its input exchange.)
  Status DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                         const InputTerms& terms) override;
  Status LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                          const DeviceOutput* device_out) override;
  Status Backward(const float* grad, size_t grad_len, const Status& local,
                  const DeviceGradient* device_grad) override;
  // A forward learns what earlier stream-ordered calls left before its input distribution, or,
  // with the device input distribution, after it (whose wait delivers it); a backward learns the
  // last stream-ordered backward's verdict first.
  Status Settle(SettlePoint point) override;

 protected:
  // A KJT on the device is routed there (route.h): the messages come back to the host for
  // the exchange, RouteBatch's bytes.
  Status RouteLocal(const Batch& batch, RoutedBatch* rb) override;

 private:
  // The device input distribution (device_input_): the route summaries' all-gather over the
  // device communicator; a KJT on the device routed there with its messages written straight into
  // the batch's slot block (RouteAndGatherOnDevice).
  Status RouteAndGatherOnDevice(const Batch& batch, RoutedBatch* rb);
  // Orders the step's stream after the work queued on the caller's stream (batch.stream) before a
  // batch in device memory is read.
  Status AfterCallersStream(const Batch& batch);
  // Waits (bounded) for the queued device work and learns what it found (Settle's kWait).
  Status Wait();
  // A pooled collection on its device whose forward combines on the device, with a plugin that
  // divides MEAN outputs there when the plan has any (EngineTraits::writes_device_output).
  bool WritesDeviceOutput() const;
  // A collection without data-parallel tables on the host, whose gradient message is exchanged
  // between device buffers or does not travel, with a plugin serving device gradients
  // (EngineTraits::takes_device_gradient).
  bool TakesDeviceGradient() const;
  // Whether a forward's returned rows are combined on the device (DeviceStep::LookupCombine):
  // a pooled GPU collection at world 1, or over NCCL with fp32 messages.
  bool CombinesOnDevice() const;
  Status LookupCombineOnDevice(RoutedBatch& rb, const CombineOut& out);
  // The lookups and the return exchange when the rows are combined on the host.
  Status LookupAndReturn(RoutedBatch& rb);
  // The backward's agreement over a device communicator when it is not gated (a 16-bit wire):
  // this rank's verdict `local` all-reduced between device buffers in a phase of its own
  // (DeviceStep::Verdict).
  Status AgreeOnDevice(const Status& local);
  // A backward whose verdict is agreed on the device and gates the updates there (fp32 messages or
  // world 1), all in
  // the update phase: DeviceStep::ApplySharded with ShardedInputs::verdict. `local` is this rank's
  // verdict on its call; the agreed one is read after the phase's wait.
  Status BackwardGated(const float* grad, const Status& local, const DeviceGradient* device_grad);
  // The data-parallel tables' part of a device backward (device_dp_): their group, and the host
  // output gradient they accumulate from (null, 0 for a gradient on the device).
  DeviceDpWork DataParallelWork(const float* host_grad, size_t floats) const;
  // The end of a backward: the data-parallel tables' all-reduce and update (unless they trained
  // on the device, in the sharded tables' phase), then the count.
  Status FinishBackward(const RoutedBatch& rb, const float* grad, int64_t step);

  std::unique_ptr<DeviceStep> device_;
  // A device (NCCL) communicator given to the collection: that communicator, for the payloads
  // exchanged between device buffers; s.comm is then its host-buffer wrapper
  // (impl/comm/staged_comm.h).
  std::shared_ptr<comm::Communicator> device_comm_;
  // What this rank's options and communicators allow (Init), before the agreement; then what
  // every rank does.
  bool can_device_input_ = false;
  bool can_device_dp_ = false;
  // Over that device communicator at world > 1 with fp32 messages on every rank: the ids travel
  // between device buffers (input.h).
  bool device_input_ = false;
  // Data-parallel tables trained on the device (dp.h; every rank's group allows it): their
  // all-reduce goes over dp_device_comm_ between device buffers (null: a group of one).
  bool device_dp_ = false;
  std::shared_ptr<comm::Communicator> dp_device_comm_;
  std::vector<float> junk_grad_;  // what a rank that rejected a gated backward packs
  // The routing of a KJT given in device memory (made at its first such batch).
  std::unique_ptr<DeviceRouteBackend> route_device_;
  RouteTables route_tables_;
  // The device input distribution's route summaries: this rank's (host routing) and every
  // rank's, reused between batches.
  std::vector<uint8_t> summary_;
  std::vector<uint8_t> gathered_;
  // A stream-ordered backward whose verdict comes with a later wait (DeviceStep::VerdictArrived).
  struct PendingVerdict {
    bool pending = false;
    int64_t step = 0;      // the step it counted
    int64_t forwards = 0;  // s.timings.forwards then: its batch is still s.current while equal
    Status local;          // this rank's own rejection of the call
  };
  PendingVerdict pending_verdict_;
};

}  // namespace shardrec::embedding
