/* Downstream C program built against the INSTALLED prefix (pkg-config and find_package): checks
 * that header and library versions agree and runs the README's C sample (the marked region). */
#include <stdio.h>

#include "shardrec/shardrec.h"

/* The README's C sample: plan, create, one forward/backward step at world size 1. Returns the
 * status of the first failing call; *loss receives 0.5 * |out|^2. */
static shardrec_status_t readme_sample(double* loss) {
  /* readme:c:begin */
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "user";
  int32_t reads[] = {0}; /* the table is read by feature 0 */
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "users";
  table.rows = 1000;
  table.dim = 16;
  table.features = reads;
  table.num_features = 1;
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;
  topology.world_size = 1;

  shardrec_plan_t* plan = NULL;
  shardrec_comm_t* comm = NULL;
  shardrec_embedding_t* coll = NULL;
  shardrec_status_t rc = shardrec_plan_create(&plan, &table, 1, &feature, 1, &topology, NULL, 0);
  if (rc == SHARDREC_OK) rc = shardrec_comm_create_local_group(&comm, 1, NULL);
  if (rc == SHARDREC_OK) rc = shardrec_embedding_create(&coll, plan, comm, NULL, NULL);

  int32_t lengths[] = {2, 1}; /* 2 samples: ids {3, 7} and {999} */
  int64_t ids[] = {3, 7, 999};
  shardrec_kjt_view_t batch = SHARDREC_KJT_VIEW_INIT;
  batch.batch_size = 2;
  batch.num_features = 1;
  batch.lengths = lengths;
  batch.num_lengths = 2;
  batch.values = ids;
  batch.num_values = 3;
  float out[2 * 16] = {0}; /* [batch, output_dim] */
  if (rc == SHARDREC_OK) rc = shardrec_embedding_forward(coll, &batch, out, 32, NULL);
  if (rc == SHARDREC_OK) rc = shardrec_embedding_backward(coll, out, 32, NULL); /* d(0.5|out|^2) */
  if (rc != SHARDREC_OK)
    fprintf(stderr, "%s: %s\n", shardrec_status_string(rc), shardrec_last_error());
  shardrec_embedding_destroy(coll); /* destroy(NULL) is a no-op */
  shardrec_comm_destroy(comm);
  shardrec_plan_destroy(plan);
  /* readme:c:end */
  *loss = 0.0;
  for (int i = 0; i < 32; ++i) *loss += 0.5 * (double)out[i] * (double)out[i];
  return rc;
}

int main(void) {
  if (shardrec_version() != SHARDREC_VERSION_CODE) {
    fprintf(stderr, "version mismatch: library %d, headers %d\n", shardrec_version(),
            SHARDREC_VERSION_CODE);
    return 1;
  }
  printf("consumer linked libshardrec %s\n", shardrec_version_string());
  double loss = 0.0;
  if (readme_sample(&loss) != SHARDREC_OK || !(loss > 0.0)) {
    fprintf(stderr, "the README's C sample failed (loss %g)\n", loss);
    return 1;
  }
  printf("readme sample loss %f\n", loss);
  return 0;
}
