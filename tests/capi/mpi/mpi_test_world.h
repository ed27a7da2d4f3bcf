// The world communicator of the MPI tests (one rank per process), created before any test runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "shardrec/comm.h"

namespace shardrec::testing {

shardrec_comm_t* MpiWorld();  // null when creation failed (MpiWorldError says why)
std::string MpiWorldError();
int32_t MpiRank();
int32_t MpiSize();

class MpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(MpiWorld(), nullptr) << "MPI communicator creation failed: " << MpiWorldError();
  }
};

}  // namespace shardrec::testing
