// Finding, opening and vetting libshardrec_mpi.so, once per process, on the first request for an
// MPI communicator. A host without MPI never loads it and gets kUnsupported with the reason.
#pragma once

#include <string>

#include "impl/comm/mpi/mpi_plugin_abi.h"
#include "impl/core/status.h"

namespace shardrec::comm::mpi {

// The plugin's table, loaded on first use (SHARDREC_MPI_PLUGIN names a file explicitly; else
// the folder of libshardrec.so, then the loader's search path). The outcome is cached; every
// failure is kUnsupported with a message naming what was tried.
Status GetMpiPlugin(const shardrec_mpi_plugin_table_t** out);

// Opens one file and checks its ABI version and table (exposed for tests).
Status LoadMpiPlugin(const std::string& path, const shardrec_mpi_plugin_table_t** out);

// A plugin status as a Status (message kept, code as the plugin gave it).
Status FromMpiPlugin(int32_t rc, const shardrec_plugin_status_t& status);

}  // namespace shardrec::comm::mpi
