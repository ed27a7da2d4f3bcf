/* A stand-in for a libshardrec_mpi.so from another release: it speaks plugin ABI 99, so the
 * loader must refuse it before asking for its table (mpi_plugin_loader_test.cc). */
#include <stdint.h>

__attribute__((visibility("default"))) uint32_t shardrec_mpi_plugin_abi_version(void) {
  return 99u;
}
