// SmallTmpfs: a tmpfs of a few megabytes mounted over a fresh directory, for the tests of a full
// disk (they run as root in CI; where mount is not permitted, mounted() is false and error() says
// why, and the test skips with it). Unmounted when it goes; the directory stays for FreshDir's
// clean-up.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tests/support/temp_dirs.h"

namespace shardrec::testing {

class SmallTmpfs {
 public:
  // `size` is mount's option, "size=512k" for example.
  SmallTmpfs(const std::string& tag, const char* size) : dir_(FreshDir(tag)) {
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, size) != 0) {
      error_ = std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string error_;
  bool mounted_ = false;
};

}  // namespace shardrec::testing
