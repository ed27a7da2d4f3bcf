# The per-instruction-set kernel sources (kernels/isa) and their flags. The library is built for
# baseline x86-64; only these files are compiled for AVX2 and AVX-512, and the lookups and the
# fused backward pick one at run time. Never -mfma: a fused multiply-add rounds differently from the other levels.
set(SHARDREC_KERNEL_ISA_DIR ${CMAKE_CURRENT_LIST_DIR})
# The lookups' bag sums are core's pooled kernel (impl/core/kernels, bag_sum.h), built there.
set(SHARDREC_KERNEL_ISA_SOURCES ${SHARDREC_KERNEL_ISA_DIR}/fused_rows_baseline.cc)
set(SHARDREC_HAVE_X86_LEVELS 0)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(SHARDREC_HAVE_X86_LEVELS 1)
  list(APPEND SHARDREC_KERNEL_ISA_SOURCES ${SHARDREC_KERNEL_ISA_DIR}/fused_rows_avx2.cc
       ${SHARDREC_KERNEL_ISA_DIR}/fused_rows_avx512.cc)
endif()

# Per-file flags and the level macro for `target`, which compiles the sources above. A test
# target's precompiled header is built without these flags, so these files do without it.
function(shardrec_kernel_isa_flags target)
  set_source_files_properties(${SHARDREC_KERNEL_ISA_SOURCES} TARGET_DIRECTORY ${target}
    PROPERTIES COMPILE_OPTIONS "-ffp-contract=off" SKIP_PRECOMPILE_HEADERS ON)
  if(SHARDREC_HAVE_X86_LEVELS)
    set_source_files_properties(${SHARDREC_KERNEL_ISA_DIR}/fused_rows_avx2.cc TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c;-ffp-contract=off")
    set_source_files_properties(${SHARDREC_KERNEL_ISA_DIR}/fused_rows_avx512.cc TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-ffp-contract=off")
  endif()
  target_compile_definitions(${target} PRIVATE SHARDREC_HAVE_X86_LEVELS=${SHARDREC_HAVE_X86_LEVELS})
endfunction()
