// How much slower than a release build this test binary runs. Wall-clock bounds that state a
// promise of the release library (a calibration "well under a second") are multiplied by it, so
// sanitized builds on a loaded CI machine check correctness without timing out on overhead.
#pragma once

#ifndef SHARDREC_TEST_SLOWDOWN
#define SHARDREC_TEST_SLOWDOWN 1
#endif

namespace shardrec::testing {

constexpr double kSlowdown = SHARDREC_TEST_SLOWDOWN;

}  // namespace shardrec::testing
