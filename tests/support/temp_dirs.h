// FreshDir(tag): a new empty directory for one test's files under gtest's temp dir, named after
// the process and the tag and unique per call, and removed after the program's last test (by the
// process that runs the tests: never by a forked rank that exits while its parent still reads
// the files). Thread-safe.
#pragma once

#include <string>

namespace shardrec::testing {

std::string FreshDir(const std::string& tag);

}  // namespace shardrec::testing
