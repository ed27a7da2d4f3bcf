/**
 * @file shardrec.hpp
 * Header-only C++20 layer over the libshardrec C API, for C++ services: RAII handles (move-only,
 * destroyed in their destructor), failures thrown as shardrec::Error carrying the status code
 * and the library's message, and std::span for caller buffers (never copied).
 *
 * Everything here is inline and calls only the stable C functions of shardrec.h, so the header
 * adds no ABI of its own: a program built against it links libshardrec like a C program.
 * The plain C structs (shardrec_table_config_t, shardrec_topology_t, ...) are used as they are;
 * start them from their _INIT macros.
 *
 * The whole C API is covered, one header per area under shardrec/cpp/, all included here:
 * Error and the device queries (error.hpp), Comm (comm.hpp), Plan and the topology helpers
 * (plan.hpp), EmbeddingCollection with its dynamic-table statistics and deltas and checkpoints
 * (embedding.hpp), Mesh (mesh.hpp), Ddp and Fsdp (ddp.hpp), Mlp, Dcn, DenseOptimizer and the
 * DLRM helpers (dense.hpp), Inference and InferenceSnapshot (inference.hpp). Each class is
 * move-only and its get() gives the C handle for a call a C++ caller makes directly. A
 * moved-from (or default-constructed) object used again throws Error(SHARDREC_EINVAL) saying so.
 *
 * Thread-safety is that of the C objects: a Plan, an Inference and its snapshots, and a layer's
 * infer() may be shared between threads; a Comm, an EmbeddingCollection, a Mesh, a Ddp, an Fsdp
 * and a layer's training calls are used by one thread at a time. Error messages are copied on
 * the calling thread right after the failing call, so they are never another thread's.
 */
#ifndef SHARDREC_SHARDREC_HPP_
#define SHARDREC_SHARDREC_HPP_

#if __cplusplus < 202002L
#error "shardrec.hpp needs C++20 (std::span); from older C++ use the C API (shardrec.h)"
#endif

#include "shardrec/cpp/comm.hpp"
#include "shardrec/cpp/ddp.hpp"
#include "shardrec/cpp/dense.hpp"
#include "shardrec/cpp/embedding.hpp"
#include "shardrec/cpp/error.hpp"
#include "shardrec/cpp/inference.hpp"
#include "shardrec/cpp/mesh.hpp"
#include "shardrec/cpp/plan.hpp"
#include "shardrec/shardrec.h"

#endif  // SHARDREC_SHARDREC_HPP_
