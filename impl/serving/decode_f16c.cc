// The fp16 row decoder built for F16C (compiled with -mavx -mf16c; chosen at run time by
// DecoderFor). Plain data only: nothing inline is shared with the baseline build.
#include <immintrin.h>

#include <cstdint>

namespace shardrec::serving {

// Declared here rather than through decode.h, whose includes would bring inline library code
// built for AVX into the link (a copy the baseline build could end up calling).
void DecodeFp16F16c(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch);

void DecodeFp16F16c(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  int32_t c = 0;
  for (; c + 8 <= dim; c += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
    _mm256_storeu_ps(out + c, _mm256_cvtph_ps(h));
  }
  if (c < dim) {
    uint16_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float wide[8];
    for (int32_t k = 0; c + k < dim; ++k)
      tail[k] = static_cast<uint16_t>(row[2 * (c + k)] | (row[2 * (c + k) + 1] << 8));
    _mm256_storeu_ps(wide,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tail))));
    for (int32_t k = 0; c + k < dim; ++k) out[c + k] = wide[k];
  }
}

}  // namespace shardrec::serving
