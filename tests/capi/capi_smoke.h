/*
 * Shared by the parts of the plain-C smoke test (capi_smoke.c, capi_smoke_comm.c): the failure
 * counter and its EXPECT / OK checks, and each part's entry point.
 */
#ifndef SHARDREC_TESTS_CAPI_SMOKE_H_
#define SHARDREC_TESTS_CAPI_SMOKE_H_

#include <pthread.h>
#include <stdio.h>

#include "shardrec/shardrec.h"

extern int g_failures;
extern pthread_mutex_t g_mu;

#define EXPECT(cond)                                                                      \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      pthread_mutex_lock(&g_mu);                                                          \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              shardrec_last_error());                                                     \
      ++g_failures;                                                                       \
      pthread_mutex_unlock(&g_mu);                                                        \
    }                                                                                     \
  } while (0)
#define OK(call) EXPECT((call) == SHARDREC_OK)

/* comm.h: unique ids, host stores, local groups, every collective and split (capi_smoke_comm.c). */
void test_comm(void);

#endif /* SHARDREC_TESTS_CAPI_SMOKE_H_ */
