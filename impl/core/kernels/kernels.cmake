# The pooled kernel (kernels/pooled.h) per instruction-set level: the library is built for
# baseline x86-64; only pooled_avx2.cc and pooled_avx512.cc are compiled for AVX2 and AVX-512,
# and pooled_select.cc picks a level at run time. Never -mfma: a fused multiply-add rounds
# differently from the other levels, and every level must give the same bits.
set(SHARDREC_CORE_KERNELS_DIR ${CMAKE_CURRENT_LIST_DIR})
list(APPEND SHARDREC_CORE_SOURCES kernels/pooled_baseline.cc kernels/pooled_select.cc)
set(SHARDREC_HAVE_X86_KERNEL_LEVELS 0)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(SHARDREC_HAVE_X86_KERNEL_LEVELS 1)
  list(APPEND SHARDREC_CORE_SOURCES kernels/pooled_avx2.cc kernels/pooled_avx512.cc)
endif()

# Tests and the modules that call the levels by name need to know whether there are several.
set(SHARDREC_HAVE_X86_KERNEL_LEVELS ${SHARDREC_HAVE_X86_KERNEL_LEVELS} CACHE INTERNAL
    "Whether the pooled kernel is built per x86-64 level")

function(shardrec_core_kernels_flags target)
  set_source_files_properties(${SHARDREC_CORE_KERNELS_DIR}/pooled_baseline.cc
    TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS "-O3;-ffp-contract=off")
  if(SHARDREC_HAVE_X86_KERNEL_LEVELS)
    set_source_files_properties(${SHARDREC_CORE_KERNELS_DIR}/pooled_avx2.cc
      TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS "-O3;-mavx2;-mf16c;-ffp-contract=off")
    set_source_files_properties(${SHARDREC_CORE_KERNELS_DIR}/pooled_avx512.cc
      TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-O3;-mavx512f;-mavx512bw;-mavx512vl;-ffp-contract=off")
  endif()
  target_compile_definitions(${target}
    PUBLIC SHARDREC_HAVE_X86_KERNEL_LEVELS=${SHARDREC_HAVE_X86_KERNEL_LEVELS})
endfunction()
