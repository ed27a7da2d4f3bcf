/* Throughput of one sharding type across the bed's hosts, beside the planner's estimate.
 *
 * Usage: mh_bench TYPE STEPS   (TYPE: a shardrec_sharding_type_t value, e.g. 2 row-wise,
 *                               4 table-row-wise)
 *        mh_bench mesh LAYOUT SYNCS
 *                               2D: sharding groups of the hosts' rank count (or
 *                               SHARDREC_BED_MESH_S ranks), LAYOUT 0 (the
 *                               default: replica groups inside hosts) or 1 (flipped: across);
 *                               after one training step, SYNCS shardrec_mesh_sync calls are
 *                               timed; rank 0 prints
 *   mesh layout L world W sync_ms M link_tx_per_sync X link_rx_per_sync Y bytes_per_rank B
 *                               (B: the weights and Adagrad state each rank averages)
 * Ranks meet through shardrec_comm_create_from_env. Every rank calibrates this machine at
 * once, each as one rank (ranks_per_machine 1, or SHARDREC_BED_RPM: the hosts share its cores,
 * and the other ranks calibrating beside it are the contention), and rank 0 broadcasts its
 * figures, so every rank plans alike; every rank then measures the network and
 * a collective round of the whole world (shardrec_topology_calibrate_network, budget 1 s across
 * hosts), which set the planner's inter_node_bandwidth and collective_latency;
 * SHARDREC_BED_LINK_BYTES (bytes/s), when set, overrides it, and
 * SHARDREC_BED_NO_CALIBRATION=1 skips both calibrations (the planner's defaults: for runs that
 * only count bytes). After 3
 * warm-up steps, STEPS forward + backward steps are timed between two barriers; rank 0 prints
 *   bench type T world W ranks_per_node P samples_per_s S step_ms M est_ms E net_bps N
 *         link_tx_per_step X link_rx_per_step Y host_reduce H
 * where E is the planner's "estimated step cost of the busiest rank", N the measured network
 * figure (0 on one host) and X, Y the bytes host 0's link (eth0 in the bed's namespace) sent and
 * received per timed step (-1 where /sys/class/net/eth0 cannot be read), H the plan's exchange
 * of table-row-wise tables across hosts (1 reduced inside hosts, 0 flat, -1 none recorded). Exit 0,
 * or 3 on a library error (its message on stderr). Not a ctest: a figure maker for
 * docs/multihost.md, and the host-link byte counts of multihost_host_reduce.
 */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardrec/shardrec.h"

#define TABLES 2
#define ROWS 200000
#define DIM 64
#define BATCH 256
#define BAG 4

