// Layering fixture: the engine factory, the one host-side file allowed to include the GPU
// collection.
#include "impl/embedding/engine.h"
#include "impl/embedding/gpu/engine.h"
