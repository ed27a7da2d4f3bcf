/* What the bed's rank programs (mh_rank.c, mh_train.c) share: a monotonic clock in milliseconds
 * for the failure times they print, and integers from the environment the bed sets. */
#ifndef SHARDREC_TESTS_MULTIHOST_MH_UTIL_H_
#define SHARDREC_TESTS_MULTIHOST_MH_UTIL_H_

#include <stdlib.h>
#include <time.h>

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* The variable `name` as an integer, or `fallback` when it is unset or empty. */
static inline int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != NULL && *v != '\0' ? atoi(v) : fallback;
}

#endif /* SHARDREC_TESTS_MULTIHOST_MH_UTIL_H_ */
