/**
 * @file shardrec/shardrec.h
 * @brief Umbrella header: includes every public libshardrec header.
 */
#ifndef SHARDREC_SHARDREC_H_
#define SHARDREC_SHARDREC_H_

#include "shardrec/checkpoint.h"
#include "shardrec/comm.h"
#include "shardrec/common.h"
#include "shardrec/config.h"
#include "shardrec/ddp.h"
#include "shardrec/dense.h"
#include "shardrec/device.h"
#include "shardrec/dynamic.h"
#include "shardrec/embedding.h"
#include "shardrec/inference.h"
#include "shardrec/plan.h"
#include "shardrec/replica.h"
#include "shardrec/tensor.h"
#include "shardrec/tier.h"
#include "shardrec/version.h"

#endif /* SHARDREC_SHARDREC_H_ */
