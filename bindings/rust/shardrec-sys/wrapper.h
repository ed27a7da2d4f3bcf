/* Input of bindgen for shardrec-sys: the whole public C API. */
#include "shardrec/common.h"
#include "shardrec/version.h"
#include "shardrec/config.h"
#include "shardrec/tensor.h"
#include "shardrec/comm.h"
#include "shardrec/plan.h"
#include "shardrec/embedding.h"
#include "shardrec/device.h"
