// The host engine (engine.h): parameters in host memory, kernels on the collection's thread
// pool, every exchange over the host communicator; an encoded (16-bit) exchange has its rows
// encoded and decoded by the kernels that produce and consume them.
#pragma once

#include <memory>
#include <vector>

#include "impl/embedding/engine.h"

namespace shardrec::embedding {

class HostEngine final : public Engine {
 public:
  explicit HostEngine(StepState* s) : Engine(s) {}

  Status Init(const comm::Communicator& comm) override;
  Status HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) override;
  void AgreementWords(int64_t* words) const override;
  Status MakeInputComm(comm::Communicator& comm, std::unique_ptr<comm::Communicator>* out) override;
  void Adopt(const int64_t* agreed) override;
  Status SetDataParallelComm(const std::shared_ptr<comm::Communicator>& given) override;

  Status LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                          const DeviceOutput* device_out) override;
  bool WritesDeviceOutput(const Device& /*device*/) const override { return false; }
  bool TakesDeviceGradient(const Device& /*device*/) const override { return false; }
  // A forward of dynamic tables inserts rows, so its ranks agree first; a plain forward does so in
  // its input exchange, its data-parallel dynamic gather size announced there too. Not where a
  // data-parallel dynamic table's group is another communicator (a mesh's world): a rank that
  // refused its forward must still reach that group's agreement (AgreeDataParallelGroup), so it
  // cannot stop at its own group's exchange.
  bool AgreesForwardInInputExchange() const override;
  bool ChecksOutputInInputExchange() const override;
  // With dynamic tables, a forward not agreed in its input exchange agrees in LookupAndCombine.
  bool AgreesOnOutputsFirst(const RoutedBatch& rb) const override {
    return !s_.layout.has_dynamic || rb.forward_agreed;
  }
  int64_t ForwardWords(const RoutedBatch& rb) override;
  // Where AgreesForwardInInputExchange is not (a data-parallel dynamic table over another group).
  bool AgreesForwardBeyondInput() const override;
  void JoinForwardAgreement(const Status& refused) override;
  Status Backward(const float* grad, size_t grad_len, const Status& local,
                  const DeviceGradient* device_grad) override;

 protected:
  Status RouteLocal(const Batch& batch, RoutedBatch* rb) override;

 private:
  // Whether the return (forward) or gradient (backward) exchange travels encoded with the rows
  // encoded by the kernels that produce them (output_dist.h WireRows, in s.wire): world > 1,
  // that direction's encoding not fp32. The forward's combine decodes as it adds; the backward
  // decodes once before its kernels.
  bool WireInKernels(comm::Encoding e) const;
  // The agreement of a forward with dynamic tables (one all-reduce): fails on every rank when a
  // rank refused its output buffer (`local`) or the ranks differ in training mode. When a
  // training forward has data-parallel dynamic tables reduced over this communicator, it also
  // agrees every rank's gather size for dp_agree.h (*dp_words, one per rank; else left empty).
  Status AgreeForward(const Status& local, const RoutedBatch& rb, std::vector<int64_t>* dp_words);
  // The lookups and the return exchange: the travelling rows first, sent by the communication
  // worker while this thread looks up the rows of its own samples.
  Status LookupAndReturn(RoutedBatch& rb);
};

}  // namespace shardrec::embedding
