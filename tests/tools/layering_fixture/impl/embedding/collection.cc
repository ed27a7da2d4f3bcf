// Layering fixture: a host-side file of impl/embedding that includes the GPU collection, which
// check_layers.cmake must refuse (tests/CMakeLists.txt layering_check_refuses_gpu).
#include "impl/embedding/gpu/engine.h"
