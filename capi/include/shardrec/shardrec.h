/**
 * @file shardrec/shardrec.h
 * @brief Umbrella header: includes every public libshardrec header.
 */
#ifndef SHARDREC_SHARDREC_H_
#define SHARDREC_SHARDREC_H_

#include "shardrec/common.h"
#include "shardrec/version.h"

#endif /* SHARDREC_SHARDREC_H_ */
