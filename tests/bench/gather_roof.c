/* The prefetching gather roof of fbgemm_spmdm_side_by_side.py: the least work a pooled lookup
 * of the same rows can do. Every row of every bag is read whole (row_bytes bytes at
 * base + id * row_bytes) into four 32-byte integer accumulators, with the rows `ahead` ids ahead
 * prefetched line by line, and one 32-byte sum per bag is stored (so nothing is dead code). No
 * decode and no float math: a lookup at this rate is bound by memory alone. Built by the script
 * with the host's compiler (cc -O3 -mavx2 -shared); loaded through ctypes in the same process. */
#include <immintrin.h>
#include <stdint.h>

static inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }

void gather_roof(const uint8_t* base, int64_t row_bytes, const int64_t* ids, const int64_t* offsets,
                 int64_t bags, int64_t ahead, uint8_t* out) {
  const int64_t n = offsets[bags];
  for (int64_t b = 0; b < bags; ++b) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
      if (i + ahead < n) {
        const uint8_t* p = base + ids[i + ahead] * row_bytes;
        const uint8_t* line = (const uint8_t*)((uintptr_t)p & ~(uintptr_t)63);
        for (; line < p + row_bytes; line += 64) _mm_prefetch((const char*)line, _MM_HINT_T0);
      }
      const uint8_t* r = base + ids[i] * row_bytes;
      int64_t k = 0;
      for (; k + 128 <= row_bytes; k += 128) {
        a0 = _mm256_add_epi32(a0, load32(r + k));
        a1 = _mm256_add_epi32(a1, load32(r + k + 32));
        a2 = _mm256_add_epi32(a2, load32(r + k + 64));
        a3 = _mm256_add_epi32(a3, load32(r + k + 96));
      }
      for (; k + 32 <= row_bytes; k += 32) a2 = _mm256_add_epi32(a2, load32(r + k));
      /* The last partial 32 bytes, read as the row's last 32 (rows of 32 bytes or more). */
      if (k < row_bytes) a3 = _mm256_add_epi32(a3, load32(r + row_bytes - 32));
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
    _mm256_storeu_si256((__m256i*)(out + 32 * b), s);
  }
}
