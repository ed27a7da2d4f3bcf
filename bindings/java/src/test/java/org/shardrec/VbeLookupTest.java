// JUnit tests of VBE serving lookups through the Java binding (VbeKjt): with inverse indices bit
// for bit the lookup of the expanded plain batch (fp32 and int8, weighted, on the handle and on a
// pinned snapshot); without them each feature's bags feature-major; an inverse index out of
// range refused naming the feature and sample.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class VbeLookupTest {
  private static Path root;

  /** A world-1 collection trained one step, saved to root. */
  @BeforeAll
  static void save() throws Exception {
    root = Files.createTempDirectory("shardrec_vbe_java");
    Comm[] comms = Comm.createLocalGroup(1);
    try (Plan plan = Training.plan(1, OptimizerType.SGD);
         EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comms[0], new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f),
             new Config.EmbeddingOptions().seed(5))) {
      Training.step(coll, Training.batch(0, 0, 1));
      Checkpoint.save(coll, root.toString());
    } finally {
      comms[0].close();
    }
  }

  @AfterAll
  static void removeFiles() throws Exception {
    try (java.util.stream.Stream<Path> paths = Files.walk(root)) {
      paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  // Feature f has f + 1 bags (f0 one bag, as a user's feature); bag k of feature f has
  // (f + k) % 3 + 1 ids.
  static final long[] SIZES = {1, 2, 3};
  static final int SAMPLES = 5;

  static int bagLength(int f, int k) {
    return (f + k) % 3 + 1;
  }

  static long bagId(int f, int k, int i) {
    return (f * 7L + k * 11L + i * 5L) % Training.ROWS[f];
  }

  static long inverse(int f, int b) {
    return (b + f) % SIZES[f];
  }

  static VbeKjt vbe(boolean withInverse, boolean weighted) {
    List<Integer> lengths = new ArrayList<>();
    List<Long> ids = new ArrayList<>();
    for (int f = 0; f < 3; ++f) {
      for (int k = 0; k < SIZES[f]; ++k) {
        lengths.add(bagLength(f, k));
        for (int i = 0; i < bagLength(f, k); ++i) ids.add(bagId(f, k, i));
      }
    }
    long[] inv = null;
    if (withInverse) {
      inv = new long[3 * SAMPLES];
      for (int f = 0; f < 3; ++f) {
        for (int b = 0; b < SAMPLES; ++b) inv[f * SAMPLES + b] = inverse(f, b);
      }
    }
    return VbeKjt.of(withInverse ? SAMPLES : 3, 3,
                     lengths.stream().mapToInt(Integer::intValue).toArray(),
                     ids.stream().mapToLong(Long::longValue).toArray(),
                     weighted ? weights(ids.size(), 0) : null, SIZES, inv);
  }

  static float[] weights(int n, int from) {
    float[] w = new float[n];
    for (int i = 0; i < n; ++i) w[i] = ((from + i) % 5 - 2) * 0.375f;
    return w;
  }

  /** The plain batch bag (f, b) of which is bag inverse(f, b) of feature f. */
  static Kjt expanded(boolean weighted) {
    List<Integer> lengths = new ArrayList<>();
    List<Long> ids = new ArrayList<>();
    List<Float> w = new ArrayList<>();
    for (int f = 0; f < 3; ++f) {
      int first = 0; // the feature's first value in the VBE batch
      for (int g = 0; g < f; ++g) {
        for (int k = 0; k < SIZES[g]; ++k) first += bagLength(g, k);
      }
      for (int b = 0; b < SAMPLES; ++b) {
        int k = (int) inverse(f, b);
        int at = first;
        for (int j = 0; j < k; ++j) at += bagLength(f, j);
        lengths.add(bagLength(f, k));
        for (int i = 0; i < bagLength(f, k); ++i) {
          ids.add(bagId(f, k, i));
          w.add(weights(1, at + i)[0]);
        }
      }
    }
    float[] wa = new float[w.size()];
    for (int i = 0; i < wa.length; ++i) wa[i] = w.get(i);
    return Kjt.of(SAMPLES, 3, lengths.stream().mapToInt(Integer::intValue).toArray(),
                  ids.stream().mapToLong(Long::longValue).toArray(), weighted ? wa : null);
  }

  @Test
  void inverseIndicesEqualTheExpandedBatch() {
    for (ServingStorage storage : new ServingStorage[] {ServingStorage.FP32, ServingStorage.INT8}) {
      for (boolean weighted : new boolean[] {false, true}) {
        try (Inference inf =
                 Inference.open(root.toString(), new Inference.Options().defaultStorage(storage))) {
          VbeKjt v = vbe(true, weighted);
          float[] want = inf.lookup(expanded(weighted));
          assertEquals(want.length, inf.outputSizeVbe(v));
          assertArrayEquals(want, inf.lookupVbe(v), storage + " weighted " + weighted);
          try (InferenceSnapshot s = inf.pin()) {
            FloatBuffer out = Buffers.floats(inf.outputSizeVbe(v));
            s.lookupVbe(v, out);
            assertArrayEquals(want, Buffers.toArray(out));
          }
        }
      }
    }
  }

  @Test
  void withoutInverseIndicesEachFeatureIsFeatureMajor() {
    try (Inference inf = Inference.open(root.toString())) {
      float[] all = inf.lookup(expanded(false));
      float[] got = inf.lookupVbe(vbe(false, false));
      int width = 8 + 4 + 6;
      assertEquals(1 * 8 + 2 * 4 + 3 * 6, got.length);
      int at = 0, col = 0;
      for (int f = 0; f < 3; ++f) {
        for (int k = 0; k < SIZES[f]; ++k) {
          // Bag k of feature f is what expanded sample b reads when inverse(f, b) == k.
          int b = 0;
          while (b < SAMPLES && inverse(f, b) != k) ++b;
          assertTrue(b < SAMPLES, "every bag is read");
          for (int c = 0; c < Training.DIMS[f]; ++c) {
            assertEquals(all[b * width + col + c], got[at++], "feature " + f + " bag " + k);
          }
        }
        col += Training.DIMS[f];
      }
    }
  }

  @Test
  void anInverseIndexOutOfRangeNamesFeatureAndSample() {
    try (Inference inf = Inference.open(root.toString())) {
      VbeKjt good = vbe(true, false);
      long[] inv = new long[3 * SAMPLES];
      inv[2 * SAMPLES + 4] = 3; // feature f2 has 3 bags
      VbeKjt bad = new VbeKjt(SAMPLES, 3, good.lengths, good.values, null,
                              good.featureBatchSizes, Buffers.of(inv));
      FloatBuffer out = Buffers.floats(SAMPLES * 18);
      ShardrecException e = assertThrows(ShardrecException.class, () -> inf.lookupVbe(bad, out));
      assertEquals(ShardrecException.EINVAL, e.code());
      assertTrue(e.getMessage().contains("f2") && e.getMessage().contains("sample 4"),
                 e.getMessage());
      for (int i = 0; i < out.capacity(); ++i) assertEquals(0f, out.get(i));
    }
  }
}
