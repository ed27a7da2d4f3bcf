/**
 * @file cpp/comm.hpp
 * shardrec::Comm: a communicator (comm.h). Included by shardrec.hpp.
 */
#ifndef SHARDREC_CPP_COMM_HPP_
#define SHARDREC_CPP_COMM_HPP_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardrec/cpp/error.hpp"

namespace shardrec {

/** A communicator (one rank of a group). Move-only; destroyed with the object. */
class Comm {
 public:
  Comm() = default;
  /** Takes ownership of a handle from the C API. */
  explicit Comm(shardrec_comm_t* handle) : h_(handle) {}

  /** A rendezvous token, created by rank 0 and shipped to every rank by the host program. */
  static shardrec_unique_id_t unique_id() {
    shardrec_unique_id_t id;
    check(shardrec_comm_unique_id_create(&id));
    return id;
  }

  /** Joins the group of @p world_size ranks identified by @p id as @p rank (collective). */
  static Comm create(const shardrec_unique_id_t& id, int32_t world_size, int32_t rank,
                     const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create(&c, &id, world_size, rank, options));
    return Comm(c);
  }

  /** @p n ranks inside this process (each then used by its own thread). */
  static std::vector<Comm> local_group(int32_t n,
                                       const shardrec_comm_options_t* options = nullptr) {
    std::vector<shardrec_comm_t*> raw(n > 0 ? static_cast<size_t>(n) : 0, nullptr);
    check(shardrec_comm_create_local_group(raw.data(), n, options));
    std::vector<Comm> out;
    out.reserve(raw.size());
    for (shardrec_comm_t* c : raw) out.emplace_back(c);
    return out;
  }

