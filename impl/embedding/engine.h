// The engine of an embedding collection: the per-step work (route, exchange, lookup and return,
// combine, the backward's exchange and updates of sharded and data-parallel tables, settling
// what stream-ordered calls left queued), behind one interface with a host implementation
// (host_engine.h) and a device one (gpu/engine.h), picked once at creation by MakeEngine.
// The collection (collection.h) runs the step as a pipeline of stages around these calls:
// agree (step_agreement.h) -> route and exchange (DistributeInput) -> resolve rows
// (row_resolver.h) -> lookup and combine -> backward and apply. Engines do work; what they offer
// is decided once, at creation (EngineTraits), and they never steer the collection per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>

#include "impl/comm/communicator.h"
#include "impl/core/device.h"
#include "impl/core/status.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/step_agreement.h"
#include "impl/embedding/step_state.h"

namespace shardrec::embedding {

// What an engine offers, decided once at creation (Engine::Connect) for the collection's life.
struct EngineTraits {
  // A forward can write its output / a backward read its gradient straight in device memory of
  // the collection's device (else the caller stages device views through the host).
  bool writes_device_output = false;
  bool takes_device_gradient = false;
  // A started input distribution completes at once (StartInputDist) instead of on the
  // communication worker (over NCCL: engine.cc says why).
  bool exchanges_input_inline = false;
  // A pipelined forward of fixed rows agrees on the ranks' output buffers before its lookups
  // (StepAgreement::BeforeRows); not where the engine keeps that host synchronisation out of its
  // step and lets the next backward fail on every rank instead (over NCCL).
  bool agrees_outputs_first = true;
};

// Where a call learns what earlier stream-ordered calls left (Engine::Settle).
enum class SettlePoint {
  kBeforeInput,     // a forward, before its input distribution
  kAfterInput,      // a forward, after its input distribution (whose wait may deliver it)
  kBeforeBackward,  // a backward, before its checks
  kWait,            // any synchronising call: wait (bounded) for everything queued
};

class Engine {
 public:
  Engine(StepState* s, StepAgreement* agreement) : s_(*s), agreement_(*agreement) {}
  virtual ~Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- Creation (EmbeddingCollection::Create), in this order ---
  // Whether the engine can run here (a GPU collection needs the plugin and its device), checked
  // before any memory is taken.
  virtual Status Available() const { return Status::Ok(); }
  // Once the parameters are allocated and initialised on this rank: the engine's own resources,
  // and what it offers to the creation agreement (offer()) for a collection over `comm`.
  virtual Status Init(const comm::Communicator& comm) = 0;
  // The communicator every host-buffer collective goes through, the agreement included: `*comm`
  // itself or a wrapper around it (replaced in place). Called whether or not this rank rejected
  // the configuration (`local_ok`), so every rank takes part in the agreement.
  virtual Status HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) = 0;
  // After the agreement, with s.comm set (HostComm's): the private communicator of the input
  // exchange into s.input_comm, what every rank allows (`agreed`, kEngineWords), the
  // data-parallel group (`given`: the caller's, or null for the collection's) into s.dp_comm, and
  // the traits.
  virtual Status Connect(const int64_t* agreed,
                         const std::shared_ptr<comm::Communicator>& given) = 0;
  // This rank's creation offer (StepAgreement::kEngineWords; 1 = a shared path not allowed here).
  const int64_t* offer() const { return offer_; }
  const EngineTraits& traits() const { return traits_; }

  // --- Input distribution ---
  // This rank's verdict on `batch`: `rejected` if set, else the routing's; anything thrown while
  // routing becomes the rejection too, so it still reaches the agreement.
  Status Route(const Batch& batch, const Status& rejected, RoutedBatch* rb);
  // Route + exchange + unpack of a batch, every rank taking part (a rejecting one too). A batch
  // this rank routed is then judged by `terms` (its output buffer, when check_output), whose
  // refusal rejects it like a bad batch, so the exchange fails every rank's forward alike; the
  // exchange announces `terms.mode` (ExchangeAndUnpack).
  virtual Status DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                                 const InputTerms& terms);
  // The id exchange and unpacking of a routed batch over the input communicator (`local`: this
  // rank's verdict; a rejecting rank takes part), announcing `terms.mode` and, for a training
  // forward this rank accepted, `terms.words` (input_dist.h ExchangeAndUnpack).
  Status ExchangeAndUnpack(const Status& local, RoutedBatch* rb, const InputTerms& terms = {}) {
    return embedding::ExchangeAndUnpack(s_.layout, *s_.input_comm, local, rb, terms,
                                        &s_.timings.comm_seconds, &s_.input_caps);
  }

  // --- Forward ---
  // Lookup, return exchange and combine of a distributed batch whose rows are resolved into
  // `out` (rows x output_dim): every rank takes part in the exchanges; a rank whose output was
  // refused (`local`) drops it. Returns the exchanges' outcome (the collection's Finish keeps the
  // batch when they went through).
  virtual Status LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                                  const DeviceOutput* device_out) = 0;

  // --- Backward ---
  // The backward of s.current (`local`: this rank's verdict on the call, already checked by the
  // collection): the agreement (StepAgreement::Backward, or the device's verdict riding on its
  // update phase), the gradient exchange and every update, counting the step.
  virtual Status Backward(const float* grad, size_t grad_len, const Status& local,
                          const DeviceGradient* device_grad) = 0;

  // Learns what stream-ordered calls left at `point` (kWait: after waiting, bounded, for queued
  // device work): the first error, and a rejected backward's step taken back. OK at once when
  // nothing is queued.
  virtual Status Settle(SettlePoint /*point*/) { return Status::Ok(); }

 protected:
  // The routing of a batch on this engine (a host KJT on the host; the device engine routes a KJT
  // in device memory there). May throw; Route catches.
  virtual Status RouteLocal(const Batch& batch, RoutedBatch* rb) = 0;
  // Sizes s.ret_send and s.ret_recv for `rb`; returns the floats received (output_dist.h).
  size_t SizeReturn(const RoutedBatch& rb) { return SizeReturnBuffers(s_, rb); }
  // The end of a backward: the data-parallel tables' all-reduce and update (through `rows`, or on
  // the host when null), then the count (backward.h).
  Status ApplyDataParallelTables(const RoutedBatch& rb, const float* grad, int64_t step,
                                 RowApplier* rows) {
    return embedding::ApplyDataParallelTables(s_, rb, grad, step, rows);
  }
  // `fn()`, with anything it throws turned into a rejection (Route's guard).
  template <typename Fn>
  static Status Guarded(Fn&& fn);

  StepState& s_;
  StepAgreement& agreement_;
  int64_t offer_[StepAgreement::kEngineWords] = {1, 1};  // no shared path until Init says so
  EngineTraits traits_;
};

template <typename Fn>
Status Engine::Guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const StatusError& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("routing the batch: out of host memory");
  } catch (const std::exception& e) {
    return Status::Internal("routing the batch: ", e.what());
  }
}

// A NaN or infinite element `i` of an output gradient, named by sample and feature/table.
Status GradNotFinite(const Layout& layout, size_t i, float value);

// The engine for `options.device`: the host engine, or the device engine for a CUDA device.
// Picked once, by the options alone (before any check), so a rank that rejects its arguments
// still takes part in the agreement the same way its peers do.
std::unique_ptr<Engine> MakeEngine(StepState* s, StepAgreement* agreement, const Device& device);

}  // namespace shardrec::embedding
