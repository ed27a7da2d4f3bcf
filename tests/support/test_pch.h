// Precompiled once for every test binary (shardrec_test_pch in tests/CMakeLists.txt, reused by
// shardrec_add_test): GoogleTest and the standard headers nearly every test includes. Parsing
// them was a large share of each test file's compile time, three builds over in CI (sanitizers,
// ThreadSanitizer, release). Only headers every test may see.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
