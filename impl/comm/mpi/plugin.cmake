# libshardrec_mpi.so: the MPI backend plugin, linked against the system's MPI (Debian:
# libopenmpi-dev; MPICH works the same way). Optional: without an MPI the plugin is not built
# and creating an MPI communicator returns SHARDREC_EUNSUPPORTED. libshardrec.so dlopens it on
# the first request; it exports only the two symbols of mpi_plugin_abi.h.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND)
  message(STATUS "MPI not found: the MPI backend plugin (libshardrec_mpi.so) is not built")
  return()
endif()
message(STATUS "MPI ${MPI_C_VERSION}: building the MPI backend plugin (libshardrec_mpi.so)")
add_library(shardrec_mpi SHARED ${CMAKE_CURRENT_LIST_DIR}/plugin/mpi_plugin.cc
  ${CMAKE_CURRENT_LIST_DIR}/plugin/plugin_requests.cc)
target_include_directories(shardrec_mpi PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(shardrec_mpi PRIVATE MPI::MPI_C ${CMAKE_DL_LIBS})
target_compile_options(shardrec_mpi PRIVATE ${SHARDREC_WARNINGS})
# The C bindings only: mpi.h would otherwise pull in the removed MPI C++ bindings when compiled
# as C++ (Open MPI and MPICH each have a switch).
target_compile_definitions(shardrec_mpi PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
set_target_properties(shardrec_mpi PROPERTIES
  OUTPUT_NAME shardrec_mpi
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  # Next to libshardrec.so, where the loader looks first (build tree and install tree alike).
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/capi
  LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/plugin/shardrec_mpi.map
  INSTALL_RPATH "$ORIGIN")
target_link_options(shardrec_mpi PRIVATE
  -Wl,--version-script=${CMAKE_CURRENT_LIST_DIR}/plugin/shardrec_mpi.map)
# As for libshardrec.so: clang's sanitizer runtimes live in the executable, so a sanitized shared
# library has undefined runtime symbols by design.
if(NOT (CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND (SHARDREC_SANITIZE OR SHARDREC_BUILD_FUZZ)))
  target_link_options(shardrec_mpi PRIVATE -Wl,--no-undefined)
endif()
shardrec_install_plugin(shardrec_mpi)
