# CPU embedding kernels; included by impl/embedding/CMakeLists.txt before shardrec_embedding is made.
list(APPEND SHARDREC_EMBEDDING_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/lookup_cpu.cc
  ${CMAKE_CURRENT_LIST_DIR}/row_group.cc
  ${CMAKE_CURRENT_LIST_DIR}/backward_cpu.cc)
