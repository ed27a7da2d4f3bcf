# The CUDA twins of the embedding kernels (this folder): a static library linked whole into
# libshardrec_cuda.so (and into the GPU tests and benchmarks), built for every architecture of
# CMAKE_CUDA_ARCHITECTURES (80 and 90 by default) with the compile gates of issue 11: a register
# spill or any local-memory use is a build error (ptxas -warn-spills -warn-lmem-usage -Werror).
# Deterministic builds (the default) compile device code without FMA contraction, so the kernels
# give the CPU twins' bits; SHARDREC_DETERMINISTIC_FP=OFF lets nvcc contract (within 1e-6
# relative, tests/impl/embedding/kernels/simt_contract_test.cc).
set(SHARDREC_DETERMINISTIC_FP ON CACHE BOOL "GPU kernels bit-identical to the CPU twins (no FMA contraction)")
set(SHARDREC_CUDA_GATE_FLAGS -Xptxas=-warn-spills,-warn-lmem-usage,-Werror)
# CMake 3.25 knows no C++20 flag for nvcc 13; the kernels' headers need it (std::span).
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
add_library(shardrec_embedding_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/lookup.cu
  ${CMAKE_CURRENT_LIST_DIR}/backward.cu
  ${CMAKE_CURRENT_LIST_DIR}/route.cu
  ${CMAKE_CURRENT_LIST_DIR}/mean.cu
  ${CMAKE_CURRENT_LIST_DIR}/unpack.cu
  ${CMAKE_CURRENT_LIST_DIR}/grad.cu
  ${CMAKE_CURRENT_LIST_DIR}/dp.cu
  ${CMAKE_CURRENT_LIST_DIR}/stats.cu)
target_include_directories(shardrec_embedding_cuda PUBLIC ${PROJECT_SOURCE_DIR}
  ${PROJECT_BINARY_DIR})
target_link_libraries(shardrec_embedding_cuda PUBLIC shardrec_optim shardrec_core CUDA::cudart)
target_compile_options(shardrec_embedding_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:${SHARDREC_CUDA_GATE_FLAGS} -Xcompiler=-Wall,-Wextra
  $<IF:$<BOOL:${SHARDREC_DETERMINISTIC_FP}>,--fmad=false,--fmad=true>>)
set_target_properties(shardrec_embedding_cuda PROPERTIES
  CUDA_STANDARD 20
  CUDA_EXTENSIONS OFF
  POSITION_INDEPENDENT_CODE ON
  CUDA_RUNTIME_LIBRARY Shared
  CXX_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
# Whole archive: the function table (impl/cuda_plugin/embedding_entries.cc) calls the twins, and
# the whole fatbin (every kernel instantiation) must be in the plugin all the same.
set_property(GLOBAL APPEND PROPERTY SHARDREC_CUDA_PLUGIN_DEPS
  "$<LINK_LIBRARY:WHOLE_ARCHIVE,shardrec_embedding_cuda>")
