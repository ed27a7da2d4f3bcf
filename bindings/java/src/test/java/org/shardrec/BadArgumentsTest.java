// Misuse that once surfaced as a bare NullPointerException or ArithmeticException now gets a
// clear error: IllegalArgumentException naming the parameter.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

class BadArgumentsTest {
  /** {@code call} throws IllegalArgumentException whose message contains {@code text}. */
  private static void refused(String text, Executable call) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call);
    assertTrue(e.getMessage() != null && e.getMessage().contains(text), e.toString());
  }

  @Test
  void nullArraysAreRefusedNamingTheParameter() {
    refused("lengths must not be null", () -> Kjt.of(2, 1, null, null));
    refused("values must not be null", () -> Kjt.of(2, 1, new int[] {1, 1}, null));
    refused("lengths must not be null", () -> Kjt.of(2, 1, null, new long[] {0, 1}, null));
    refused("values must not be null", () -> Buffers.of((float[]) null));
    refused("values must not be null", () -> Buffers.of((long[]) null));
  }

  @Test
  void nullArgumentsOfACollectionAreRefusedNamingThem() throws Exception {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0]) {
      refused("plan must not be null", () -> EmbeddingCollection.create(null, comm, null, null));
      refused("comm must not be null",
              () -> EmbeddingCollection.create(plan, (Comm) null, null, null));
      refused("world must not be null", () -> Mesh.create(null, null));
      refused("comm must not be null", () -> Config.Topology.fromComm(null));
      refused("comm must not be null", () -> Bucketer.create(null, new long[] {1}, null));
      refused("coll must not be null", () -> Checkpoint.save(null, "/nonexistent/ckpt"));
      try (EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
        refused("batch must not be null", () -> coll.forward((Kjt) null));
        Kjt batch = Training.batch(0, 0, 1);
        float[] out = coll.forward(batch);
        refused("grad must not be null", () -> coll.backward((float[]) null));
        refused("weights must not be null", () -> coll.setWeights("t0", (float[]) null));
        refused("values must not be null", () -> coll.setState("t0", "momentum1", null));
        // Nothing was half-done: the backward of the forward still trains.
        coll.backward(out);
        assertEquals(1, coll.numSteps());
      }
    }
  }

  @Test
  void aCountTooLargeForAnyBufferIsRefusedNamingIt() {
    try (Comm comm = Comm.createLocalGroup(1)[0]) {
      FloatBuffer b = Buffers.floats(4);
      for (long count : new long[] {Long.MAX_VALUE / 2, Long.MAX_VALUE}) {
        refused("count " + count + " is too large",
                () -> comm.allreduce(b, b, count, DType.FLOAT32, ReduceOp.SUM));
        refused("count " + count + " is too large",
                () -> comm.broadcast(b, count, DType.FLOAT64, 0));
        refused("count " + count + " is too large",
                () -> comm.allgather(b, Buffers.floats(4), count, DType.FLOAT32));
      }
      refused("op must not be null", () -> comm.allreduce(b, b, 4, DType.FLOAT32, null));
      // The communicator is unharmed.
      comm.allreduceSum(b);
    }
  }
}
