// A small DLRM trained through the Java binding (bottom MLP, sharded embedding collection, dot
// interaction or DCN-v2 cross network, top MLP, BCE, Adam, gradient bucketer) at world 2 with
// ranks as threads, compared bit for bit with the same run in C (bindings/dlrm_ref/dlrm_ref.c, through examples/dlrm's
// model), whose losses and final dense parameters the file $SHARDREC_DLRM_REF holds.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class DlrmTest {
  // The contract with dlrm_ref.c: shapes, seeds, optimizers and batch formulas.
  static final int WORLD = 2;
  static final int STEPS = 4;
  static final int B = 8;
  static final int ND = 4;
  static final int F = 3;
  static final int D = 4;
  static final long[] ROWS = {40, 30, 20};
  static final long SEED = 7;

  static float dense(int step, int g, int j) {
    return (float) ((step * 7 + g * 5 + j * 3) % 17) / 8.0f - 1.0f;
  }

  static long id(int step, int g, int f) {
    return (step * 13L + g * 11L + f * 7L) % ROWS[f];
  }

  static float label(int step, int g) {
    return (step * 3 + g * 5) % 3 == 0 ? 1.0f : 0.0f;
  }

  /** One rank's model, step for step as examples/dlrm/dlrm_model.c. */
  static final class Rank implements AutoCloseable {
    final Mesh mesh;
    final Plan plan;
    final EmbeddingCollection coll;
    final Mlp bottom;
    final Dcn cross; // null with the dot interaction
    final Mlp top;
    final Bucketer ddp;
    final DenseOptimizer opt;
    final long nb;
    final long nc;
    final long width;
    final FloatBuffer x = Buffers.floats(B * ND);
    final FloatBuffer labels = Buffers.floats(B);
    final FloatBuffer botOut = Buffers.floats(B * D);
    final FloatBuffer embOut = Buffers.floats(B * F * D);
    final FloatBuffer inter;
    final FloatBuffer logits = Buffers.floats(B);
    final FloatBuffer dlogits = Buffers.floats(B);
    final FloatBuffer dInter;
    final FloatBuffer dBot = Buffers.floats(B * D);
    final FloatBuffer dEmb = Buffers.floats(B * F * D);
    final FloatBuffer x0 = Buffers.floats(B * (F + 1) * D);
    final FloatBuffer dX0 = Buffers.floats(B * (F + 1) * D);

    Rank(Comm world, boolean dcn) {
      List<Config.Table> tables = new ArrayList<>();
      List<Config.Feature> features = new ArrayList<>();
      for (int f = 0; f < F; ++f) {
        tables.add(new Config.Table("t" + f, ROWS[f], D).features(f));
        features.add(new Config.Feature("c" + f).poolingFactor(1.0f));
      }
      plan = Plan.create(tables, features,
                         new Config.Topology(WORLD).batchSize(B)
                             .optimizer(OptimizerType.ROWWISE_ADAGRAD),
                         List.of());
      mesh = Mesh.create(world, new Mesh.Options().shardingGroupSize(WORLD));
      Config.Optimizer sparse = new Config.Optimizer();
      sparse.type = OptimizerType.ROWWISE_ADAGRAD;
      sparse.learningRate = 0.05f;
      coll = mesh.embeddingCollection(plan, sparse, new Config.EmbeddingOptions().seed(SEED));
      bottom = Mlp.create(ND, new long[] {8, D}, null, SEED, "bottom");
      width = dcn ? (F + 1) * D : Dense.dotInteractionWidth(F, D);
      cross = dcn ? Dcn.create(width, 2, 4, SEED, "cross") : null;
      top = Mlp.create(width, new long[] {8, 1}, null, SEED, "top");
      nb = bottom.numTensors();
      nc = cross == null ? 0 : cross.numTensors();
      long[] counts = new long[(int) (nb + nc + top.numTensors())];
      for (int i = 0; i < counts.length; ++i) {
        counts[i] = i < nb        ? bottom.tensorCount(i)
                    : i < nb + nc ? cross.tensorCount(i - nb)
                                  : top.tensorCount(i - nb - nc);
      }
      ddp = Bucketer.create(world, counts,
                            new Bucketer.Options().firstBucketBytes(256).bucketCapBytes(512));
      Config.Optimizer adam = new Config.Optimizer();
      adam.type = OptimizerType.ADAM;
      adam.learningRate = 0.01f;
      opt = DenseOptimizer.create(adam);
      inter = Buffers.floats(B * width);
      dInter = Buffers.floats(B * width);
    }

    double step(int step, int rank) {
      int[] lengths = new int[F * B];
      long[] ids = new long[F * B];
      for (int b = 0; b < B; ++b) {
        int g = rank * B + b;
        for (int j = 0; j < ND; ++j) x.put(b * ND + j, dense(step, g, j));
        for (int f = 0; f < F; ++f) {
          lengths[f * B + b] = 1;
          ids[f * B + b] = id(step, g, f);
        }
        labels.put(b, label(step, g));
      }
      bottom.useBucketerGrads(ddp, 0);
      if (cross != null) cross.useBucketerGrads(ddp, nb);
      top.useBucketerGrads(ddp, nb + nc);
      ddp.zeroGrad();
      bottom.forward(x, B, botOut);
      coll.forward(Kjt.of(B, F, lengths, ids), embOut);
      if (cross == null) {
        Dense.dotInteractionForward(botOut, embOut, B, F, D, inter);
      } else {
        for (int b = 0; b < B; ++b) {
          for (int k = 0; k < D; ++k) x0.put(b * (F + 1) * D + k, botOut.get(b * D + k));
          for (int k = 0; k < F * D; ++k) x0.put(b * (F + 1) * D + D + k, embOut.get(b * F * D + k));
        }
        cross.forward(x0, B, inter);
      }
      top.forward(inter, B, logits);
      double loss = Dense.bceWithLogits(logits, labels, B, dlogits);
      top.backward(dlogits, dInter, ddp, nb + nc);
      if (cross == null) {
        Dense.dotInteractionBackward(botOut, embOut, dInter, B, F, D, dBot, dEmb);
      } else {
        cross.backward(dInter, dX0, ddp, nb);
        for (int b = 0; b < B; ++b) {
          for (int k = 0; k < D; ++k) dBot.put(b * D + k, dX0.get(b * (F + 1) * D + k));
          for (int k = 0; k < F * D; ++k) dEmb.put(b * F * D + k, dX0.get(b * (F + 1) * D + D + k));
        }
      }
      coll.backward(dEmb);
      bottom.backward(dBot, null, ddp, 0);
      ddp.finish();
      if (cross == null) {
        opt.step(bottom, top);
      } else {
        opt.step(bottom, cross, top);
      }
      mesh.step(coll);
      return loss;
    }

    @Override
    public void close() {
      opt.close();
      ddp.close();
      top.close();
      if (cross != null) cross.close();
      bottom.close();
      coll.close();
      mesh.close();
      plan.close();
    }
  }

  static Path referenceFile() {
    String path = System.getenv("SHARDREC_DLRM_REF");
    assertNotNull(path, "SHARDREC_DLRM_REF must name the output of dlrm_ref (ctest sets it)");
    return Path.of(path);
  }

  @Test
  void trainsLikeTheCModelWithDot() throws Exception {
    trainLikeTheCModel("dot", 8);
  }

  @Test
  void trainsLikeTheCModelWithDcn() throws Exception {
    trainLikeTheCModel("dcn", 14);
  }

  void trainLikeTheCModel(String variant, int numTensors) throws Exception {
    List<String> lines = Files.readAllLines(referenceFile());
    double[][] want = new double[STEPS][WORLD];
    Map<String, float[]> wantTensors = new LinkedHashMap<>();
    String section = "";
    for (String line : lines) {
      String[] p = line.trim().split(" ");
      if (p[0].equals("variant")) section = p[1];
      if (!p[0].equals("world") && !p[0].equals("steps") && !section.equals(variant)) continue;
      if (p[0].equals("world")) assertEquals(WORLD, Integer.parseInt(p[1]));
      if (p[0].equals("steps")) assertEquals(STEPS, Integer.parseInt(p[1]));
      if (p[0].equals("loss")) {
        want[Integer.parseInt(p[1])][Integer.parseInt(p[2])] = Double.parseDouble(p[3]);
      }
      if (p[0].equals("tensor")) {
        int n = Integer.parseInt(p[2]);
        assertEquals(n + 3, p.length, "tensor line " + p[1]);
        float[] v = new float[n];
        for (int k = 0; k < n; ++k) v[k] = Float.intBitsToFloat(Integer.parseUnsignedInt(p[3 + k], 16));
        wantTensors.put(p[1], v);
      }
    }
    assertEquals(numTensors, wantTensors.size(), variant + ": tensors in the reference");

    Dense.setBlasThreads(1);
    assertEquals(1, Dense.blasThreads());
    Comm[] comms = Comm.createLocalGroup(WORLD);
    ExecutorService pool = Executors.newFixedThreadPool(WORLD);
    double[][] got = new double[STEPS][WORLD];
    Map<String, float[]> gotTensors = new LinkedHashMap<>();
    long[] buckets = new long[1];
    try {
      List<Future<?>> futures = new ArrayList<>();
      for (int r = 0; r < WORLD; ++r) {
        final int rank = r;
        futures.add(pool.submit(() -> {
          try (Rank m = new Rank(comms[rank], variant.equals("dcn"))) {
            for (int s = 0; s < STEPS; ++s) got[s][rank] = m.step(s, rank);
            if (rank == 0) {
              for (DenseLayer l : new DenseLayer[] {m.bottom, m.cross, m.top}) {
                if (l == null) continue;
                for (long i = 0; i < l.numTensors(); ++i) {
                  gotTensors.put(l.tensorName(i), l.getParam(i));
                }
              }
              Bucketer.Stats st = m.ddp.stats();
              assertEquals(STEPS, st.steps);
              buckets[0] = st.buckets;
            }
          }
          return null;
        }));
      }
      for (Future<?> f : futures) f.get();
    } finally {
      pool.shutdown();
      for (Comm c : comms) c.close();
    }
    assertTrue(buckets[0] > 1, "small caps give several buckets, got " + buckets[0]);
    for (int s = 0; s < STEPS; ++s) {
      for (int r = 0; r < WORLD; ++r) {
        assertEquals(Double.doubleToLongBits(want[s][r]), Double.doubleToLongBits(got[s][r]),
                     variant + " loss of step " + s + " rank " + r + ": C " + want[s][r] + ", Java "
                         + got[s][r]);
      }
    }
    assertEquals(wantTensors.keySet(), gotTensors.keySet());
    for (Map.Entry<String, float[]> e : wantTensors.entrySet()) {
      assertArrayEquals(e.getValue(), gotTensors.get(e.getKey()),
                        variant + " tensor " + e.getKey());
    }
  }

  @Test
  void misuseCarriesStatusAndMessage() {
    ShardrecException bad =
        assertThrows(ShardrecException.class, () -> Mlp.create(4, new long[] {0}, null, 1, "m"));
    assertEquals(ShardrecException.EINVAL, bad.code());
    assertTrue(!bad.getMessage().isEmpty());
    assertThrows(ShardrecException.class,
                 () -> Mlp.create(4, new long[] {2}, new Activation[0], 1, "m"));
    try (Mlp m = Mlp.create(2, new long[] {3, 1}, null, 1, null)) {
      assertEquals("mlp.0.weight", m.tensorName(0));
      assertThrows(ShardrecException.class, () -> m.forward(Buffers.floats(3), 2,
                                                                   Buffers.floats(2)));
      ShardrecException noForward = assertThrows(
          ShardrecException.class, () -> m.backward(Buffers.floats(0), null));
      assertEquals(ShardrecException.EUSAGE, noForward.code());
    }
    Comm[] one = Comm.createLocalGroup(1);
    try (Bucketer ddp = Bucketer.create(one[0], new long[] {3, 2}, null)) {
      ddp.markReady(1);
      ShardrecException twice = assertThrows(ShardrecException.class, () -> ddp.markReady(1));
      assertEquals(ShardrecException.EUSAGE, twice.code());
      ShardrecException missing = assertThrows(ShardrecException.class, ddp::finish);
      assertEquals(ShardrecException.EUSAGE, missing.code());
      assertArrayEquals(new long[] {1, 0}, ddp.bucket(0));
      try (Mlp small = Mlp.create(1, new long[] {2}, null, 1, "s")) {
        // weight 2, bias 2 elements against gradients of 3 and 2: refused before binding.
        assertThrows(ShardrecException.class, () -> small.useBucketerGrads(ddp, 0));
      }
    } finally {
      one[0].close();
    }
  }

  @Test
  void noSyncStepsOnlyAccumulate() {
    Comm[] one = Comm.createLocalGroup(1);
    try (Bucketer ddp = Bucketer.create(one[0], new long[] {2, 2}, new Bucketer.Options());
         Mlp m = Mlp.create(1, new long[] {2}, new Activation[] {Activation.NONE}, 3, "m")) {
      m.useBucketerGrads(ddp, 0);
      ddp.zeroGrad();
      ddp.setSync(false);
      for (int step = 0; step < 2; ++step) {
        m.forward(Buffers.of(new float[] {1f}), 1, Buffers.floats(2));
        m.backward(Buffers.of(new float[] {1f, 2f}), null, ddp, 0);
        ddp.finish();
      }
      assertEquals(0, ddp.stats().steps, "no_sync steps are not synced steps");
      assertArrayEquals(new float[] {2f, 4f}, m.getGrad(1), "bias gradients accumulate");
      ddp.setSync(true);
      ddp.markReady(0);
      ddp.markReady(1);
      ddp.finish();
      assertEquals(1, ddp.stats().steps);
      m.useBucketerGrads(ddp, 0);
      assertArrayEquals(new float[] {2f, 4f}, m.getGrad(1), "world 1: the average is the sum");
    } finally {
      one[0].close();
    }
  }

  @Test
  void fsdpStepAtWorldOneIsSgd() {
    Comm[] one = Comm.createLocalGroup(1);
    Config.Optimizer sgd = new Config.Optimizer();
    sgd.learningRate = 0.5f;
    float[] initial = {1f, 2f, 3f, 4f, 5f};
    try (Fsdp fsdp = Fsdp.create(one[0], new long[] {3, 2}, initial, sgd)) {
      assertArrayEquals(new float[] {1f, 2f, 3f}, fsdp.gather(0, 1));
      fsdp.release(0);
      assertArrayEquals(new float[] {4f, 5f}, fsdp.gather(1, -1));
      fsdp.release(1);
      fsdp.addGrad(0, new float[] {2f, 0f, -2f});
      fsdp.addGrad(1, new float[] {1f, 1f});
      fsdp.reduceGrad(0);
      fsdp.reduceGrad(1);
      fsdp.step();
      assertArrayEquals(new float[] {0f, 2f, 4f}, fsdp.shard(0));
      assertArrayEquals(new float[] {3.5f, 4.5f}, fsdp.shard(1));
      assertEquals(0, fsdp.shardOffset(1));
      long[] mem = fsdp.memory();
      assertTrue(mem[1] >= mem[0] && mem[1] > 0, "memory " + mem[0] + " / " + mem[1]);
    } finally {
      one[0].close();
    }
  }

  @Test
  void dotInteractionMatchesItsDefinition() throws IOException {
    // One sample, dense (1, 2), two embeddings (3, 4) and (5, 6): out = dense, then the dot
    // products (e0.dense, e1.dense, e1.e0) of the strictly lower triangle.
    FloatBuffer out = Buffers.floats(Dense.dotInteractionWidth(2, 2));
    Dense.dotInteractionForward(Buffers.of(new float[] {1, 2}), Buffers.of(new float[] {3, 4, 5, 6}),
                                1, 2, 2, out);
    float[] got = new float[out.capacity()];
    out.get(got);
    assertArrayEquals(new float[] {1, 2, 11, 17, 39}, got);
    FloatBuffer dl = Buffers.floats(2);
    double loss = Dense.bceWithLogits(Buffers.of(new float[] {0f, 0f}),
                                      Buffers.of(new float[] {1f, 0f}), 2.0, dl);
    assertEquals(Math.log(2.0), loss, 1e-12);
    assertEquals(-0.25f, dl.get(0));
    assertEquals(0.25f, dl.get(1));
  }
}
