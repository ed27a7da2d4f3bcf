// The engine of an embedding collection: the per-step work (route, exchange, lookup and return,
// combine, the backward's exchange and updates of sharded and data-parallel tables, settling
// what stream-ordered calls left queued), behind one interface with a host implementation
// (host_engine.h) and a device one (gpu/device_engine.h), picked once at creation by MakeEngine.
// The collection (collection.h) keeps what is the same for both: argument checks, the agreement
// between ranks, the batches in flight and the timings' phases around the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "impl/comm/communicator.h"
#include "impl/core/device.h"
#include "impl/core/status.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/step_state.h"

namespace shardrec::embedding {

class Engine {
 public:
  // Words the engine adds to the creation agreement (an allreduce(max)): 0 where this rank's
  // options and communicators allow a path every rank must take alike, 1 where they do not.
  static constexpr int kAgreeWords = 2;

  explicit Engine(StepState* s) : s_(*s) {}
  virtual ~Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- Creation (EmbeddingCollection::Create), in this order ---
  // Whether the engine can run here (a GPU collection needs the plugin and its device), checked
  // before any memory is taken.
  virtual Status Available() const { return Status::Ok(); }
  // Once the parameters are allocated and initialised on this rank: the engine's own resources
  // and the capabilities it offers, for a collection over `comm` (`comm` as given).
  virtual Status Init(const comm::Communicator& comm) = 0;
  // The communicator every host-buffer collective goes through, the agreement included: `*comm`
  // itself or a wrapper around it (replaced in place). Called whether or not this rank rejected
  // the configuration (`local_ok`), so every rank takes part in the agreement.
  virtual Status HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) = 0;
  // This rank's agreement words (kAgreeWords of them).
  virtual void AgreementWords(int64_t* words) const = 0;
  // After the agreement: the private communicator of the input exchange (on `comm`, HostComm's),
  // then the agreed words (the maximum over ranks), then the data-parallel group (`given`: the
  // caller's, or null for the collection's) into s.dp_comm.
  virtual Status MakeInputComm(comm::Communicator& comm,
                               std::unique_ptr<comm::Communicator>* out) = 0;
  virtual void Adopt(const int64_t* agreed) = 0;
  virtual Status SetDataParallelComm(const std::shared_ptr<comm::Communicator>& given) = 0;

