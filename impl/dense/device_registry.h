// The device memory the dense layers allocated, so host-only code (the dense optimizers) can
// refuse a device MLP's tensors with a clear error instead of dereferencing device pointers.
// It knows only the library's own allocations, not device memory a caller brings.
// Thread-safe.
#pragma once

#include <cstddef>

namespace shardrec::dense {

void RegisterDeviceRange(const void* p, size_t bytes);
void UnregisterDeviceRange(const void* p);
// True when p lies inside a registered range.
bool IsKnownDevicePointer(const void* p);

}  // namespace shardrec::dense
