# CPU embedding kernels; included by impl/embedding/CMakeLists.txt before shardrec_embedding is made.
list(APPEND SHARDREC_EMBEDDING_SOURCES
  kernels/lookup_cpu.cc
  kernels/row_group.cc
  kernels/backward_cpu.cc)
