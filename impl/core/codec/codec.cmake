# The codec passes of the 16-bit row formats (codec/codec.h): the library is built for baseline
# x86-64; only codec_avx2.cc is compiled for AVX2 + F16C, and codec_select.cc picks a level at run
# time.
# -O3 and -fno-trapping-math let GCC vectorise the half.h conversions (it may then evaluate both
# sides of their selects; nothing reads the floating-point exception flags). No contraction is
# involved (the passes are conversions and one add), and the values are those of the scalar code.
set(SHARDREC_CODEC_DIR ${CMAKE_CURRENT_LIST_DIR})
list(APPEND SHARDREC_CORE_SOURCES codec/codec_baseline.cc codec/codec_select.cc)
set(SHARDREC_HAVE_X86_CODEC_LEVELS 0)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(SHARDREC_HAVE_X86_CODEC_LEVELS 1)
  list(APPEND SHARDREC_CORE_SOURCES codec/codec_avx2.cc)
endif()

# Tests that compare the levels need to know whether there are several.
set(SHARDREC_HAVE_X86_CODEC_LEVELS ${SHARDREC_HAVE_X86_CODEC_LEVELS} CACHE INTERNAL
    "Whether the row codec is built per x86-64 level")

function(shardrec_codec_flags target)
  set_source_files_properties(${SHARDREC_CODEC_DIR}/codec_baseline.cc TARGET_DIRECTORY ${target}
    PROPERTIES COMPILE_OPTIONS "-O3;-ffp-contract=off;-fno-trapping-math")
  if(SHARDREC_HAVE_X86_CODEC_LEVELS)
    set_source_files_properties(${SHARDREC_CODEC_DIR}/codec_avx2.cc TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-O3;-mavx2;-mf16c;-ffp-contract=off;-fno-trapping-math")
  endif()
  target_compile_definitions(${target}
    PRIVATE SHARDREC_HAVE_X86_CODEC_LEVELS=${SHARDREC_HAVE_X86_CODEC_LEVELS})
endfunction()
