// Runs a check in a fresh copy of the test binary. The plugin loader caches its first answer
// for the life of a process (and fork would copy that cache), so first-call behaviour and
// SHARDREC_CUDA_PLUGIN overrides need a newly exec'ed process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardrec::testing {

using FreshChildFn = int (*)();

inline constexpr const char* kFreshChildEnv = "SHARDREC_TEST_FRESH_CHILD";

// Use from a namespace-scope initializer: when this process is the child started for `name`,
// runs `fn` before main() (so before anything touched the loader) and exits with its result.
inline int RegisterFreshChild(const char* name, FreshChildFn fn) {
  const char* which = std::getenv(kFreshChildEnv);
  if (which != nullptr && std::strcmp(which, name) == 0) {
    const int rc = fn();
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  return 0;
}

// Re-executes this binary as the child for `name`, with SHARDREC_CUDA_PLUGIN set to
// `plugin_env` when that is not null. Returns the child's exit code, or -1 if it crashed.
inline int RunFresh(const char* name, const char* plugin_env) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv(kFreshChildEnv, name, 1);
    if (plugin_env != nullptr) setenv("SHARDREC_CUDA_PLUGIN", plugin_env, 1);
    execl("/proc/self/exe", "/proc/self/exe", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace shardrec::testing
