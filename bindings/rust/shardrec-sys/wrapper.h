/* Input of bindgen for shardrec-sys: the whole public C API. The order fixes the order of the
 * generated items (src/bindings.rs is checked in), so it is kept by hand. */
// clang-format off
#include "shardrec/common.h"
#include "shardrec/version.h"
#include "shardrec/config.h"
#include "shardrec/tensor.h"
#include "shardrec/comm.h"
#include "shardrec/plan.h"
#include "shardrec/embedding.h"
#include "shardrec/dynamic.h"
#include "shardrec/tier.h"
#include "shardrec/device.h"
#include "shardrec/replica.h"
#include "shardrec/checkpoint.h"
#include "shardrec/dense.h"
#include "shardrec/ddp.h"
#include "shardrec/inference.h"
// clang-format on
