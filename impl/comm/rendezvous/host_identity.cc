// Host identity from the boot id and the network namespace (host_identity.h).
#include "impl/comm/rendezvous/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

// Bytes each rank contributes to the gather: the identity text, NUL-padded.
constexpr size_t kIdentityBytes = 160;

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

std::string HostIdentity() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  struct stat ns {};
  if (in && std::getline(in, boot) && !boot.empty() && ::stat("/proc/self/ns/net", &ns) == 0) {
    return StrCat("boot ", boot, " netns ", static_cast<uint64_t>(ns.st_dev), ":",
                  static_cast<uint64_t>(ns.st_ino));
  }
  return StrCat("host ", HostName());
}

Status DeriveLocalPosition(Communicator& c, int32_t* local_rank, int32_t* local_size) {
  const std::string id = HostIdentity();
  std::vector<uint8_t> mine(kIdentityBytes, 0);
  std::memcpy(mine.data(), id.data(), std::min(id.size(), kIdentityBytes - 1));
  const auto n = static_cast<size_t>(c.Size());
  std::vector<uint8_t> all(n * kIdentityBytes);
  std::vector<size_t> counts(n, kIdentityBytes);
  SR_RETURN_IF_ERROR(c.AllGatherV(mine.data(), kIdentityBytes, all.data(), counts, DType::kUInt8));
  int32_t lr = 0, ls = 0;
  for (size_t r = 0; r < n; ++r) {
    if (std::memcmp(all.data() + r * kIdentityBytes, mine.data(), kIdentityBytes) != 0) continue;
    if (static_cast<int>(r) < c.Rank()) ++lr;
    ++ls;
  }
  *local_rank = lr;
  *local_size = ls;
  return Status::Ok();
}

}  // namespace shardrec::comm
