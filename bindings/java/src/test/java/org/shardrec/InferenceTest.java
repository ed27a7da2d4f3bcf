// JUnit tests of serving through the Java binding: a checkpoint written by 2 ranks (table-,
// row- and column-wise shards) opened for inference equals the training forward (bit for bit
// but for the row-wise table's summation order), int8/int4 stay within their row-wise bound,
// lookups from 4 threads across a reload each see one whole version, a pinned snapshot keeps
// its version, close() waits for lookups in flight, and Mlp/Dcn.infer equal forward.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class InferenceTest {
  private static final int REQUEST_STEP = 9; // the batches looked up: Training.batch(9, rank, 1)
  private static final float[] DENSE = {0.5f, -1.25f, 3f, 7.75f};

  private static Path root; // removed when the tests end
  private static Path dir1; // after 2 steps
  private static Path dir2; // after a third step
  private static final float[][] forward1 = new float[2][]; // per rank, on dir1's weights
  private static float[][] weights1; // every table, full, at dir1

  /** Trains at world 2, saving after 2 steps and again after a third. */
  @BeforeAll
  static void train() throws Exception {
    root = Files.createTempDirectory("shardrec_inference_java");
    dir1 = root.resolve("v1");
    dir2 = root.resolve("v2");
    Comm[] comms = Comm.createLocalGroup(2);
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try (Plan plan = Training.plan(2, OptimizerType.SGD)) {
      List<Future<float[][]>> futures = new ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        futures.add(pool.submit(() -> {
          Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f);
          try (EmbeddingCollection coll = EmbeddingCollection.create(
                   plan, comms[rank], sgd, new Config.EmbeddingOptions().seed(11))) {
            for (int s = 0; s < 2; ++s) Training.step(coll, Training.batch(s, rank, 1));
            Checkpoint.save(coll, dir1.toString(),
                            new Checkpoint.Options().dense("dense.w", Buffers.of(DENSE)));
            float[][] w = Training.weights(coll);
            // The request's forward is the third step's, on dir1's weights.
            Kjt request = Training.batch(REQUEST_STEP, rank, 1);
            float[] out = coll.forward(request);
            forward1[rank] = out.clone();
            coll.backward(out);
            Checkpoint.save(coll, dir2.toString());
            return w;
          }
        }));
      }
      weights1 = futures.get(0).get();
      futures.get(1).get();
    } finally {
      pool.shutdown();
      for (Comm c : comms) c.close();
    }
  }

  @AfterAll
  static void removeFiles() throws Exception {
    try (java.util.stream.Stream<Path> paths = Files.walk(root)) {
      paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  private static Kjt request(int rank) {
    return Training.batch(REQUEST_STEP, rank, 1);
  }

  /**
   * An fp32 lookup against rank {@code rank}'s training forward: bit for bit on t0 (table-wise)
   * and t2 (column-wise); t1 is row-wise, whose partial sums training added in another order
   * (inference.h), so there a bag of n ids may differ by a few roundings.
   */
  private static void assertServedEqualsForward(float[] got, int rank) {
    float[] want = forward1[rank];
    assertEquals(want.length, got.length);
    for (int b = 0; b < Training.LOCAL_BATCH; ++b) {
      int ids = Training.length(REQUEST_STEP, rank, 1, b);
      for (int c = 0; c < 18; ++c) {
        int i = b * 18 + c;
        if (c < 8 || c >= 12) {
          assertEquals(Float.floatToIntBits(want[i]), Float.floatToIntBits(got[i]), "element " + i);
        } else {
          assertTrue(Math.abs(got[i] - want[i]) <= ids * 1e-6 * (1 + Math.abs(want[i])),
                     "element " + i + ": " + got[i] + " vs " + want[i]);
        }
      }
    }
  }

  /** What version 1 serves for rank {@code rank}'s request (the reference of later checks). */
  private static float[] served1(int rank) {
    try (Inference inf = Inference.open(dir1.toString())) {
      return inf.lookup(request(rank));
    }
  }

  @Test
  void fp32LookupEqualsTheTrainingForward() {
    try (Inference inf = Inference.open(dir1.toString())) {
      assertEquals(1, inf.version());
      assertEquals(3, inf.numTables());
      assertEquals(3, inf.numFeatures());
      assertEquals(18, inf.outputDim());
      assertFalse(inf.isSequence());
      for (int t = 0; t < 3; ++t) {
        Inference.TableInfo info = inf.table(t);
        assertEquals(Training.TABLES[t], info.name);
        assertEquals(Training.ROWS[t], info.rows);
        assertEquals(Training.DIMS[t], info.dim);
        assertEquals(ServingStorage.FP32, info.storage);
      }
      for (int r = 0; r < 2; ++r) {
        assertServedEqualsForward(inf.lookup(request(r)), r);
        FloatBuffer direct = Buffers.floats(inf.outputSize(request(r)));
        assertEquals(1, inf.lookup(request(r), direct));
        float[] viaBuffer = new float[direct.capacity()];
        direct.get(viaBuffer);
        assertServedEqualsForward(viaBuffer, r);
      }
      assertArrayEquals(DENSE, inf.denseTensor("dense.w"));
      try (InferenceSnapshot snap = inf.pin()) {
        assertEquals(1, snap.version());
        assertArrayEquals(inf.lookup(request(1)), snap.lookup(request(1)));
        FloatBuffer dense = snap.denseTensor("dense.w");
        assertTrue(dense.isDirect() && dense.isReadOnly());
        float[] read = new float[dense.remaining()];
        dense.get(read);
        assertArrayEquals(DENSE, read);
        ShardrecException e =
            assertThrows(ShardrecException.class, () -> snap.denseTensor("missing"));
        assertEquals(ShardrecException.ENOTFOUND, e.code());
      }
    }
  }

  /**
   * rowScales: an int8/int4 table's per-row scale and bias are the row-wise quantization of the
   * trained rows; an fp32 table, a row out of range and an unknown table are refused.
   */
  @Test
  void rowScalesAreTheRowWiseQuantizationOfTheTrainedRows() {
    Inference.Options options = new Inference.Options()
                                    .defaultStorage(ServingStorage.INT8)
                                    .tableStorage("t1", ServingStorage.INT4)
                                    .tableStorage("t2", ServingStorage.FP32);
    try (Inference inf = Inference.open(dir1.toString(), options)) {
      float[] levels = {255f, 15f};
      for (int t = 0; t < 2; ++t) {
        int dim = Training.DIMS[t];
        long[] ids = new long[(int) Training.ROWS[t]];
        for (int i = 0; i < ids.length; ++i) ids[i] = i;
        Inference.RowScales rs = inf.rowScales(Training.TABLES[t], ids);
        assertEquals(1, rs.version);
        assertEquals(ids.length, rs.size());
        for (int row = 0; row < ids.length; ++row) {
          float lo = Float.MAX_VALUE;
          float hi = -Float.MAX_VALUE;
          for (int d = 0; d < dim; ++d) {
            lo = Math.min(lo, weights1[t][row * dim + d]);
            hi = Math.max(hi, weights1[t][row * dim + d]);
          }
          assertEquals((hi - lo) / levels[t], rs.scale(row), 0f, "t" + t + " row " + row);
          assertEquals(lo, rs.bias(row), 0f, "t" + t + " row " + row);
        }
      }
      ShardrecException e =
          assertThrows(ShardrecException.class, () -> inf.rowScales("t2", new long[] {0}));
      assertEquals(ShardrecException.EINVAL, e.code(), e.toString());
      e = assertThrows(ShardrecException.class,
                       () -> inf.rowScales("t0", new long[] {Training.ROWS[0]}));
      assertEquals(ShardrecException.EINVAL, e.code(), e.toString());
      e = assertThrows(ShardrecException.class, () -> inf.rowScales("nope", new long[] {0}));
      assertEquals(ShardrecException.ENOTFOUND, e.code(), e.toString());
    }
  }

  @Test
  void int8AndInt4StayWithinTheirRowWiseBound() {
    Inference.Options options = new Inference.Options()
                                    .defaultStorage(ServingStorage.INT8)
                                    .tableStorage("t1", ServingStorage.INT4);
    try (Inference inf = Inference.open(dir1.toString(), options)) {
      ServingStorage[] want = {ServingStorage.INT8, ServingStorage.INT4, ServingStorage.INT8};
      int[] levels = {255, 15, 255};
      for (int t = 0; t < 3; ++t) assertEquals(want[t], inf.table(t).storage);
      // Per table, the widest row's scale: each id read adds at most scale / 2 per element.
      double[] halfScale = new double[3];
      for (int t = 0; t < 3; ++t) {
        int dim = Training.DIMS[t];
        for (int row = 0; row < Training.ROWS[t]; ++row) {
          float lo = Float.MAX_VALUE;
          float hi = -Float.MAX_VALUE;
          for (int d = 0; d < dim; ++d) {
            lo = Math.min(lo, weights1[t][row * dim + d]);
            hi = Math.max(hi, weights1[t][row * dim + d]);
          }
          halfScale[t] = Math.max(halfScale[t], (hi - lo) / levels[t] / 2.0);
        }
      }
      for (int r = 0; r < 2; ++r) {
        float[] got = inf.lookup(request(r));
        boolean differs = false;
        for (int b = 0; b < Training.LOCAL_BATCH; ++b) {
          int offset = 0;
          for (int f = 0; f < 3; ++f) {
            int ids = Training.length(REQUEST_STEP, r, f, b);
            for (int d = 0; d < Training.DIMS[f]; ++d) {
              int i = b * 18 + offset + d;
              double err = Math.abs(got[i] - forward1[r][i]);
              assertTrue(err <= ids * halfScale[f] * (1 + 1e-5) + 1e-6,
                         "rank " + r + " sample " + b + " feature " + f + ": error " + err);
              differs |= err > 0;
            }
            offset += Training.DIMS[f];
          }
        }
        assertTrue(differs, "quantized lookups read exactly the fp32 values");
      }
    }
  }

  @Test
  void lookupsAcrossAReloadSeeOneWholeVersion() throws Exception {
    float[][] forward2 = new float[2][];
    try (Inference v2 = Inference.open(dir2.toString())) {
      for (int r = 0; r < 2; ++r) forward2[r] = v2.lookup(request(r));
    }
    float[][] served1 = {served1(0), served1(1)};
    assertFalse(java.util.Arrays.equals(served1[0], forward2[0]));
    try (Inference inf = Inference.open(dir1.toString())) {
      InferenceSnapshot before = inf.pin();
      AtomicBoolean reloaded = new AtomicBoolean();
      ExecutorService pool = Executors.newFixedThreadPool(4);
      List<Future<long[]>> futures = new ArrayList<>();
      for (int t = 0; t < 4; ++t) {
        final int rank = t % 2;
        futures.add(pool.submit(() -> {
          long[] seen = new long[3];
          float[] out = new float[(int) inf.outputSize(request(rank))];
          // Until the reload is done, then 20 more requests on the new version.
          for (int after = 0; after < 20;) {
            boolean done = reloaded.get();
            long version = inf.lookup(request(rank), out);
            assertArrayEquals(version == 1 ? served1[rank] : forward2[rank], out,
                              "version " + version);
            ++seen[(int) version];
            if (done) ++after;
          }
          return seen;
        }));
      }
      try {
        Thread.sleep(20);
        inf.reload(dir2.toString());
      } finally {
        reloaded.set(true); // the readers stop even when the reload failed
      }
      long newer = 0;
      for (Future<long[]> f : futures) newer += f.get()[2];
      pool.shutdown();
      assertTrue(newer >= 80);
      assertEquals(2, inf.version());
      try (before) {
        assertEquals(1, before.version());
        assertArrayEquals(served1[0], before.lookup(request(0)));
      }
      // A serving file of the new version opens to the same lookups.
      String file = dir2.resolveSibling("v2.srv").toString();
      inf.save(file);
      try (Inference mapped = Inference.open(file)) {
        assertArrayEquals(forward2[1], mapped.lookup(request(1)));
      }
    }
  }

  @Test
  void badRequestsAreRefusedClearly() {
    try (Inference inf = Inference.open(dir1.toString())) {
      Kjt bad = Kjt.of(1, 3, new int[] {1, 0, 0}, new long[] {1000});
      ShardrecException e = assertThrows(ShardrecException.class, () -> inf.lookup(bad));
      assertEquals(ShardrecException.EINVAL, e.code());
      assertTrue(e.getMessage().contains("1000"), e.getMessage());
      assertThrows(ShardrecException.class, () -> inf.lookup(request(0), new float[3]));
      assertThrows(ShardrecException.class, () -> inf.lookup((Kjt) null));
      try (InferenceSnapshot snap = inf.pin()) {
        assertThrows(ShardrecException.class, () -> snap.lookup(null, new float[3]));
      }
      e = assertThrows(ShardrecException.class, () -> inf.reload(dir1.resolve("nope").toString()));
      assertEquals(ShardrecException.ENOTFOUND, e.code());
      assertEquals(1, inf.version());
    }
    ShardrecException e = assertThrows(ShardrecException.class,
        () -> Inference.open(dir1.toString(), new Inference.Options().device(DeviceType.CUDA)));
    assertEquals(ShardrecException.EUNSUPPORTED, e.code());
    Inference closed = Inference.open(dir1.toString());
    closed.close();
    closed.close();
    assertEquals(ShardrecException.EINVAL,
                 assertThrows(ShardrecException.class, closed::version).code());
  }

  /**
   * FP8 storage: every table reads back as it, and each row's scale (bias 0) is the power of two
   * the encoder picks: the row's largest magnitude over it lies in [fit / 2, fit] (fit = 464 for
   * E4M3, 61440 for E5M2: the largest magnitude that rounds to the largest finite value).
   */
  @Test
  void fp8RowsCarryTheEncodersPowerOfTwoScale() {
    ServingStorage[] storages = {ServingStorage.FP8_E4M3, ServingStorage.FP8_E5M2};
    double[] fits = {464, 61440};
    for (int k = 0; k < 2; ++k) {
      assertEquals(storages[k], ServingStorage.of(storages[k].code()));
      Inference.Options options = new Inference.Options().defaultStorage(storages[k]);
      try (Inference inf = Inference.open(dir1.toString(), options)) {
        for (int t = 0; t < 3; ++t) {
          assertEquals(storages[k], inf.table(t).storage);
          int dim = Training.DIMS[t];
          long[] ids = new long[(int) Training.ROWS[t]];
          for (int i = 0; i < ids.length; ++i) ids[i] = i;
          Inference.RowScales rs = inf.rowScales(Training.TABLES[t], ids);
          for (int row = 0; row < ids.length; ++row) {
            double amax = 0;
            for (int c = 0; c < dim; ++c) amax = Math.max(amax, Math.abs(weights1[t][row * dim + c]));
            float s = rs.scales()[row];
            assertEquals(0f, rs.biases()[row]);
            assertEquals(0, Float.floatToRawIntBits(s) & 0x807fffff, "scale " + s);
            assertTrue(amax == 0 || (amax / s <= fits[k] && amax / s >= fits[k] / 2), "row " + row);
          }
        }
      }
    }
  }

  @Test
  void closeWaitsForLookupsInFlight() throws Exception {
    float[][] served1 = {served1(0), served1(1)};
    Inference inf = Inference.open(dir1.toString());
    ExecutorService pool = Executors.newFixedThreadPool(4);
    List<Future<Integer>> futures = new ArrayList<>();
    for (int t = 0; t < 4; ++t) {
      final int rank = t % 2;
      futures.add(pool.submit(() -> {
        float[] out = new float[(int) inf.outputSize(request(rank))];
        for (int n = 1;; ++n) {
          try {
            inf.lookup(request(rank), out);
          } catch (ShardrecException e) {
            assertEquals(ShardrecException.EINVAL, e.code()); // closed, never a crash
            return n;
          }
          assertArrayEquals(served1[rank], out);
        }
      }));
    }
    Thread.sleep(20);
    inf.close();
    for (Future<Integer> f : futures) assertTrue(f.get() >= 1);
    pool.shutdown();
  }

  @Test
  void mlpAndDcnInferEqualForwardFromFourThreads() throws Exception {
    long batch = 5;
    try (Mlp mlp = Mlp.create(6, new long[] {8, 3}, null, 21, "top")) {
      float[] x = new float[(int) (batch * 6)];
      for (int i = 0; i < x.length; ++i) x[i] = (float) Math.sin(i * 0.7);
      FloatBuffer want = Buffers.floats(batch * 3);
      mlp.forward(Buffers.of(x), batch, want);
      ExecutorService pool = Executors.newFixedThreadPool(4);
      List<Future<FloatBuffer>> futures = new ArrayList<>();
      for (int t = 0; t < 4; ++t) {
        futures.add(pool.submit(() -> {
          FloatBuffer y = Buffers.floats(batch * 3);
          for (int k = 0; k < 50; ++k) mlp.infer(Buffers.of(x), batch, y);
          return y;
        }));
      }
      for (Future<FloatBuffer> f : futures) assertEquals(want, f.get());
      pool.shutdown();
    }
    try (Dcn dcn = Dcn.create(4, 2, 2, 3, "cross")) {
      FloatBuffer x0 = Buffers.of(new float[] {1, -2, 0.5f, 3, 0.25f, 4, -1, 2});
      FloatBuffer want = Buffers.floats(8);
      FloatBuffer got = Buffers.floats(8);
      dcn.forward(x0, 2, want);
      dcn.infer(x0, 2, got);
      assertEquals(want, got);
    }
  }
}
