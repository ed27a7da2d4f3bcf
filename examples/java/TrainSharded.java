// Example: two ranks (threads of this JVM) train a sharded embedding collection on synthetic
// data with the Java binding and print the loss of every step.
package org.shardrec.examples;

import java.util.List;
import java.util.Random;
import org.shardrec.Comm;
import org.shardrec.Config;
import org.shardrec.EmbeddingCollection;
import org.shardrec.Kjt;
import org.shardrec.LocalGroup;
import org.shardrec.OptimizerType;
import org.shardrec.Plan;
import org.shardrec.ShardingType;

public final class TrainSharded {
  private TrainSharded() {}

  /** The Java sample of docs/bindings.md: plan, create, one forward/backward step at world 1. */
  public static double readmeSample() {
    // readme:java:begin
    List<Config.Feature> features = List.of(new Config.Feature("user"));
    List<Config.Table> tables = List.of(new Config.Table("users", 1000, 16).features(0));
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         LocalGroup group = Comm.localGroup(1); // closes its communicators
         EmbeddingCollection coll = EmbeddingCollection.create(plan, group.get(0), null, null)) {
      Kjt batch = Kjt.of(2, 1, new int[] {2, 1}, new long[] {3, 7, 999}); // 2 samples
      float[] out = coll.forward(batch);                                  // [2, 16]
      coll.backward(out);                          // gradient of 0.5 * |out|^2
      double loss = 0;
      for (float v : out) loss += 0.5 * v * v;
      return loss;
    }
    // readme:java:end
  }

  private static double trainRank(Plan plan, Comm comm, int rank, int steps) {
    Random rng = new Random(1234 + rank);
    int batchSize = 64;
    double loss = 0;
    try (EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comm, new Config.Optimizer().type(OptimizerType.ADAGRAD).learningRate(0.05f),
             new Config.EmbeddingOptions().seed(42))) {
      for (int step = 0; step < steps; ++step) {
        int[] lengths = new int[2 * batchSize];
        long[] values = new long[6 * batchSize];
        int n = 0;
        for (int f = 0; f < 2; ++f) {
          for (int b = 0; b < batchSize; ++b) {
            lengths[f * batchSize + b] = 1 + rng.nextInt(3);
            for (int k = 0; k < lengths[f * batchSize + b]; ++k) {
              values[n++] = rng.nextInt(f == 0 ? 5000 : 300);
            }
          }
        }
        Kjt batch = Kjt.of(batchSize, 2, lengths, java.util.Arrays.copyOf(values, n));
        float[] out = coll.forward(batch);
        float[] grad = new float[out.length];
        loss = 0;
        for (int i = 0; i < out.length; ++i) {
          loss += 0.5 * out[i] * out[i] / batchSize;
          grad[i] = out[i] / batchSize;
        }
        coll.backward(grad);
        if (rank == 0) System.out.printf("step %d loss %.6f%n", step, loss);
      }
      // Step time and samples/s of this rank, from the collection's own timings.
      EmbeddingCollection.StepTimings t = coll.stepTimings();
      if (rank == 0 && t.forwards > 0) {
        double perStep = 1e3 / t.forwards;
        System.out.printf("rank 0: %.2f ms per step (input dist %.2f, lookup %.2f, output dist "
                              + "%.2f, backward %.2f), %.0f samples/s%n",
                          t.totalSeconds * perStep, t.inputDistSeconds * perStep,
                          t.lookupSeconds * perStep, t.outputDistSeconds * perStep,
                          t.backwardSeconds * perStep, t.samplesPerSecond());
      }
    }
    return loss;
  }

  public static void main(String[] args) throws Exception {
    List<Config.Feature> features = List.of(new Config.Feature("item"), new Config.Feature("shop"));
    List<Config.Table> tables = List.of(new Config.Table("items", 5000, 32).features(0),
                                        new Config.Table("shops", 300, 16).features(1));
    List<Config.Constraints> constraints = List.of(
        new Config.Constraints("items").shardingTypes(ShardingType.ROW_WISE),
        new Config.Constraints("shops").shardingTypes(ShardingType.TABLE_WISE).ranks(1));
    int steps = 5;
    double[] losses = new double[2];
    // The plan is made for the optimizer the collections train with (Adagrad).
    Config.Topology topology =
        new Config.Topology(2).batchSize(64).optimizer(OptimizerType.ADAGRAD);
    try (LocalGroup comms = Comm.localGroup(2);
         Plan plan = Plan.create(tables, features, topology, constraints)) {
      Thread[] threads = new Thread[2];
      Throwable[] errors = new Throwable[2];
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        threads[r] = new Thread(() -> {
          try {
            losses[rank] = trainRank(plan, comms.get(rank), rank, steps);
          } catch (Throwable t) {
            errors[rank] = t;
          }
        });
        threads[r].start();
      }
      for (Thread t : threads) t.join();
      for (Throwable t : errors) if (t != null) throw new RuntimeException(t);
    }
    System.out.printf("final loss %.6f (rank 0), %.6f (rank 1)%n", losses[0], losses[1]);
    System.out.printf("readme sample loss %.6f%n", readmeSample());
  }
}
