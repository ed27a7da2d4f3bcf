list(APPEND SHARDREC_COMM_SOURCES nccl/nccl_bridge.cc)
