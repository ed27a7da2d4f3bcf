// Quantized communication through the Java binding: bf16 and FP8 collectives at world 2 stay close
// to the exact run and differ from it (the option reached the library); an unknown C value has no enum
// constant; timings report the embedding collectives.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class QCommsTest {
  @Test
  void bf16CommunicationTrainsCloseToExact() throws Exception {
    float[][] exact = Training.train(2, 2);
    float[][] bf16 = Training.train(
        2, 2,
        new Config.EmbeddingOptions().seed(7).commEncoding(CommEncoding.BF16, CommEncoding.BF16));
    boolean differs = false;
    for (int t = 0; t < Training.TABLES.length; ++t) {
      for (int i = 0; i < exact[t].length; ++i) {
        // bf16 values (relative 2^-8) through Adagrad: well inside 1e-2 of the weights.
        float tol = 1e-2f * Math.max(0.1f, Math.abs(exact[t][i]));
        assertEquals(exact[t][i], bf16[t][i], tol, Training.TABLES[t] + "[" + i + "]");
        differs |= exact[t][i] != bf16[t][i];
      }
    }
    assertTrue(differs, "bf16 communication changed nothing");
  }

  @Test
  void fp8CommunicationTrainsCloseToExact() throws Exception {
    float[][] exact = Training.train(2, 2);
    float[][] fp8 = Training.train(
        2, 2,
        new Config.EmbeddingOptions().seed(7).commEncoding(
            CommEncoding.FP8_E4M3, CommEncoding.FP8_E4M3));
    boolean differs = false;
    for (int t = 0; t < Training.TABLES.length; ++t) {
      for (int i = 0; i < exact[t].length; ++i) {
        // FP8 E4M3 values (relative 2^-4) through Adagrad: inside 1e-1 of the weights.
        float tol = 1e-1f * Math.max(0.1f, Math.abs(exact[t][i]));
        assertEquals(exact[t][i], fp8[t][i], tol, Training.TABLES[t] + "[" + i + "]");
        differs |= exact[t][i] != fp8[t][i];
      }
    }
    assertTrue(differs, "FP8 communication changed nothing");
  }

  @Test
  void encodingsMapToTheirCValues() {
    assertEquals(0, CommEncoding.FP32.code());
    assertEquals(CommEncoding.BF16, CommEncoding.of(2));
    assertEquals(CommEncoding.FP8_E4M3, CommEncoding.of(3));
    assertEquals(4, CommEncoding.FP8_E5M2.code());
    assertEquals(CommEncoding.FP32, new Config.EmbeddingOptions().forwardCommEncoding);
    assertThrows(ShardrecException.class, () -> CommEncoding.of(7));
  }

  @Test
  void worldOneStepWithFp16ReportsTimings() {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comm, Training.optimizer(),
             new Config.EmbeddingOptions().commEncoding(CommEncoding.FP16, CommEncoding.FP16))) {
      Training.step(coll, Training.batch(0, 0, 1));
      EmbeddingCollection.StepTimings t = coll.stepTimings();
      assertEquals(1, t.backwards);
      assertTrue(t.embeddingCommSeconds >= 0 && t.embeddingCommSeconds <= t.collectiveSeconds);
    }
  }
}