  // --- Input distribution ---
  // This rank's verdict on `batch`: `rejected` if set, else the routing's; anything thrown while
  // routing becomes the rejection too, so it still reaches the agreement.
  Status Route(const Batch& batch, const Status& rejected, RoutedBatch* rb);
  // A forward's verdict on its output buffer for its own batch of (batch_size, num_values).
  using OutputCheck = std::function<Status(int64_t batch_size, int64_t num_values)>;
  // Route + exchange + unpack of a batch, every rank taking part (a rejecting one too). A batch
  // this rank routed is then put to `check` (when given), whose refusal rejects it like a bad
  // batch, so the exchange fails every rank's forward alike; the exchange announces `mode`
  // (ExchangeAndUnpack).
  virtual Status DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                                 const OutputCheck& check = nullptr,
                                 ForwardMode mode = ForwardMode::kNone);
  // Whether a forward's verdict on its output buffer may ride on the input exchange (check
  // above): not where the engine agrees on the forward later over a group the input exchange
  // does not span, which a refusing rank must still reach.
  virtual bool ChecksOutputInInputExchange() const { return true; }
  // The id exchange and unpacking of a routed batch over the input communicator (`local`: this
  // rank's verdict; a rejecting rank takes part), announcing `mode` and, for a training forward
  // this rank accepted, ForwardWords (ExchangeInput).
  Status ExchangeAndUnpack(const Status& local, RoutedBatch* rb,
                           ForwardMode mode = ForwardMode::kNone);
  // Whether this engine's forward needs its ranks to agree on it (every output buffer accepted,
  // one training mode) before it changes state, and takes that agreement from the input exchange
  // when the forward checked its output buffer before it (ForwardMode): a collective fewer.
  virtual bool AgreesForwardInInputExchange() const { return false; }
  // Whether the pipelined forward of `rb`, which learns its output buffer after the input
  // exchange, must agree on the ranks' buffers before LookupAndCombine (one all-reduce): not where
  // LookupAndCombine agrees on the forward itself, nor where the engine keeps that host
  // synchronisation out of its step and lets the next backward fail on every rank instead.
  virtual bool AgreesOnOutputsFirst(const RoutedBatch& /*rb*/) const { return true; }
  // What a training forward that agrees in its input exchange announces beside its mode, for the
  // engine's own use after the exchange (RoutedBatch::forward_words).
  virtual int64_t ForwardWords(const RoutedBatch& /*rb*/) { return 0; }
  // Whether LookupAndCombine agrees on the forward over ranks beyond the input exchange's (a 2D
  // mesh's data-parallel dynamic tables, agreed over the world): those ranks learn of a forward
  // refused in the input exchange only if the refusing ranks still take part in that agreement
  // (JoinForwardAgreement), or they wait there for a forward that never comes.
  virtual bool AgreesForwardBeyondInput() const { return false; }
  // Takes part in that agreement as a rank whose forward failed before LookupAndCombine
  // (`refused`), so that every rank there fails with it and changes nothing. This rank's outcome
  // is `refused` whatever the agreement's: a communication failure of it is left for the next
  // collective to report.
  virtual void JoinForwardAgreement(const Status& /*refused*/) {}
  // Whether a started input distribution completes at once (StartInputDist) instead of on the
  // communication worker.
  virtual bool ExchangesInputInline() const { return false; }
  // Where a forward learns what earlier stream-ordered calls left (Settle): before its input
  // distribution, or after it (whose wait delivers it).
  virtual Status SettleBeforeInput() { return Status::Ok(); }
  virtual Status SettleAfterInput() { return Status::Ok(); }

  // --- Forward ---
  // Lookup, return exchange and combine of a distributed batch into `out` (rows x output_dim):
  // every rank takes part in the exchanges; a rank whose output was refused (`local`) drops it.
  // Returns the exchanges' outcome (the collection's Finish keeps the batch when they went
  // through).
  virtual Status LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                                  const DeviceOutput* device_out) = 0;
  // Whether a forward can write its output / read its gradient straight in device memory on
  // `device` (else the caller stages device views through the host).
  virtual bool WritesDeviceOutput(const Device& device) const = 0;
  virtual bool TakesDeviceGradient(const Device& device) const = 0;

  // --- Backward ---
  // Learns what an earlier stream-ordered backward left before a new one is checked.
  virtual Status SettleBeforeBackward() { return Status::Ok(); }
  // The backward of s.current (`local`: this rank's verdict on the call, already checked by the
  // collection): the agreement, the gradient exchange and every update, counting the step.
  virtual Status Backward(const float* grad, size_t grad_len, const Status& local,
                          const DeviceGradient* device_grad) = 0;

  // Learns (with `wait`, after waiting, bounded, for queued device work) what stream-ordered calls
  // left: the first error, and a rejected backward's step taken back. OK at once when nothing is
  // queued.
  virtual Status Settle(bool /*wait*/) { return Status::Ok(); }

  // Collective agreement over s.comm: returns `local` on this rank, or an error naming a rank
  // that failed. With `same` (values every rank must give alike, such as the index of the table
  // a call names), also InvalidArgument on every rank when they differ (`differ` then says what
  // the ranks must agree on), in the same all-reduce.
  Status Agree(const Status& local, const char* what, std::span<const int64_t> same = {},
               const char* differ = "");
  // A backward's agreement: Agree over s.comm, then, where data-parallel tables reduce their
  // gradients over another communicator (s.dp_comm: a 2D mesh's world), the same over it,
  // carrying s.comm's verdict (a rank whose group refused still takes part), so that a backward
  // refused in one sharding group fails every group before any state changes instead of leaving
  // the others waiting in that reduction. A communication failure of the first is not carried.
  Status AgreeBackward(const Status& local);

 protected:
  // The routing of a batch on this engine (a host KJT on the host; the device engine routes a KJT
  // in device memory there). May throw; Route catches.
  virtual Status RouteLocal(const Batch& batch, RoutedBatch* rb) = 0;
  // Sizes s.ret_send and s.ret_recv for `rb`; returns the floats received.
  size_t SizeReturn(const RoutedBatch& rb);
  // The end of a backward: the data-parallel tables' all-reduce and update (through `rows`, or on
  // the host when null), then the count.
  Status ApplyDataParallelTables(const RoutedBatch& rb, const float* grad, int64_t step,
                                 RowApplier* rows);

  StepState& s_;
};

// A NaN or infinite element `i` of an output gradient, named by sample and feature/table.
Status GradNotFinite(const Layout& layout, size_t i, float value);

// The engine for `options.device`: the host engine, or the device engine for a CUDA device.
// Picked once, by the options alone (before any check), so a rank that rejects its arguments
// still takes part in the agreement the same way its peers do.
std::unique_ptr<Engine> MakeEngine(StepState* s, const Device& device);

}  // namespace shardrec::embedding
