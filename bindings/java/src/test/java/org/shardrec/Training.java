// Shared fixture of the Java tests: a 3-table collection trained on deterministic synthetic
// batches at world size 1 (concatenated batch) or 2 (ranks as threads, mixed sharding).
package org.shardrec;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

final class Training {
  static final String[] TABLES = {"t0", "t1", "t2"};
  static final long[] ROWS = {40, 30, 50};
  static final int[] DIMS = {8, 4, 6};
  static final int FEATURES = 3;
  static final int LOCAL_BATCH = 4;

  private Training() {}

  static List<Config.Feature> features() {
    return List.of(new Config.Feature("f0"), new Config.Feature("f1"), new Config.Feature("f2"));
  }

  static List<Config.Table> tables() {
    List<Config.Table> out = new ArrayList<>();
    for (int t = 0; t < TABLES.length; ++t) {
      out.add(new Config.Table(TABLES[t], ROWS[t], DIMS[t]).features(t));
    }
    return out;
  }

  /** The fixture plan, made for Adagrad (the training tests' optimizer). */
  static Plan plan(int world) {
    return plan(world, OptimizerType.ADAGRAD);
  }

  /** World 2 forces table-wise, row-wise and column-wise shards; world 1 plans freely. */
  static Plan plan(int world, OptimizerType optimizer) {
    List<Config.Constraints> constraints = new ArrayList<>();
    if (world == 2) {
      constraints.add(new Config.Constraints("t0").shardingTypes(ShardingType.TABLE_WISE).ranks(1));
      constraints.add(new Config.Constraints("t1").shardingTypes(ShardingType.ROW_WISE));
      constraints.add(
          new Config.Constraints("t2").shardingTypes(ShardingType.COLUMN_WISE).ranks(0, 1));
    }
    return Plan.create(tables(), features(),
                       new Config.Topology(world).batchSize(LOCAL_BATCH).optimizer(optimizer),
                       constraints);
  }

  /** Bag length of (step, rank, feature, sample), 0..3. */
  static int length(int step, int rank, int f, int b) {
    return (step * 7 + rank * 5 + f * 3 + b * 11) % 4;
  }

  static long id(int step, int rank, int f, int b, int k) {
    return (step * 13L + rank * 17L + f * 19L + b * 23L + k * 29L) % ROWS[f];
  }

  /** The batch of {@code ranks} consecutive ranks starting at {@code first}, concatenated. */
  static Kjt batch(int step, int first, int ranks) {
    List<Integer> lengths = new ArrayList<>();
    List<Long> values = new ArrayList<>();
    for (int f = 0; f < FEATURES; ++f) {
      for (int r = first; r < first + ranks; ++r) {
        for (int b = 0; b < LOCAL_BATCH; ++b) {
          int n = length(step, r, f, b);
          lengths.add(n);
          for (int k = 0; k < n; ++k) values.add(id(step, r, f, b, k));
        }
      }
    }
    int[] l = lengths.stream().mapToInt(Integer::intValue).toArray();
    long[] v = values.stream().mapToLong(Long::longValue).toArray();
    return Kjt.of((long) LOCAL_BATCH * ranks, FEATURES, l, v);
  }

  /** One step with loss = mean over local samples of 0.5*|out|^2; returns the local loss. */
  static double step(EmbeddingCollection coll, Kjt batch) {
    float[] out = coll.forward(batch);
    float[] grad = new float[out.length];
    double loss = 0;
    long b = batch.batchSize();
    for (int i = 0; i < out.length; ++i) {
      loss += 0.5 * out[i] * out[i] / b;
      grad[i] = out[i] / b;
    }
    coll.backward(grad);
    return loss;
  }

  static Config.Optimizer optimizer() {
    return new Config.Optimizer().type(OptimizerType.ADAGRAD).learningRate(0.1f);
  }

  /** Final weights of every table after {@code steps} steps at the given world size. */
  static float[][] train(int world, int steps) throws Exception {
    return train(world, steps, new Config.EmbeddingOptions().seed(7));
  }

  /** As above, with the given collection options at world 2 and more. */
  static float[][] train(int world, int steps, Config.EmbeddingOptions options) throws Exception {
    if (world == 1) {
      try (Plan plan = plan(1)) {
        Comm comm = Comm.createLocalGroup(1)[0];
        try (comm; EmbeddingCollection coll = EmbeddingCollection.create(
                 plan, comm, optimizer(), new Config.EmbeddingOptions().seed(7))) {
          for (int s = 0; s < steps; ++s) step(coll, batch(s, 0, 2));
          return weights(coll);
        }
      }
    }
    Comm[] comms = Comm.createLocalGroup(world);
    ExecutorService pool = Executors.newFixedThreadPool(world);
    try (Plan plan = plan(world)) {
      List<Future<float[][]>> results = new ArrayList<>();
      for (int r = 0; r < world; ++r) {
        final int rank = r;
        results.add(pool.submit(() -> {
          try (EmbeddingCollection coll =
                   EmbeddingCollection.create(plan, comms[rank], optimizer(), options)) {
            for (int s = 0; s < steps; ++s) step(coll, batch(s, rank, 1));
            return weights(coll);
          }
        }));
      }
      float[][] first = results.get(0).get();
      for (Future<float[][]> f : results) f.get();
      return first;
    } finally {
      pool.shutdown();
      for (Comm c : comms) c.close();
    }
  }

  static float[][] weights(EmbeddingCollection coll) {
    float[][] out = new float[TABLES.length][];
    for (int t = 0; t < TABLES.length; ++t) out[t] = coll.getWeights(TABLES[t]);
    return out;
  }
}
