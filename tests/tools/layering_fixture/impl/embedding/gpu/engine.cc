// Layering fixture: the GPU collection includes itself and the host side below it.
#include "impl/embedding/gpu/engine.h"

#include "impl/embedding/layout.h"
