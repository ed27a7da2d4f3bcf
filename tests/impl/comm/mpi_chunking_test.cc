// The piece arithmetic that keeps every MPI message within int counts (impl/comm/mpi/chunking.h),
// checked at sizes beyond 2^31 without allocating them.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>

#include "impl/comm/mpi/chunking.h"

namespace shardrec::comm::mpi {
namespace {

// The pieces of (count, limit) tile [0, count) in order, none empty, none above the limit.
void ExpectTiling(size_t count, size_t limit) {
  const size_t n = NumPieces(count, limit);
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const Piece p = PieceAt(count, limit, i);
    ASSERT_EQ(p.offset, next) << "count " << count << " limit " << limit << " piece " << i;
    ASSERT_GT(p.count, 0u);
    ASSERT_LE(p.count, limit);
    next += p.count;
  }
  EXPECT_EQ(next, count) << "count " << count << " limit " << limit;
}

TEST(CommMpiChunking, PiecesTileEveryCountInOrder) {
  for (size_t limit : {1u, 2u, 3u, 7u, 64u}) {
    for (size_t count = 0; count < 200; ++count) ExpectTiling(count, limit);
  }
  EXPECT_EQ(NumPieces(0, 5), 0u);
  EXPECT_EQ(NumPieces(5, 5), 1u);
  EXPECT_EQ(NumPieces(6, 5), 2u);
}

TEST(CommMpiChunking, AnEmptyBlockIsOneEmptyMessage) {
  EXPECT_EQ(NumMessages(0, 5), 1u);
  EXPECT_EQ(PieceAt(0, 5, 0).count, 0u);
  EXPECT_EQ(NumMessages(5, 5), 1u);
  EXPECT_EQ(NumMessages(11, 5), 3u);
}

TEST(CommMpiChunking, MessagesBeyondIntCountsSplitBelowIntMax) {
  // 2^31 + 5 fp32 elements under the largest possible limit: two pieces, each an int.
  const size_t count = (size_t{1} << 31) + 5;
  const size_t limit = UnitsPerPiece(size_t{1} << 40, 4);
  EXPECT_EQ(limit, static_cast<size_t>(INT_MAX));
  EXPECT_EQ(NumPieces(count, limit), 2u);
  EXPECT_EQ(PieceAt(count, limit, 1).offset, static_cast<size_t>(INT_MAX));
  EXPECT_EQ(PieceAt(count, limit, 1).count, count - INT_MAX);
  // The default 1 GiB bound: 2^28 fp32 elements per piece, 9 pieces for 2^31 + 5 elements.
  const size_t def = UnitsPerPiece(kDefaultMaxMessageBytes, 4);
  EXPECT_EQ(def, size_t{1} << 28);
  EXPECT_EQ(NumPieces(count, def), 9u);
  EXPECT_EQ(PieceAt(count, def, 8).count, 5u);
}

TEST(CommMpiChunking, ByteLimitNeverGivesAnEmptyPiece) {
  // A limit below one element still moves one element per message (8-byte elements, 3 bytes).
  EXPECT_EQ(UnitsPerPiece(3, 8), 1u);
  EXPECT_EQ(UnitsPerPiece(16, 8), 2u);
  EXPECT_EQ(UnitsPerPiece(7, 0), 1u);
}

TEST(CommMpiChunking, EnvironmentLowersTheMessageBound) {
  ::setenv("SHARDREC_MPI_MAX_MESSAGE_BYTES", "24", 1);
  EXPECT_EQ(MaxMessageBytesFromEnv(), 24u);
  ::setenv("SHARDREC_MPI_MAX_MESSAGE_BYTES", "not a number", 1);
  EXPECT_EQ(MaxMessageBytesFromEnv(), kDefaultMaxMessageBytes);
  ::setenv("SHARDREC_MPI_MAX_MESSAGE_BYTES", "99999999999999", 1);  // never above the default
  EXPECT_EQ(MaxMessageBytesFromEnv(), kDefaultMaxMessageBytes);
  ::unsetenv("SHARDREC_MPI_MAX_MESSAGE_BYTES");
  EXPECT_EQ(MaxMessageBytesFromEnv(), kDefaultMaxMessageBytes);
}

}  // namespace
}  // namespace shardrec::comm::mpi