  /**
   * Under a cluster launcher (torchrun, mpirun, srun): joins the group its variables describe,
   * with no unique id to ship (collective; shardrec_comm_create_from_env).
   */
  static Comm from_env(const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create_from_env(&c, options));
    return Comm(c);
  }

  /**
   * Joins a group whose rank 0 listens at @p addr : @p port, handed in code rather than by
   * launcher variables (Ray Train and the like; collective; shardrec_comm_create_tcp).
   */
  static Comm tcp(const std::string& addr, int32_t port, int32_t rank, int32_t world_size,
                  const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(
        shardrec_comm_create_tcp(&c, detail::c_str(addr, "addr"), port, rank, world_size, options));
    return Comm(c);
  }

  /**
   * The MPI backend over MPI_COMM_WORLD (@p mpi_comm_fortran 0) or the host's communicator given
   * by its MPI_Comm_c2f() handle (collective; shardrec_comm_create_mpi).
   */
  static Comm mpi(int64_t mpi_comm_fortran = 0, const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create_mpi(&c, mpi_comm_fortran, options));
    return Comm(c);
  }

  /**
   * Joins a group whose rendezvous runs through the host's key-value store (collective;
   * shardrec_comm_create_with_store). @p callbacks.payload must outlive every communicator made
   * with it, splits included.
   */
  static Comm with_store(const shardrec_store_callbacks_t& callbacks, int32_t world_size,
                         int32_t rank, const shardrec_comm_options_t* options = nullptr) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_create_with_store(&c, &callbacks, world_size, rank, options));
    return Comm(c);
  }

  int32_t rank() const {
    int32_t r = 0;
    check(shardrec_comm_rank(&r, h()));
    return r;
  }

  /** This rank's index among the ranks on its host (shardrec_comm_local_rank). */
  int32_t local_rank() const {
    int32_t r = 0;
    check(shardrec_comm_local_rank(&r, h()));
    return r;
  }

  /** The number of ranks on this rank's host (shardrec_comm_local_size). */
  int32_t local_size() const {
    int32_t n = 0;
    check(shardrec_comm_local_size(&n, h()));
    return n;
  }

  /**
   * Tears down this communicator's connections and those split from it (shardrec_comm_abort).
   * The one call that may run from another thread while a call on this communicator (or a
   * collection's step over it) is blocked: that call then throws SHARDREC_EABORTED. Keep the
   * Comm alive until the blocked call has returned.
   */
  void abort() const { check(shardrec_comm_abort(h())); }

  /** Throws the error that poisoned this communicator (a timeout, a peer's failure, an abort). */
  void check_async_error() const { check(shardrec_comm_async_error(h())); }

  int32_t size() const {
    int32_t s = 0;
    check(shardrec_comm_size(&s, h()));
    return s;
  }

  void barrier() { check(shardrec_comm_barrier(h())); }

  /**
   * recv = op (SHARDREC_REDUCE_*) over the ranks of send, float elements, host memory.
   * Collective. Spans of different sizes are refused (Error, SHARDREC_EINVAL) after this rank
   * has still met the others in the C call's agreement (comm.h), so they fail at once naming
   * it instead of waiting out their timeout.
   */
  void allreduce(std::span<const float> send, std::span<float> recv,
                 int32_t op = SHARDREC_REDUCE_SUM) {
    if (send.size() != recv.size()) {
      // NULL buffers with a count of 1: refused by C inside its agreement, touching nothing.
      (void)shardrec_comm_allreduce(h(), nullptr, nullptr, 1, SHARDREC_DTYPE_FLOAT32, op, nullptr);
      throw Error(SHARDREC_EINVAL, "allreduce: send has " + std::to_string(send.size()) +
                                       " elements, recv " + std::to_string(recv.size()));
    }
    check(shardrec_comm_allreduce(h(), send.data(), recv.data(), send.size(),
                                  SHARDREC_DTYPE_FLOAT32, op, nullptr));
  }

  /**
   * A new communicator over the ranks that pass the same @p color, ordered by @p key then rank
   * (collective; shardrec_comm_split). A negative color joins no group: the result is empty.
   */
  Comm split(int32_t color, int32_t key) {
    shardrec_comm_t* c = nullptr;
    check(shardrec_comm_split(&c, h(), color, key));
    return Comm(c);
  }

  /** The timeout of every later call on this communicator, in milliseconds. */
  void set_timeout(int64_t timeout_ms) { check(shardrec_comm_set_timeout(h(), timeout_ms)); }

  /** Copies @p buf of rank @p root into @p buf of every rank (collective, host memory). */
  void broadcast(std::span<float> buf, int32_t root) {
    check(shardrec_comm_broadcast(h(), buf.data(), buf.size(), SHARDREC_DTYPE_FLOAT32, root,
                                  nullptr));
  }

  /**
   * Every rank's @p send, in rank order, into @p recv (size() x send.size() floats; collective).
   * A @p recv of another size is refused by C inside its agreement, as for allreduce.
   */
  void allgather(std::span<const float> send, std::span<float> recv) {
    if (recv.size() != send.size() * static_cast<size_t>(size())) {
      (void)shardrec_comm_allgather(h(), nullptr, nullptr, 1, SHARDREC_DTYPE_FLOAT32, nullptr);
      throw Error(SHARDREC_EINVAL, "allgather: recv has " + std::to_string(recv.size()) +
                                       " elements, want size() x " + std::to_string(send.size()));
    }
    check(shardrec_comm_allgather(h(), send.data(), recv.data(), send.size(),
                                  SHARDREC_DTYPE_FLOAT32, nullptr));
  }

  /**
   * Binds the calling thread to the CPUs of the NUMA node for this rank's local rank and returns
   * the node (shardrec_comm_bind_local_numa; SHARDREC_EUNSUPPORTED without hwloc).
   */
  int32_t bind_local_numa() {
    int32_t node = -1;
    check(shardrec_comm_bind_local_numa(&node, h()));
    return node;
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_comm_t* get() const noexcept { return h_.get(); }

  /** Whether the object holds a communicator (false after a move). */
  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_comm_t* h() const { return detail::live(h_.get(), "shardrec::Comm"); }

  struct Deleter {
    void operator()(shardrec_comm_t* c) const noexcept { shardrec_comm_destroy(c); }
  };
  std::unique_ptr<shardrec_comm_t, Deleter> h_;
};

}  // namespace shardrec

#endif  // SHARDREC_CPP_COMM_HPP_
