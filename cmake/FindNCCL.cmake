# Finds NCCL (it ships no CMake or pkg-config file). Defines NCCL_FOUND and the target NCCL::nccl.
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda
  PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL DEFAULT_MSG NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl SHARED IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
