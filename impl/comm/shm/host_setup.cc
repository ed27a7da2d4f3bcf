#include "impl/comm/shm/host_setup.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "impl/comm/rendezvous/host_identity.h"
#include "impl/comm/shm/liveness.h"
#include "impl/core/check.h"

namespace shardrec::comm::shm {

namespace {

constexpr size_t kVoteBytes = 256;  // byte 0: wants shared memory; then the host identity
constexpr size_t kNameBytes = 64;

// What rank 0 broadcasts: whether it created the segment, and how to find and check it.
struct Offer {
  uint64_t ok;
  uint64_t cookie;
  uint64_t bytes;
  char name[kNameBytes];
};

uint64_t Mark(uint64_t cookie, int rank) {
  return cookie ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank + 1));
}

// Whether every rank agrees (min over ranks of `mine`), through comm.
Status AllAgree(Communicator& comm, bool mine, bool* all) {
  int32_t v = mine ? 1 : 0;
  SR_RETURN_IF_ERROR(comm.AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kMin));
  *all = v == 1;
  return Status::Ok();
}

void Say(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

}  // namespace

bool EnabledByEnv() {
  const char* v = std::getenv("SHARDREC_SHM");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

Status SetUpHostSegment(Communicator& comm, std::unique_ptr<HostSegment>* out, std::string* why) {
  out->reset();
  const int n = comm.Size();
  const int rank = comm.Rank();
  if (n < 2 || n > kMaxRanks) {  // every rank knows the size: no exchange needed to agree
    Say(why, n < 2 ? "a single rank" : "more ranks than the transport serves");
    return Status::Ok();
  }
  // 1. One host, and everyone willing.
  std::vector<uint8_t> mine(kVoteBytes, 0);
  mine[0] = EnabledByEnv() && comm.device().is_host() ? 1 : 0;
  const std::string id = HostIdentity();
  std::memcpy(mine.data() + 1, id.data(), std::min(id.size(), kVoteBytes - 2));
  std::vector<uint8_t> votes(kVoteBytes * static_cast<size_t>(n));
  std::vector<size_t> counts(static_cast<size_t>(n), kVoteBytes);
  SR_RETURN_IF_ERROR(comm.AllGatherV(mine.data(), kVoteBytes, votes.data(), counts, DType::kUInt8));
  for (int r = 0; r < n; ++r) {
    const uint8_t* v = votes.data() + static_cast<size_t>(r) * kVoteBytes;
    if (v[0] != 1) {
      Say(why, "disabled on a rank (SHARDREC_SHM=0 or a device communicator)");
      return Status::Ok();
    }
    if (std::memcmp(v + 1, mine.data() + 1, kVoteBytes - 1) != 0) {
      Say(why, "the ranks are on more than one host");
      return Status::Ok();
    }
  }
  // 2. Rank 0 creates and offers.
  const Geometry g = Geometry::For(n);
  auto host = std::make_unique<HostSegment>();
  Offer offer{};
  Status made;
  if (rank == 0) {
    std::string name;
    made = Segment::Create(g.Bytes(), &name, &host->segment);
    if (made.ok() && name.size() < kNameBytes) {
      std::random_device rd;
      offer.ok = 1;
      offer.cookie = ((static_cast<uint64_t>(rd()) << 32) ^ rd()) | 1;
      offer.bytes = g.Bytes();
      std::memcpy(offer.name, name.data(), name.size());
      auto* h = reinterpret_cast<SegmentHeader*>(host->segment->data());
      *h =
          SegmentHeader{offer.cookie, offer.bytes, static_cast<uint32_t>(n), g.slots, g.slot_bytes};
    }
  }
  SR_RETURN_IF_ERROR(comm.Broadcast(&offer, sizeof(offer), DType::kUInt8, 0));
  if (offer.ok != 1) {
    Say(why, StrCat("rank 0 could not create the segment: ", made.ToString()));
    return Status::Ok();
  }
  // 3. Everyone maps, checks the cookie and leaves its mark; then the name goes.
  bool mapped = true;
  if (rank != 0) {
    offer.name[kNameBytes - 1] = '\0';
    mapped = offer.bytes == g.Bytes() &&
             Segment::Open(offer.name, offer.bytes, &host->segment).ok() &&
             reinterpret_cast<SegmentHeader*>(host->segment->data())->cookie == offer.cookie;
  }
  if (mapped) {
    host->layout = Layout(host->segment->data(), g);
    const ProcessId self = SelfProcess();
    RankLine* line = host->layout.rank(rank);
    line->pid = self.pid;
    line->pid_ns = self.pid_ns;
    line->start_ticks = self.start_ticks;
    Shared(&host->layout.rank(rank)->mark)
        .store(Mark(offer.cookie, rank), std::memory_order_release);
  }
  bool all = false;
  const Status agreed = AllAgree(comm, mapped, &all);
  if (rank == 0) host->segment->Unlink();
  SR_RETURN_IF_ERROR(agreed);
  if (!all) {
    Say(why, "a rank could not map the segment");
    return Status::Ok();
  }
  // 4. The marks prove that every rank maps the same memory.
  bool shared = true;
  for (int r = 0; r < n; ++r) {
    if (Shared(&host->layout.rank(r)->mark).load(std::memory_order_acquire) !=
        Mark(offer.cookie, r))
      shared = false;
  }
  SR_RETURN_IF_ERROR(AllAgree(comm, shared, &all));
  if (!all) {
    Say(why, "the ranks' mappings are not the same memory (private /dev/shm mounts?)");
    return Status::Ok();
  }
  *out = std::move(host);
  return Status::Ok();
}

}  // namespace shardrec::comm::shm
