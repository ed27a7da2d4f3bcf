// The host engine (engine.h): parameters in host memory, kernels on the collection's thread
// pool, every exchange over the host communicator; an encoded (16-bit) exchange has its rows
// encoded and decoded by the kernels that produce and consume them.
#pragma once

#include <memory>

#include "impl/embedding/engine.h"
#include "impl/embedding/host_reduce.h"

namespace shardrec::embedding {

class HostEngine final : public Engine {
 public:
  using Engine::Engine;

  Status Init(const comm::Communicator& comm) override;
  Status HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) override;
  Status Connect(const int64_t* agreed, const std::shared_ptr<comm::Communicator>& given) override;

  Status DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                         const InputTerms& terms) override;
  Status LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                          const DeviceOutput* device_out) override;
  Status Backward(const float* grad, size_t grad_len, const Status& local,
                  const DeviceGradient* device_grad) override;

 protected:
  Status RouteLocal(const Batch& batch, RoutedBatch* rb) override;

 private:
  // fp32 return and gradient exchanges of row splits that share a host, reduced there first.
  HostReduce reduce_;
};

}  // namespace shardrec::embedding
