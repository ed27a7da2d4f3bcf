// The one place a collection's engine is picked (engine.h MakeEngine), and the only file of the
// host side that sees the device engine (tests/tools/check_layers.cmake holds it to that).
#include "impl/embedding/engine.h"
#include "impl/embedding/gpu/engine.h"
#include "impl/embedding/host_engine.h"

namespace shardrec::embedding {

std::unique_ptr<Engine> MakeEngine(StepState* s, StepAgreement* agreement, const Device& device) {
  if (device.is_cuda()) return std::make_unique<DeviceEngine>(s, agreement);
  return std::make_unique<HostEngine>(s, agreement);
}

}  // namespace shardrec::embedding