#define CHECK(call)                                                                               \
  do {                                                                                            \
    shardrec_status_t rc_ = (call);                                                               \
    if (rc_ != SHARDREC_OK) {                                                                     \
      fprintf(stderr, "%s: %s: %s\n", #call, shardrec_status_string(rc_), shardrec_last_error()); \
      status = 3;                                                                                 \
      goto done;                                                                                  \
    }                                                                                             \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A counter of eth0 (the bed's host link; `ip netns exec` mounts the namespace's sysfs). */
static double link_counter(const char* name) {
  char path[96];
  double v = -1;
  FILE* f;
  snprintf(path, sizeof(path), "/sys/class/net/eth0/statistics/%s", name);
  f = fopen(path, "r");
  if (f == NULL) return -1;
  if (fscanf(f, "%lf", &v) != 1) v = -1;
  fclose(f);
  return v;
}

static double estimated_ms(const shardrec_plan_t* plan) {
  char* text = NULL;
  const char* key = "estimated step cost of the busiest rank: ";
  double ms = -1;
  if (shardrec_plan_stats(plan, &text, NULL) != SHARDREC_OK) return -1;
  const char* at = strstr(text, key);
  if (at != NULL) ms = strtod(at + strlen(key), NULL);
  shardrec_free(text);
  return ms;
}

/* The plan's exchange for table-row-wise/grid across hosts: 1 reduced inside hosts, 0 flat, -1
   when the plan records none (nothing crosses hosts, or no such table). */
static int plan_host_reduce(const shardrec_plan_t* plan) {
  char* text = NULL;
  const char* key = "\"host_reduce\": ";
  int v = -1;
  if (shardrec_plan_to_json(plan, &text, NULL) != SHARDREC_OK) return -1;
  const char* at = strstr(text, key);
  if (at != NULL) v = strncmp(at + strlen(key), "true", 4) == 0 ? 1 : 0;
  shardrec_free(text);
  return v;
}

#define MESH_ROWS 20000

/* The 2D replica sync across the bed: see the usage above. */
static int run_mesh(int layout, int syncs) {
  static const int32_t feature_of[TABLES] = {0, 1};
  shardrec_comm_t* comm = NULL;
  shardrec_mesh_t* mesh = NULL;
  shardrec_plan_t* plan = NULL;
  shardrec_embedding_t* coll = NULL;
  shardrec_mesh_options_t mo;
  shardrec_topology_t topology;
  shardrec_feature_config_t features[TABLES];
  shardrec_table_config_t tables[TABLES];
  shardrec_table_constraints_t constraints[TABLES];
  shardrec_comm_options_t co = SHARDREC_COMM_OPTIONS_INIT;
  shardrec_embedding_options_t eo = SHARDREC_EMBEDDING_OPTIONS_INIT;
  shardrec_optimizer_config_t opt;
  static int32_t lengths[TABLES * BATCH];
  static int64_t ids[TABLES * BATCH * BAG];
  static float out[BATCH * TABLES * DIM], grad[BATCH * TABLES * DIM];
  shardrec_kjt_view_t view;
  int32_t rank = 0, world = 0, local = 0;
  int status = 0, t, j;
  double t0, t1, tx0, rx0;
  co.timeout_ms = 120000;
  CHECK(shardrec_comm_create_from_env(&comm, &co));
  CHECK(shardrec_comm_rank(&rank, comm));
  CHECK(shardrec_comm_size(&world, comm));
  CHECK(shardrec_comm_local_size(&local, comm));
  shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
  mo.sharding_group_size = local;
  if (getenv("SHARDREC_BED_MESH_S") != NULL)
    mo.sharding_group_size = atoi(getenv("SHARDREC_BED_MESH_S"));
  mo.layout = layout;
  mo.ranks_per_node = local;
  CHECK(shardrec_mesh_create(&mesh, comm, &mo));
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  topology.world_size = mo.sharding_group_size;
  topology.ranks_per_node = 1;
  topology.batch_size = BATCH;
  topology.optimizer = SHARDREC_OPTIMIZER_ADAGRAD;
  for (t = 0; t < TABLES; ++t) {
    shardrec_feature_config_init(&features[t], SHARDREC_FEATURE_CONFIG_VERSION);
    features[t].name = t == 0 ? "f0" : "f1";
    features[t].pooling_factor = BAG;
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = t == 0 ? "t0" : "t1";
    tables[t].rows = MESH_ROWS;
    tables[t].dim = DIM;
    tables[t].pooling = SHARDREC_POOLING_SUM;
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
    shardrec_table_constraints_init(&constraints[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    constraints[t].table = tables[t].name;
    constraints[t].sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  }
  CHECK(shardrec_plan_create(&plan, tables, TABLES, features, TABLES, &topology, constraints,
                             TABLES));
  shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  opt.type = SHARDREC_OPTIMIZER_ADAGRAD;
  opt.learning_rate = 0.01f;
  eo.num_threads = 1;
  CHECK(shardrec_mesh_embedding_create(&coll, mesh, plan, &opt, &eo));
  memset(&view, 0, sizeof(view));
  view.batch_size = BATCH;
  view.num_features = TABLES;
  view.lengths = lengths;
  view.num_lengths = TABLES * BATCH;
  view.values = ids;
  view.values_dtype = SHARDREC_DTYPE_INT64;
  view.num_values = TABLES * BATCH * BAG;
  for (j = 0; j < TABLES * BATCH; ++j) lengths[j] = BAG;
  for (j = 0; j < TABLES * BATCH * BAG; ++j) ids[j] = (int64_t)((j * 7919 + rank * 31) % MESH_ROWS);
  for (j = 0; j < BATCH * TABLES * DIM; ++j) grad[j] = 0.01f * (float)(j % 7);
  CHECK(shardrec_embedding_forward(coll, &view, out, BATCH * TABLES * DIM, NULL));
  CHECK(shardrec_embedding_backward(coll, grad, BATCH * TABLES * DIM, NULL));
  CHECK(shardrec_mesh_sync(mesh, coll, 0)); /* warm-up */
  CHECK(shardrec_comm_barrier(comm));
  t0 = now_ms();
  tx0 = link_counter("tx_bytes");
  rx0 = link_counter("rx_bytes");
  for (j = 0; j < syncs; ++j) CHECK(shardrec_mesh_sync(mesh, coll, 0));
  CHECK(shardrec_comm_barrier(comm));
  t1 = now_ms();
  if (rank == 0) {
    const double tx1 = link_counter("tx_bytes"), rx1 = link_counter("rx_bytes");
    printf(
        "mesh layout %d world %d sync_ms %.2f link_tx_per_sync %.0f link_rx_per_sync %.0f "
        "bytes_per_rank %.0f\n",
        layout, world, (t1 - t0) / syncs, tx1 < 0 || tx0 < 0 ? -1 : (tx1 - tx0) / syncs,
        rx1 < 0 || rx0 < 0 ? -1 : (rx1 - rx0) / syncs,
        2.0 * TABLES * MESH_ROWS * DIM * 4.0 / mo.sharding_group_size);
  }
done:
  shardrec_embedding_destroy(coll);
  shardrec_plan_destroy(plan);
  shardrec_mesh_destroy(mesh);
  shardrec_comm_destroy(comm);
  return status;
}

int main(int argc, char** argv) {
  static const int32_t feature_of[TABLES] = {0, 1};
  shardrec_comm_t* comm = NULL;
  shardrec_plan_t* plan = NULL;
  shardrec_embedding_t* coll = NULL;
  shardrec_topology_t topology;
  shardrec_feature_config_t features[TABLES];
  shardrec_table_config_t tables[TABLES];
  shardrec_table_constraints_t constraints[TABLES];
  shardrec_comm_options_t co = SHARDREC_COMM_OPTIONS_INIT;
  shardrec_embedding_options_t eo = SHARDREC_EMBEDDING_OPTIONS_INIT;
  static int32_t lengths[TABLES * BATCH];
  static int64_t ids[TABLES * BATCH * BAG];
  static float out[BATCH * TABLES * DIM], grad[BATCH * TABLES * DIM];
  shardrec_kjt_view_t view;
  double figures[4], t0, t1, tx0 = 0, rx0 = 0, net_bps = 0;
  int32_t rank = 0, world = 0;
  int status = 0, step, t, j;
  const char* link = getenv("SHARDREC_BED_LINK_BYTES");
  const char* no_cal = getenv("SHARDREC_BED_NO_CALIBRATION");
  const int calibrate = no_cal == NULL || strcmp(no_cal, "1") != 0;
  const char* verbose = getenv("SHARDREC_BED_VERBOSE");
  if (argc == 4 && strcmp(argv[1], "mesh") == 0) return run_mesh(atoi(argv[2]), atoi(argv[3]));
  if (argc != 3) {
    fprintf(stderr, "usage: mh_bench TYPE STEPS | mesh LAYOUT SYNCS\n");
    return 2;
  }
  const int type = atoi(argv[1]), steps = atoi(argv[2]);
  co.timeout_ms = 60000;
  CHECK(shardrec_comm_create_from_env(&comm, &co));
  CHECK(shardrec_comm_rank(&rank, comm));
  CHECK(shardrec_comm_size(&world, comm));
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  CHECK(shardrec_topology_from_comm(&topology, comm));
  topology.batch_size = BATCH;
  /* Every rank calibrates at once, as the ranks will run: the bed's hosts share this machine's
     cores, so a lone calibration would measure a rank with the whole machine to itself. Each
     calibrates as one rank of the machine (ranks_per_machine 1): the contention is the other
     ranks calibrating beside it. With the default (the host's ranks_per_node) each rank also
     gathered on ranks_per_node threads and was credited its share of them, on top of the real
     co-runners: a share counted twice, the gather bandwidth half what a rank gets. */
  if (calibrate) {
    shardrec_calibrate_options_t copt;
    shardrec_calibrate_options_init(&copt, SHARDREC_CALIBRATE_OPTIONS_VERSION);
    copt.ranks_per_machine = getenv("SHARDREC_BED_RPM") ? atoi(getenv("SHARDREC_BED_RPM")) : 1;
    CHECK(shardrec_comm_barrier(comm));
    CHECK(shardrec_topology_calibrate(&topology, &copt, NULL));
  }
  if (rank == 0 && calibrate) {
    figures[0] = topology.memory_bandwidth;
    figures[1] = topology.intra_node_bandwidth;
    figures[2] = topology.collective_latency;
    figures[3] = topology.per_id_cost;
  }
  if (calibrate) {
    CHECK(shardrec_comm_broadcast(comm, figures, 4, SHARDREC_DTYPE_FLOAT64, 0, NULL));
    topology.memory_bandwidth = figures[0];
    topology.intra_node_bandwidth = figures[1];
    topology.collective_latency = figures[2];
    topology.per_id_cost = figures[3];
  }
  /* The network between the hosts, and a collective round of the whole world at once (on one
     host too), which replaces the calibrated collective_latency. */
  if (calibrate && world > 1)
    CHECK(shardrec_topology_calibrate_network(
        &topology, comm, world > topology.ranks_per_node ? 1.0 : 0.1, &net_bps));
  if (link != NULL) topology.inter_node_bandwidth = atof(link);
  for (t = 0; t < TABLES; ++t) {
    shardrec_feature_config_init(&features[t], SHARDREC_FEATURE_CONFIG_VERSION);
    features[t].name = t == 0 ? "f0" : "f1";
    features[t].pooling_factor = BAG;
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = t == 0 ? "t0" : "t1";
    tables[t].rows = ROWS;
    tables[t].dim = DIM;
    tables[t].pooling = SHARDREC_POOLING_SUM;
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
    shardrec_table_constraints_init(&constraints[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    constraints[t].table = tables[t].name;
    constraints[t].sharding_types = 1u << type;
  }
  CHECK(shardrec_plan_create(&plan, tables, TABLES, features, TABLES, &topology, constraints,
                             TABLES));
  eo.num_threads = 1;
  CHECK(shardrec_embedding_create(&coll, plan, comm, NULL, &eo));
  memset(&view, 0, sizeof(view));
  view.batch_size = BATCH;
  view.num_features = TABLES;
  view.lengths = lengths;
  view.num_lengths = TABLES * BATCH;
  view.values = ids;
  view.values_dtype = SHARDREC_DTYPE_INT64;
  view.num_values = TABLES * BATCH * BAG;
  for (j = 0; j < TABLES * BATCH; ++j) lengths[j] = BAG;
  for (j = 0; j < BATCH * TABLES * DIM; ++j) grad[j] = 0.01f * (float)(j % 7);
  t0 = 0;
  for (step = -3; step < steps; ++step) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank * 7919 + step + 11);
    for (j = 0; j < TABLES * BATCH * BAG; ++j) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      ids[j] = (int64_t)(x % ROWS);
    }
    if (step == 0) {
      CHECK(shardrec_comm_barrier(comm));
      t0 = now_ms();
      tx0 = link_counter("tx_bytes");
      rx0 = link_counter("rx_bytes");
    }
    CHECK(shardrec_embedding_forward(coll, &view, out, BATCH * TABLES * DIM, NULL));
    CHECK(shardrec_embedding_backward(coll, grad, BATCH * TABLES * DIM, NULL));
  }
  CHECK(shardrec_comm_barrier(comm));
  t1 = now_ms();
  if (rank == 0) {
    const double step_ms = (t1 - t0) / steps;
    const double tx1 = link_counter("tx_bytes"), rx1 = link_counter("rx_bytes");
    printf(
        "bench type %d world %d ranks_per_node %d samples_per_s %.0f step_ms %.2f est_ms %.2f "
        "net_bps %.0f link_tx_per_step %.0f link_rx_per_step %.0f host_reduce %d\n",
        type, world, topology.ranks_per_node, (double)world * BATCH * 1e3 / step_ms, step_ms,
        estimated_ms(plan), net_bps, tx1 < 0 || tx0 < 0 ? -1 : (tx1 - tx0) / steps,
        rx1 < 0 || rx0 < 0 ? -1 : (rx1 - rx0) / steps, plan_host_reduce(plan));
    /* SHARDREC_BED_VERBOSE=1: where rank 0's time went (warm-up steps included), and the
       calibrated figures the estimate used, for reading the estimate against the step. */
    if (verbose != NULL && strcmp(verbose, "1") == 0) {
      shardrec_step_timings_t st = SHARDREC_STEP_TIMINGS_INIT;
      if (shardrec_embedding_step_timings(coll, &st) == SHARDREC_OK && st.forwards > 0) {
        const double per = 1e3 / (double)st.forwards;
        printf(
            "phases_ms total %.3f collective %.3f input %.3f lookup %.3f output %.3f "
            "backward %.3f latency_ms %.4f intra_bps %.0f memory_bps %.0f per_id_ns %.2f\n",
            st.total_seconds * per, st.collective_seconds * per, st.input_dist_seconds * per,
            st.lookup_seconds * per, st.output_dist_seconds * per, st.backward_seconds * per,
            topology.collective_latency * 1e3, topology.intra_node_bandwidth,
            topology.memory_bandwidth, topology.per_id_cost * 1e9);
      }
      {
        char* text = NULL;
        if (shardrec_plan_stats(plan, &text, NULL) == SHARDREC_OK) printf("%s", text);
        shardrec_free(text);
      }
    }
  }
done:
  shardrec_embedding_destroy(coll);
  shardrec_plan_destroy(plan);
  shardrec_comm_destroy(comm);
  return status;
}
