// Example: a Spark barrier stage of two tasks trains a sharded embedding collection (one rank
// per task, met through BarrierRendezvous), equals one process in the driver, and survives a
// task that fails on the first attempt: Spark retries the stage and the time it took is printed.
package org.shardrec.examples.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.util.TaskFailureListener;
import org.shardrec.BarrierRendezvous;
import org.shardrec.Comm;
import org.shardrec.Config;
import org.shardrec.EmbeddingCollection;
import org.shardrec.Kjt;
import org.shardrec.LocalGroup;
import org.shardrec.OptimizerType;
import org.shardrec.Plan;
import org.shardrec.ShardingType;
import org.shardrec.ShardrecException;

public final class SparkBarrierTrain {
  static final String[] TABLES = {"t0", "t1", "t2"};
  static final long[] ROWS = {400, 300, 500};
  static final int[] DIMS = {16, 8, 12};
  static final int BATCH = 32; // per task
  static final int STEPS = 5;
  static final int WORLD = 2;
  static final long TIMEOUT_MS = 10_000;

  private SparkBarrierTrain() {}

  /** What a task hands back: its rank, attempt, start time, losses and (rank 0) weights. */
  static final class TaskResult implements Serializable {
    private static final long serialVersionUID = 1L;
    int rank;
    int attempt;
    long startMillis;
    double[] losses = new double[STEPS];
    float[][] weights;
  }

  static Plan plan(int world) {
    List<Config.Feature> features = new ArrayList<>();
    List<Config.Table> tables = new ArrayList<>();
    for (int t = 0; t < TABLES.length; ++t) {
      features.add(new Config.Feature("f" + t));
      tables.add(new Config.Table(TABLES[t], ROWS[t], DIMS[t]).features(t));
    }
    List<Config.Constraints> constraints = new ArrayList<>();
    if (world == 2) { // one table of each kind of split
      constraints.add(new Config.Constraints("t0").shardingTypes(ShardingType.TABLE_WISE).ranks(1));
      constraints.add(new Config.Constraints("t1").shardingTypes(ShardingType.ROW_WISE));
      constraints.add(
          new Config.Constraints("t2").shardingTypes(ShardingType.COLUMN_WISE).ranks(0, 1));
    }
    return Plan.create(tables, features,
        new Config.Topology(world).batchSize(BATCH).optimizer(OptimizerType.ADAGRAD), constraints);
  }

  /** The batch of ranks [first, first + ranks) at a step, concatenated (deterministic ids). */
  static Kjt batch(int step, int first, int ranks) {
    int[] lengths = new int[TABLES.length * BATCH * ranks];
    List<Long> values = new ArrayList<>();
    int i = 0;
    for (int f = 0; f < TABLES.length; ++f) {
      for (int r = first; r < first + ranks; ++r) {
        for (int b = 0; b < BATCH; ++b) {
          int n = (step * 7 + r * 5 + f * 3 + b * 11) % 4;
          lengths[i++] = n;
          for (int k = 0; k < n; ++k) {
            values.add((step * 13L + r * 17L + f * 19L + b * 23L + k * 29L) % ROWS[f]);
          }
        }
      }
    }
    return Kjt.of((long) BATCH * ranks, TABLES.length, lengths,
        values.stream().mapToLong(Long::longValue).toArray());
  }

  /** One step of loss = mean over local samples of 0.5 |out|^2; returns the local loss. */
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

  static EmbeddingCollection collection(Plan plan, Comm comm) {
    return EmbeddingCollection.create(plan, comm,
        new Config.Optimizer().type(OptimizerType.ADAGRAD).learningRate(0.1f),
        new Config.EmbeddingOptions().seed(7));
  }

  /** How rank 1 fails in attempt 0, after its first step. */
  enum Failure {
    /** It does not. */
    NONE,
    /** It throws, closing its handles on the way out (try-with-resources). */
    CLOSE,
    /** It throws without closing them; its failure listener aborts its communicator. */
    LEAK,
    /** As LEAK with no failure listener: rank 0 hears only when Spark kills its task. */
    LEAK_UNHEARD,
    /** Its executor process dies (halt): Spark starts a new executor (run with --kill-executor). */
    HALT;

    String describe() {
      if (this == HALT)
        return "executor process killed";
      return this == CLOSE ? "handles closed"
          : this == LEAK   ? "handles leaked, failure listener aborts"
                           : "handles leaked, no listener: Spark's kill aborts the survivor";
    }
  }

