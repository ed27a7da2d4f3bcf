// Status: codes, messages, context and the propagation macros.
#include "impl/core/status.h"

#include <gtest/gtest.h>

#include "impl/core/check.h"

namespace shardrec {
namespace {

Status FailsWith(Code c) { return Status(c, "inner"); }

Status Propagates() {
  SR_RETURN_IF_ERROR(FailsWith(Code::kTimeout));
  return Status::Internal("not reached");
}

TEST(CoreStatus, OkIsDefaultAndCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(CoreStatus, FactoriesJoinTheirArguments) {
  Status s = Status::InvalidArgument("table ", "t0", " has ", 5, " rows");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "table t0 has 5 rows");
  EXPECT_EQ(s.ToString(), "InvalidArgument: table t0 has 5 rows");
}

TEST(CoreStatus, ContextPrefixesTheMessage) {
  Status s = Status::Timeout("allreduce").WithContext("rank 2");
  EXPECT_EQ(s.message(), "rank 2: allreduce");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(CoreStatus, ReturnIfErrorPropagatesTheFirstError) {
  EXPECT_EQ(Propagates().code(), Code::kTimeout);
}

TEST(CoreStatus, CheckThrowsAnInternalStatusError) {
  try {
    SR_CHECK(1 + 1 == 3);
    FAIL() << "SR_CHECK did not throw";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), Code::kInternal);
    EXPECT_NE(e.status().message().find("1 + 1 == 3"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardrec
