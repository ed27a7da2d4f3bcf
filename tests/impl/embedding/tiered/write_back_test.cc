// The write-back queue (impl/embedding/tiered/write_back.h): a queued record is found until its
// store has it, the newest record of a row wins, a failed write keeps the records findable and is
// reported, Drain waits for the writer, and a batched push behaves as its pushes one by one.
#include "impl/embedding/tiered/write_back.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/impl/embedding/tiered/memory_row_store.h"

namespace shardrec::embedding::tiered {
namespace {

std::vector<uint8_t> Record(uint8_t v) { return std::vector<uint8_t>(8, v); }

uint8_t StoredByte(MemoryRowStore& s, int64_t key) {
  uint8_t out[8] = {};
  bool found = false;
  EXPECT_TRUE(s.Get(&key, 1, out, &found).ok());
  return found ? out[0] : 0;
}

TEST(WriteBackQueue, QueuedRecordsAreFoundUntilStoredAndTheNewestWins) {
  MemoryRowStore store(8);
  WriteBackQueue q(16);
  store.hold(true);  // the writer blocks in its first Put
  ASSERT_TRUE(q.Push(&store, 5, Record(1).data()).ok());
  ASSERT_TRUE(q.Push(&store, 5, Record(2).data()).ok());
  ASSERT_TRUE(q.Push(&store, 6, Record(3).data()).ok());
  uint8_t out[8] = {};
  ASSERT_TRUE(q.Find(&store, 5, out));
  EXPECT_EQ(out[0], 2);
  ASSERT_TRUE(q.Find(&store, 6, out));
  EXPECT_EQ(out[0], 3);
  EXPECT_FALSE(q.Find(&store, 7, out));
  store.hold(false);
  ASSERT_TRUE(q.Drain().ok());
  EXPECT_EQ(q.depth(), 0u);
  EXPECT_FALSE(q.Find(&store, 5, out));
  EXPECT_EQ(StoredByte(store, 5), 2);  // a replaced record never overwrites the newer one
  EXPECT_EQ(StoredByte(store, 6), 3);
}

TEST(WriteBackQueue, FindManyFindsTheNewestRecordOfEachQueuedRowOfItsStore) {
  MemoryRowStore store(8), other(8);
  WriteBackQueue q(16);
  store.hold(true);
  other.hold(true);
  ASSERT_TRUE(q.Push(&store, 5, Record(1).data()).ok());
  ASSERT_TRUE(q.Push(&store, 5, Record(2).data()).ok());
  ASSERT_TRUE(q.Push(&other, 6, Record(4).data()).ok());
  ASSERT_TRUE(q.Push(&store, 7, Record(3).data()).ok());
  const int64_t keys[] = {7, 6, 5, 8};
  uint8_t out[4 * 8] = {};
  uint8_t found[4] = {9, 9, 9, 9};
  EXPECT_EQ(q.FindMany(&store, keys, 4, out, found), 2u);
  EXPECT_EQ(found[0], 1);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(found[1], 0);  // row 6 is queued for the other store only
  EXPECT_EQ(found[2], 1);
  EXPECT_EQ(out[16], 2);
  EXPECT_EQ(found[3], 0);
  store.hold(false);
  other.hold(false);
  ASSERT_TRUE(q.Drain().ok());
  EXPECT_EQ(q.FindMany(&store, keys, 4, out, found), 0u);
  EXPECT_EQ(found[0] + found[1] + found[2] + found[3], 0);
}

TEST(WriteBackQueue, AFailedWriteKeepsTheRecordsAndIsReported) {
  MemoryRowStore store(8);
  WriteBackQueue q(16);
  store.set_fail(true);
  ASSERT_TRUE(q.Push(&store, 1, Record(9).data()).ok());
  const Status drained = q.Drain();
  EXPECT_EQ(drained.code(), Code::kIo) << drained.message();
  uint8_t out[8] = {};
  ASSERT_TRUE(q.Find(&store, 1, out));  // never lost
  EXPECT_EQ(out[0], 9);
  EXPECT_FALSE(q.Push(&store, 2, Record(1).data()).ok());
}

TEST(WriteBackQueue, AFullQueueWaitsForTheWriter) {
  MemoryRowStore store(8);
  WriteBackQueue q(2);
  for (int64_t k = 0; k < 50; ++k)
    ASSERT_TRUE(q.Push(&store, k, Record(static_cast<uint8_t>(k)).data()).ok());
  ASSERT_TRUE(q.Drain().ok());
  EXPECT_LE(q.max_depth(), 2u);
  EXPECT_EQ(q.written(), 50);
  for (int64_t k = 0; k < 50; ++k) EXPECT_EQ(StoredByte(store, k), k);
}

TEST(WriteBackQueue, PushManyQueuesInOrderAndTheNewestWins) {
  MemoryRowStore store(8);
  WriteBackQueue q(16);
  store.hold(true);
  const int64_t keys[] = {3, 4, 3};
  std::vector<uint8_t> records;
  for (uint8_t v : {1, 2, 5}) {
    const std::vector<uint8_t> r = Record(v);
    records.insert(records.end(), r.begin(), r.end());
  }
  size_t queued = 0;
  ASSERT_TRUE(q.PushMany(&store, keys, records.data(), 3, &queued).ok());
  EXPECT_EQ(queued, 3u);
  EXPECT_EQ(q.depth(), 2u);
  uint8_t out[8] = {};
  ASSERT_TRUE(q.Find(&store, 3, out));
  EXPECT_EQ(out[0], 5);
  store.hold(false);
  ASSERT_TRUE(q.Drain().ok());
  EXPECT_EQ(StoredByte(store, 3), 5);
  EXPECT_EQ(StoredByte(store, 4), 2);
}

TEST(WriteBackQueue, PushManyWaitsForRoomRecordByRecordAndStopsAtAnError) {
  MemoryRowStore store(8);
  {
    // Fifty records through a queue of two: each waits for room, none is lost.
    WriteBackQueue q(2);
    std::vector<int64_t> keys;
    std::vector<uint8_t> records;
    for (int64_t k = 0; k < 50; ++k) {
      keys.push_back(k);
      const std::vector<uint8_t> r = Record(static_cast<uint8_t>(k + 1));
      records.insert(records.end(), r.begin(), r.end());
    }
    size_t queued = 0;
    ASSERT_TRUE(q.PushMany(&store, keys.data(), records.data(), keys.size(), &queued).ok());
    EXPECT_EQ(queued, 50u);
    ASSERT_TRUE(q.Drain().ok());
    EXPECT_LE(q.max_depth(), 2u);
    for (int64_t k = 0; k < 50; ++k) EXPECT_EQ(StoredByte(store, k), k + 1);
  }
  // A write that fails while the push waits for room: the push stops there and says how many
  // records it queued; those stay findable, the others were never queued.
  MemoryRowStore failing(8);
  failing.set_fail(true);
  WriteBackQueue q(2);
  const int64_t keys[] = {10, 11, 12, 13, 14};
  std::vector<uint8_t> records;
  for (uint8_t v = 1; v <= 5; ++v) {
    const std::vector<uint8_t> r = Record(v);
    records.insert(records.end(), r.begin(), r.end());
  }
  size_t queued = 99;
  const Status s = q.PushMany(&failing, keys, records.data(), 5, &queued);
  EXPECT_EQ(s.code(), Code::kIo) << s.message();
  EXPECT_EQ(queued, 2u);
  uint8_t out[8] = {};
  ASSERT_TRUE(q.Find(&failing, 10, out));
  EXPECT_EQ(out[0], 1);
  ASSERT_TRUE(q.Find(&failing, 11, out));
  EXPECT_EQ(out[0], 2);
  EXPECT_FALSE(q.Find(&failing, 12, out));
  // Later pushes report the error and queue nothing.
  EXPECT_EQ(q.PushMany(&failing, keys + 2, records.data() + 16, 3, &queued).code(), Code::kIo);
  EXPECT_EQ(queued, 0u);
  EXPECT_FALSE(q.Find(&failing, 12, out));
}

}  // namespace
}  // namespace shardrec::embedding::tiered
