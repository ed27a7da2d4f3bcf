// The host engine (engine.h): parameters in host memory, kernels on the collection's thread
// pool, every exchange over the host communicator; an encoded (16-bit) exchange has its rows
// encoded and decoded by the kernels that produce and consume them.
#pragma once

#include <memory>
#include <vector>

#include "impl/embedding/engine.h"
#include "impl/embedding/host_reduce.h"

namespace shardrec::embedding {

class HostEngine final : public Engine {
 public:
  using Engine::Engine;

  Status Init(const comm::Communicator& comm) override;
  Status HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) override;
  Status Connect(const int64_t* agreed, const std::shared_ptr<comm::Communicator>& given) override;

  Status LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                          const DeviceOutput* device_out) override;
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
  // The lookups and the return exchange: the travelling rows first, sent by the communication
  // worker while this thread looks up the rows of its own samples.
  Status LookupAndReturn(RoutedBatch& rb);

  // fp32 return and gradient exchanges of row splits that share a host, reduced there first.
  HostReduce reduce_;
};

}  // namespace shardrec::embedding
