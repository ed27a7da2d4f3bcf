// Scratch files of the fuzz targets that save, export or write files for the library to read:
// a directory in memory where there is a tmpfs (every save and export is written atomically,
// with fsync, which on a disk would dominate an execution), and whole-file reads and writes that
// abort (a crash the fuzzer records) on any failure.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/fuzz/fuzz_util.h"

namespace shardrec::fuzz {

// A new directory shardrec_fuzz_<tag>_XXXXXX under /dev/shm, else under /tmp.
inline std::string ScratchDir(const std::string& tag) {
  std::string shm = "/dev/shm/shardrec_fuzz_" + tag + "_XXXXXX";
  std::string tmp = "/tmp/shardrec_fuzz_" + tag + "_XXXXXX";
  const char* made = mkdtemp(shm.data());
  if (made == nullptr) made = mkdtemp(tmp.data());
  FUZZ_CHECK(made != nullptr);
  return made;
}

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  FUZZ_CHECK(f.good());
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void Spit(const std::string& path, const void* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
  FUZZ_CHECK(std::fclose(f) == 0);
}

inline void Spit(const std::string& path, const std::string& bytes) {
  Spit(path, bytes.data(), bytes.size());
}

}  // namespace shardrec::fuzz
