# The layering rule of docs/design.md section 3, checked by reading every #include:
#  - an impl module includes only itself and the modules below it (table below);
#  - nothing in impl includes capi/ (the C layer sits on top);
#  - only the CUDA plugin (impl/cuda_plugin) and .cu files include CUDA, NCCL or cuBLAS headers;
#  - inside impl/embedding, the GPU collection (impl/embedding/gpu, its own static library) is
#    seen only by the engine factory, which picks the engine once; the rest of the module (the
#    host side) and every other module but the CUDA plugin never include it;
#  - checkpoints and 2D replicas (impl/checkpoint, impl/replica) see a collection only through the
#    storage seam (impl/embedding/storage/table_storage.h), never the collection's header;
#  - black-box tests (tests/capi), examples and bindings include public headers only.
# Run: cmake -DSOURCE_DIR=<repo> -P check_layers.cmake. Prints every violation, fails if any.
cmake_minimum_required(VERSION 3.25)

# Module -> the impl modules it may include (besides itself). Order: the levels of docs/design.md section 3.
set(allow_core "")
set(allow_store "core")
set(allow_optim "core")
# A plan names each table's optimizer, so sharding reads optim's config type (optim needs only
# core: no cycle).
set(allow_sharding "core;optim")
set(allow_comm "core")
set(allow_dense "core;optim")
set(allow_planner "core;sharding;optim")
set(allow_embedding "core;store;sharding;optim;comm")
set(allow_ddp "core;optim;comm;dense")
set(allow_replica "core;store;sharding;optim;comm;embedding")
set(allow_checkpoint "core;store;sharding;optim;comm;embedding;dense;ddp;replica")
# The plugin serves every module's CUDA twins behind the plain-C table.
# Serving reads checkpoints through their format and verified record reader, never the
# collection or a communicator.
set(allow_serving "core;store;sharding;checkpoint")
set(allow_cuda_plugin "core;sharding;optim;comm;dense;embedding;ddp")
set(modules core store optim sharding comm dense planner embedding ddp replica checkpoint serving cuda_plugin)

# The modules that see a collection only through the storage seam.
set(storage_seam_modules checkpoint replica)

# The one host-side file that may include impl/embedding/gpu/ (engine.h MakeEngine).
set(gpu_engine_factory "impl/embedding/engine_factory.cc")

set(cuda_header_regex "#include[ \t]*<(cuda|cuda_runtime|cuda_runtime_api|cuda_fp16|cuda_bf16|nccl|net|cublas_v2|cublasLt|cublas_api|driver_types)\\.h>")
set(violations "")

function(read_includes file out_var)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include")
  set(${out_var} "${lines}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE impl_files RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/impl/*.h ${SOURCE_DIR}/impl/*.cc ${SOURCE_DIR}/impl/*.cu ${SOURCE_DIR}/impl/*.cuh
  ${SOURCE_DIR}/impl/*.in)
foreach(rel IN LISTS impl_files)
  string(REGEX MATCH "^impl/([a-z_]+)/" _ ${rel})
  set(module ${CMAKE_MATCH_1})
  if(NOT module IN_LIST modules)
    list(APPEND violations "${rel}: module '${module}' has no layering rule in check_layers.cmake")
    continue()
  endif()
  read_includes(${SOURCE_DIR}/${rel} includes)
  foreach(line IN LISTS includes)
    if(line MATCHES "#include[ \t]*\"impl/([a-z_]+)/")
      set(dep ${CMAKE_MATCH_1})
      if(NOT dep STREQUAL module AND NOT dep IN_LIST allow_${module})
        list(APPEND violations "${rel}: impl/${module} may not include impl/${dep} (${line})")
      endif()
    elseif(line MATCHES "#include[ \t]*[\"<](capi/|shardrec/)")
      list(APPEND violations "${rel}: impl may not include the C API (${line})")
    endif()
    if(line MATCHES "#include[ \t]*\"impl/embedding/collection\\.h\"" AND module IN_LIST storage_seam_modules)
      list(APPEND violations
           "${rel}: impl/${module} sees a collection through impl/embedding/storage/table_storage.h, not impl/embedding/collection.h (${line})")
    endif()
    if(line MATCHES "#include[ \t]*\"impl/embedding/gpu/" AND NOT rel MATCHES "^impl/embedding/gpu/"
       AND NOT rel STREQUAL gpu_engine_factory AND NOT module STREQUAL "cuda_plugin")
      list(APPEND violations
           "${rel}: only ${gpu_engine_factory} (and the GPU collection itself) includes impl/embedding/gpu (${line})")
    endif()
    if(line MATCHES "${cuda_header_regex}" AND NOT module STREQUAL "cuda_plugin"
       AND NOT rel MATCHES "\\.cuh?$")
      list(APPEND violations "${rel}: only the CUDA plugin and .cu files include CUDA (${line})")
    endif()
  endforeach()
endforeach()

# Outside impl: black-box code sees public headers only; nothing but the plugin sees CUDA.
foreach(dir tests/capi examples bindings)
  file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
    ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.hpp ${SOURCE_DIR}/${dir}/*.c
    ${SOURCE_DIR}/${dir}/*.cc ${SOURCE_DIR}/${dir}/*.i)
  foreach(rel IN LISTS files)
    if(rel MATCHES "/target/|swig_shardrec_wrap\\.c$")
      continue()  # build output, and the generated SWIG wrapper (checked through its input)
    endif()
    read_includes(${SOURCE_DIR}/${rel} includes)
    foreach(line IN LISTS includes)
      if(line MATCHES "#include[ \t]*\"(impl|capi/src)/")
        list(APPEND violations "${rel}: black-box code may include public headers only (${line})")
      endif()
      if(line MATCHES "${cuda_header_regex}")
        list(APPEND violations "${rel}: only the CUDA plugin includes CUDA (${line})")
      endif()
    endforeach()
  endforeach()
endforeach()

# White-box tests of module m see m, what m may include, and the test helpers.
file(GLOB test_modules RELATIVE ${SOURCE_DIR}/tests/impl ${SOURCE_DIR}/tests/impl/*)
foreach(module IN LISTS test_modules)
  if(NOT IS_DIRECTORY ${SOURCE_DIR}/tests/impl/${module})
    continue()
  endif()
  file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/tests/impl/${module}/*.h
       ${SOURCE_DIR}/tests/impl/${module}/*.cc)
  foreach(rel IN LISTS files)
    read_includes(${SOURCE_DIR}/${rel} includes)
    foreach(line IN LISTS includes)
      if(line MATCHES "#include[ \t]*\"impl/([a-z_]+)/")
        set(dep ${CMAKE_MATCH_1})
        if(NOT dep STREQUAL module AND NOT dep IN_LIST allow_${module})
          list(APPEND violations "${rel}: tests of impl/${module} may not include impl/${dep}")
        endif()
      elseif(line MATCHES "#include[ \t]*\"capi/src/")
        list(APPEND violations "${rel}: white-box tests do not include capi/src (${line})")
      endif()
    endforeach()
  endforeach()
endforeach()

list(LENGTH violations n)
if(n GREATER 0)
  foreach(v IN LISTS violations)
    message("layering: ${v}")
  endforeach()
  message(FATAL_ERROR "layering: ${n} violation(s); the rules are in ${CMAKE_CURRENT_LIST_FILE}")
endif()
list(LENGTH impl_files checked)
message("layering: ${checked} impl files and the black-box trees follow the rules")
