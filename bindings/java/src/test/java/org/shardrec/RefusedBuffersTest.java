// A buffer the binding refuses on one rank (wrong size or kind, bad shape) fails the collective
// forward, backward or weight/state accessor on every rank in the same call, and the ranks stay
// in step: the refusing rank throws ShardrecException EINVAL naming its argument, the others
// ShardrecException (EINVAL, naming the rank), and training goes on exactly as if nothing had
// been refused. A null batch, gradient, weights or state array is refused the same way.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class RefusedBuffersTest {
  /** A call that rank `bad` makes with a refused argument and the other rank correctly. */
  private interface Call {
    void run(boolean refused);
  }

  /**
   * Runs `call` on both ranks: `bad` must throw ShardrecException EINVAL (the binding's own
   * check, not naming a rank), the other EINVAL naming `bad`.
   */
  private static void refusedTogether(int rank, int bad, Call call) {
    if (rank == bad) {
      ShardrecException e = assertThrows(ShardrecException.class, () -> call.run(true));
      assertEquals(ShardrecException.EINVAL, e.code(), e.getMessage());
    } else {
      ShardrecException e = assertThrows(ShardrecException.class, () -> call.run(false));
      assertEquals(ShardrecException.EINVAL, e.code(), e.getMessage());
      assertTrue(e.getMessage().contains("rank " + bad), e.getMessage());
    }
  }

  @Test
  void refusedBuffersFailEveryRankAndKeepTheRanksInStep() throws Exception {
    float[][] reference = Training.train(2, 1);
    Comm[] comms = Comm.createLocalGroup(2);
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try (Plan plan = Training.plan(2)) {
      List<Future<float[][]>> ranks = new ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        ranks.add(pool.submit(() -> {
          try (EmbeddingCollection coll = EmbeddingCollection.create(
                   plan, comms[rank], Training.optimizer(),
                   new Config.EmbeddingOptions().seed(7))) {
            Kjt batch = Training.batch(0, rank, 1);
            int need = (int) coll.outputSize(batch);
            long[] shape = {batch.batchSize(), coll.outputDim()};
            // Forward: an output one float short on rank 1, then a heap buffer on rank 0, then a
            // shape that does not match the buffer on rank 1.
            refusedTogether(rank, 1,
                            bad -> coll.forward(batch, Buffers.floats(bad ? need - 1 : need)));
            refusedTogether(rank, 0, bad -> coll.forward(
                batch, bad ? FloatBuffer.allocate(need) : Buffers.floats(need)));
            refusedTogether(rank, 1, bad -> coll.forward(
                batch, Buffers.floats(need), bad ? new long[] {need + 1} : shape));
            // A null batch, in each forward and the pipelined start: the same, never a
            // NullPointerException on one rank with the other left waiting.
            refusedTogether(rank, 0, bad -> coll.forward(bad ? null : batch, Buffers.floats(need)));
            refusedTogether(rank, 1, bad -> coll.forward(bad ? null : batch));
            refusedTogether(rank, 0,
                            bad -> coll.forward(bad ? null : batch, Buffers.floats(need), shape));
            refusedTogether(rank, 1, bad -> {
              coll.inputDistStart(bad ? null : batch);
              coll.inputDistWait();
            });
            // The forward, then the backward refused (a gradient one float long on rank 0, a
            // negative extent on rank 1) before the one that trains.
            FloatBuffer out = Buffers.floats(need);
            coll.forward(batch, out);
            float[] o = Buffers.toArray(out);
            float[] grad = new float[need];
            for (int i = 0; i < need; ++i) grad[i] = o[i] / batch.batchSize();
            refusedTogether(rank, 0, bad -> coll.backward(bad ? new float[need + 1] : grad));
            refusedTogether(rank, 1, bad -> coll.backward(bad ? null : grad));
            refusedTogether(rank, 1, bad -> coll.backward(
                Buffers.of(grad), bad ? new long[] {-1, coll.outputDim()} : shape));
            coll.backward(grad);
            assertEquals(1, coll.numSteps());
            // The collective weight and state accessors: a short buffer, a heap one, a long one.
            int n = (int) (Training.ROWS[1] * Training.DIMS[1]);
            refusedTogether(rank, 1, bad -> coll.getWeights("t1", Buffers.floats(bad ? n - 1 : n)));
            float[] w1 = coll.getWeights("t1");
            refusedTogether(rank, 0, bad -> coll.setWeights(
                "t1", bad ? FloatBuffer.wrap(new float[n]) : Buffers.of(w1)));
            refusedTogether(rank, 1, bad -> coll.setWeights("t1", bad ? null : w1));
            float[] m1 = coll.getState("t1", "momentum1");
            refusedTogether(rank, 1,
                            bad -> coll.setState("t1", "momentum1", bad ? new float[n + 1] : m1));
            refusedTogether(rank, 0, bad -> coll.setState("t1", "momentum1", bad ? null : m1));
            return Training.weights(coll);
          }
        }));
      }
      for (Future<float[][]> f : ranks) {
        float[][] got = f.get();
        for (int t = 0; t < reference.length; ++t) assertArrayEquals(reference[t], got[t]);
      }
    } finally {
      pool.shutdown();
      for (Comm c : comms) c.close();
    }
  }

  /** Local group sizes outside [1, 1024] are EINVAL naming the size, before anything is allocated. */
  @Test
  void localGroupSizesOutsideTheLimitAreRefusedNamingThem() {
    for (int n : new int[] {-1, 0, 1025, Integer.MAX_VALUE}) {
      ShardrecException e = assertThrows(ShardrecException.class, () -> Comm.createLocalGroup(n));
      assertEquals(ShardrecException.EINVAL, e.code());
      assertTrue(e.getMessage().contains(Integer.toString(n)), e.getMessage());
    }
  }
}