  /** The body of one task; {@code failDir} receives the failure's timestamps. */
  static Iterator<TaskResult> task(BarrierTaskContext ctx, Failure failure, String failDir)
      throws Exception {
    TaskResult result = new TaskResult();
    result.startMillis = System.currentTimeMillis();
    result.rank = ctx.partitionId();
    result.attempt = ctx.stageAttemptNumber();
    Comm comm = BarrierRendezvous.join(result.rank, ctx.getTaskInfos().length, ctx::allGather,
        new Comm.Options().timeoutMs(TIMEOUT_MS));
    // A task that fails without closing still releases its peers; a killed one unblocks.
    Runnable abort = BarrierRendezvous.abortHook(comm);
    boolean failing = failure != Failure.NONE && result.attempt == 0;
    if (!(failing && failure == Failure.LEAK_UNHEARD)) {
      ctx.addTaskFailureListener((TaskFailureListener) (c, e) -> abort.run());
    }
    if (failing && failure != Failure.CLOSE && result.rank == 1) {
      EmbeddingCollection leaked = collection(plan(WORLD), comm);
      step(leaked, batch(0, result.rank, 1));
      note(failDir, "failed", System.currentTimeMillis());
      if (failure == Failure.HALT)
        Runtime.getRuntime().halt(3);
      throw new IllegalStateException("rank 1 fails on purpose in attempt 0, leaking its handles");
    }
    try (comm; AutoCloseable watcher = BarrierRendezvous.abortWhen(ctx::isInterrupted, comm);
         Plan plan = plan(WORLD); EmbeddingCollection coll = collection(plan, comm)) {
      for (int s = 0; s < STEPS; ++s) {
        if (failing && s == 1) {
          if (result.rank == 1) {
            note(failDir, "failed", System.currentTimeMillis());
            throw new IllegalStateException("rank 1 fails on purpose in attempt 0");
          }
          try {
            result.losses[s] = step(coll, batch(s, result.rank, 1));
          } catch (ShardrecException e) { // the survivor: how long until it heard
            note(failDir, "survivor_error", System.currentTimeMillis());
            note(failDir, "survivor_code", e.code());
            throw e;
          }
          continue;
        }
        result.losses[s] = step(coll, batch(s, result.rank, 1));
      }
      float[][] weights = new float[TABLES.length][];
      for (int t = 0; t < TABLES.length; ++t) weights[t] = coll.getWeights(TABLES[t]);
      if (result.rank == 0)
        result.weights = weights;
    }
    return List.of(result).iterator();
  }

  private static void note(String dir, String name, long millis) throws Exception {
    Files.writeString(Path.of(dir, name), Long.toString(millis), StandardCharsets.UTF_8,
        StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING);
  }

  private static long read(String dir, String name) throws Exception {
    return Long.parseLong(Files.readString(Path.of(dir, name), StandardCharsets.UTF_8).trim());
  }

  /** The barrier stage, then a shuffle (repartition) that makes it retryable, then collect. */
  static List<TaskResult> runStage(JavaSparkContext sc, Failure failure, String failDir) {
    List<Integer> ranks = new ArrayList<>();
    for (int r = 0; r < WORLD; ++r) ranks.add(r);
    List<TaskResult> results =
        new ArrayList<>(BarrierStage
                            .<Integer, TaskResult>mapPartitions(sc.parallelize(ranks, WORLD),
                                (ctx, rows) -> task(ctx, failure, failDir))
                            .repartition(1)
                            .collect());
    results.sort((a, b) -> Integer.compare(a.rank, b.rank));
    return results;
  }

  /** Compares a 2-task stage with one process; returns the largest relative difference. */
  static double compare(List<TaskResult> stage, double[] refLoss, float[][] refWeights) {
    double worst = 0;
    for (int s = 0; s < STEPS; ++s) {
      double global = (stage.get(0).losses[s] + stage.get(1).losses[s]) / WORLD;
      worst =
          Math.max(worst, Math.abs(global - refLoss[s]) / Math.max(Math.abs(refLoss[s]), 1e-30));
    }
    for (int t = 0; t < TABLES.length; ++t) {
      float[] got = stage.get(0).weights[t];
      double scale = 0, diff = 0;
      for (int i = 0; i < got.length; ++i) {
        scale = Math.max(scale, Math.abs(refWeights[t][i]));
        diff = Math.max(diff, Math.abs(got[i] - refWeights[t][i]));
      }
      worst = Math.max(worst, diff / Math.max(scale, 1e-30));
    }
    return worst;
  }

