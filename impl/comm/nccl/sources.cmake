list(APPEND SHARDREC_COMM_SOURCES nccl/nccl_backend_stub.cc)
