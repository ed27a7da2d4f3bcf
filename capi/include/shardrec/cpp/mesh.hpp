/**
 * @file cpp/mesh.hpp
 * shardrec::Mesh: the 2D replica x shard mesh (replica.h), its collections, syncs and
 * checkpoints. Included by shardrec.hpp.
 */
#ifndef SHARDREC_CPP_MESH_HPP_
#define SHARDREC_CPP_MESH_HPP_

#include <cstdint>
#include <memory>
#include <string>

#include "shardrec/cpp/comm.hpp"
#include "shardrec/cpp/embedding.hpp"
#include "shardrec/cpp/error.hpp"
#include "shardrec/cpp/plan.hpp"

namespace shardrec {

/** Where this rank sits in a mesh (shardrec_mesh_coords). */
struct MeshCoords {
  int32_t sharding_group = 0;
  int32_t shard_rank = 0;
  int32_t replica_group = 0;
  int32_t replica_rank = 0;
};

/** What a mesh's syncs have moved so far (shardrec_mesh_sync_stats). */
struct MeshSyncStats {
  uint64_t bytes = 0;
  int32_t collectives = 0;
  int64_t syncs = 0;
};

/**
 * A 2D mesh over a world communicator: sharding groups of S ranks, replica groups across them.
 * Move-only; one thread at a time (like its communicator). Communicators handed out stay valid
 * after it is destroyed.
 */
class Mesh {
 public:
  Mesh() = default;
  /** Takes ownership of a handle from the C API. */
  explicit Mesh(shardrec_mesh_t* handle) : h_(handle) {}

  /** Collective over @p world (shardrec_mesh_create); NULL options: S = world size (1D). */
  static Mesh create(Comm& world, const shardrec_mesh_options_t* options = nullptr) {
    shardrec_mesh_t* m = nullptr;
    check(shardrec_mesh_create(&m, detail::live(world.get(), "shardrec::Comm"), options));
    return Mesh(m);
  }

  MeshCoords coords() const {
    MeshCoords c;
    check(shardrec_mesh_coords(h(), &c.sharding_group, &c.shard_rank, &c.replica_group,
                               &c.replica_rank));
    return c;
  }

  /** A new handle on this rank's sharding-group communicator (shares the communicator). */
  Comm sharding_comm() const {
    shardrec_comm_t* c = nullptr;
    check(shardrec_mesh_sharding_comm(&c, h()));
    return Comm(c);
  }

  /** A new handle on this rank's replica-group communicator (shares the communicator). */
  Comm replica_comm() const {
    shardrec_comm_t* c = nullptr;
    check(shardrec_mesh_replica_comm(&c, h()));
    return Comm(c);
  }

  /** The mesh's groups and placement, human-readable. */
  std::string describe() const {
    char* text = nullptr;
    size_t len = 0;
    check(shardrec_mesh_describe(h(), &text, &len));
    return detail::take_text(text, len);
  }

  /** This rank's collection of @p plan (planned for S ranks) on the mesh (collective). */
  EmbeddingCollection embedding(const Plan& plan,
                                const shardrec_optimizer_config_t* optimizer = nullptr,
                                const shardrec_embedding_options_t* options = nullptr) {
    shardrec_embedding_t* e = nullptr;
    check(shardrec_mesh_embedding_create(&e, h(), detail::live(plan.get(), "shardrec::Plan"),
                                         optimizer, options));
    return EmbeddingCollection(e);
  }

  /** Averages @p coll across its replica group now (collective; SHARDREC_SYNC_*). */
  void sync(EmbeddingCollection& coll, int32_t mode = SHARDREC_SYNC_DEFAULT) {
    check(shardrec_mesh_sync(h(), coll_of(coll), mode));
  }

  /** Counts a training step and syncs every sync_interval steps; returns whether it synced. */
  bool step(EmbeddingCollection& coll) {
    int32_t synced = 0;
    check(shardrec_mesh_step(h(), coll_of(coll), &synced));
    return synced != 0;
  }

  /**
   * Replaces the replica-group exchange of the syncs by @p hook (NULL restores the built-in
   * one); @p payload must stay valid while it is installed (shardrec_mesh_set_sync_hook).
   */
  void set_sync_hook(shardrec_sync_hook_fn hook, void* payload) {
    check(shardrec_mesh_set_sync_hook(h(), hook, payload));
  }

  MeshSyncStats sync_stats() const {
    MeshSyncStats s;
    check(shardrec_mesh_sync_stats(h(), &s.bytes, &s.collectives, &s.syncs));
    return s;
  }

  /** Checkpoint of a mesh collection: one copy per shard (collective;
   * shardrec_checkpoint_save_mesh). */
  void save_checkpoint(EmbeddingCollection& coll, const std::string& dir,
                       const shardrec_checkpoint_options_t* options = nullptr) {
    check(shardrec_checkpoint_save_mesh(h(), coll_of(coll), detail::c_str(dir, "dir"), options));
  }

  /** Loads a checkpoint into every replica of a mesh collection (collective). */
  void load_checkpoint(EmbeddingCollection& coll, const std::string& dir,
                       const shardrec_checkpoint_options_t* options = nullptr) {
    check(shardrec_checkpoint_load_mesh(h(), coll_of(coll), detail::c_str(dir, "dir"), options));
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_mesh_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_mesh_t* h() const { return detail::live(h_.get(), "shardrec::Mesh"); }
  static shardrec_embedding_t* coll_of(EmbeddingCollection& coll) {
    return detail::live(coll.get(), "shardrec::EmbeddingCollection");
  }

  struct Deleter {
    void operator()(shardrec_mesh_t* m) const noexcept { shardrec_mesh_destroy(m); }
  };
  std::unique_ptr<shardrec_mesh_t, Deleter> h_;
};

}  // namespace shardrec

#endif  // SHARDREC_CPP_MESH_HPP_
