// libFuzzer target over the plan text parser (shardrec_plan_from_json): any input gives OK or a
// clear error (never EINTERNAL, a crash or a sanitizer report), and an accepted plan writes back
// to a text that reads back to the same plan (same text, same hash) and whose stats format.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardrec_plan_t* plan = nullptr;
  const shardrec_status_t rc =
      shardrec_plan_from_json(&plan, reinterpret_cast<const char*>(data), size);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(rc == SHARDREC_ECORRUPT || rc == SHARDREC_EINVAL);
    FUZZ_CHECK(plan == nullptr);
    FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
    return 0;
  }
  char* text = nullptr;
  size_t len = 0;
  FUZZ_CHECK(shardrec_plan_to_json(plan, &text, &len) == SHARDREC_OK);
  shardrec_plan_t* back = nullptr;
  FUZZ_CHECK(shardrec_plan_from_json(&back, text, len) == SHARDREC_OK);
  char* text2 = nullptr;
  size_t len2 = 0;
  FUZZ_CHECK(shardrec_plan_to_json(back, &text2, &len2) == SHARDREC_OK);
  FUZZ_CHECK(len == len2 && std::memcmp(text, text2, len) == 0);
  uint64_t h1 = 0, h2 = 0;
  FUZZ_CHECK(shardrec_plan_hash(plan, &h1) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_plan_hash(back, &h2) == SHARDREC_OK);
  FUZZ_CHECK(h1 == h2);
  char* stats = nullptr;
  FUZZ_CHECK(shardrec_plan_stats(plan, &stats, nullptr) == SHARDREC_OK);
  shardrec_free(stats);
  shardrec_free(text);
  shardrec_free(text2);
  shardrec_plan_destroy(back);
  shardrec_plan_destroy(plan);
  return 0;
}