  public static void main(String[] args) throws Exception {
    // One process on the global batch: the reference every stage must equal.
    double[] refLoss = new double[STEPS];
    float[][] refWeights = new float[TABLES.length][];
    try (Plan plan = plan(1); LocalGroup group = Comm.localGroup(1);
         EmbeddingCollection coll = collection(plan, group.get(0))) {
      for (int s = 0; s < STEPS; ++s) refLoss[s] = step(coll, batch(s, 0, WORLD));
      for (int t = 0; t < TABLES.length; ++t) refWeights[t] = coll.getWeights(TABLES[t]);
    }

    SparkConf conf = new SparkConf()
                         .setAppName("shardrec-barrier")
                         .setIfMissing("spark.master", "local-cluster[2,1,1024]")
                         // A failed barrier stage is retried up to this many times.
                         .set("spark.stage.maxConsecutiveAttempts", "4")
                         // A barrier stage submitted before its slots exist is checked again
                         // after this interval (default 15 s).
                         .set("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
                         .set("spark.ui.enabled", "false");
    // The tasks run on this host (local-cluster): they leave their timestamps in this folder.
    String failDir = Files.createDirectories(Path.of("failures").toAbsolutePath()).toString();
    int failures = 0;
    try (JavaSparkContext sc = new JavaSparkContext(conf)) {
      sc.setLogLevel("ERROR");
      // A barrier stage needs all its slots at once: wait for the executors (JVMs) to come up.
      long start = System.nanoTime();
      while (sc.sc().statusTracker().getExecutorInfos().length <= WORLD) Thread.sleep(50);
      System.out.printf("executors up after %.2f s%n", (System.nanoTime() - start) / 1e9);
      start = System.nanoTime();
      List<TaskResult> trained = runStage(sc, Failure.NONE, null);
      System.out.printf("stage 1 (training) took %.2f s%n", (System.nanoTime() - start) / 1e9);
      double diff = compare(trained, refLoss, refWeights);
      System.out.printf("barrier stage of %d tasks: final loss %.9f, one process %.9f, "
              + "largest relative difference %.3g%n",
          WORLD, (trained.get(0).losses[STEPS - 1] + trained.get(1).losses[STEPS - 1]) / WORLD,
          refLoss[STEPS - 1], diff);
      if (!(diff <= 1e-6))
        ++failures;

      List<Failure> cases =
          new ArrayList<>(List.of(Failure.CLOSE, Failure.LEAK, Failure.LEAK_UNHEARD));
      // Not in the test: a new executor JVM costs seconds of CI time.
      if (List.of(args).contains("--kill-executor"))
        cases.add(Failure.HALT);
      for (Failure failure : cases) {
        String dir = Files.createDirectories(Path.of(failDir, failure.name())).toString();
        start = System.nanoTime();
        List<TaskResult> retried = runStage(sc, failure, dir);
        System.out.printf(
            "stage with a failing task took %.2f s%n", (System.nanoTime() - start) / 1e9);
        double retriedDiff = compare(retried, refLoss, refWeights);
        long failed = read(dir, "failed");
        long retryStart = Math.min(retried.get(0).startMillis, retried.get(1).startMillis);
        System.out.printf("failed task (%s): retried as attempt %d, retry started %.2f s after "
                + "the failure (communicator timeout %.1f s)%n",
            failure.describe(), retried.get(0).attempt, (retryStart - failed) / 1e3,
            TIMEOUT_MS / 1e3);
        if (Files.exists(Path.of(dir, "survivor_error"))) {
          long code = read(dir, "survivor_code");
          System.out.printf("  survivor (rank 0) got %s %.2f s after the failure%n",
              code == ShardrecException.EABORTED      ? "EABORTED"
                  : code == ShardrecException.EREMOTE ? "EREMOTE"
                                                      : "error " + code,
              (read(dir, "survivor_error") - failed) / 1e3);
        }
        System.out.printf("  retried stage: largest relative difference %.3g%n", retriedDiff);
        if (!(retriedDiff <= 1e-6) || retried.get(0).attempt < 1)
          ++failures;
        if (retryStart - failed > TIMEOUT_MS + 2000)
          ++failures;
      }
    }
    if (failures > 0) {
      System.out.println("FAILED: a stage did not match one process, was not retried, or "
          + "its retry started later than the timeout + 2 s");
      System.exit(1);
    }
    System.out.println("spark barrier example: OK");
  }
}
