// Integers read from untrusted JSON headers (checkpoint manifests, safetensors headers, serving
// files): nlohmann's get<integer>() converts a float or an out-of-range number with a plain
// cast, which is undefined behaviour for a float beyond the type (a 20-digit checksum that
// parsed as a double, an edited "rows": 1e99), so every such integer goes through JsonInt.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace shardrec::checkpoint {

// The integer `j` holds as a T; std::runtime_error when `j` is not an integer or does not fit.
template <class T>
T JsonInt(const nlohmann::json& j) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (!j.is_number_integer()) {
    throw std::runtime_error(std::string("expected an integer, found ") + j.type_name());
  }
  using L = std::numeric_limits<T>;
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(L::max())) throw std::runtime_error("integer out of range");
    return static_cast<T>(v);
  }
  const int64_t v = j.get<int64_t>();
  if constexpr (std::is_signed_v<T>) {
    if (v < static_cast<int64_t>(L::min()) || v > static_cast<int64_t>(L::max())) {
      throw std::runtime_error("integer out of range");
    }
  } else {
    if (v < 0) throw std::runtime_error("negative integer where a size is expected");
  }
  return static_cast<T>(v);
}

// JsonInt of each element of the array `j`; std::runtime_error when `j` is not an array.
template <class T>
std::vector<T> JsonInts(const nlohmann::json& j) {
  if (!j.is_array())
    throw std::runtime_error(std::string("expected an array, found ") + j.type_name());
  std::vector<T> out;
  out.reserve(j.size());
  for (const nlohmann::json& e : j) out.push_back(JsonInt<T>(e));
  return out;
}

}  // namespace shardrec::checkpoint
