// A forward the library refuses leaves no expected gradient size behind in the Java binding:
// the backward that follows reaches C and throws its SHARDREC_EUSAGE (backward needs a forward
// first; docs/semantics.md), as in C, Go and Rust, instead of a size check against an earlier
// successful forward. Every forward variant: plain, tensor, VBE, VBE tensor, distributed, and a
// refused pipelined start.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class BackwardAfterRefusedForwardTest {
  // One sample, an id past the end of t0 (40 rows): sizes the binding accepts, an id the library
  // refuses.
  private static final Kjt BAD = Kjt.of(1, 3, new int[] {1, 1, 1}, new long[] {1000, 0, 0});
  private static final VbeKjt BAD_VBE = VbeKjt.of(1, 3, new int[] {1, 1, 1},
                                                  new long[] {1000, 0, 0}, null,
                                                  new long[] {1, 1, 1}, null);
  // One sample of one feature where the plan has three: refused when the pipelined start begins.
  private static final Kjt WRONG_FEATURES = Kjt.of(1, 1, new int[] {1}, new long[] {0});

  private interface Refused {
    void run(EmbeddingCollection coll, long dim);
  }

  /**
   * After a trained step, {@code refused} throws ShardrecException; a backward with a gradient
   * of another size than that step's then throws EUSAGE, changes nothing, and the next step
   * trains.
   */
  private static void backwardAfter(String what, Refused refused) {
    Comm[] comms = Comm.createLocalGroup(1);
    try (Plan plan = Training.plan(1, OptimizerType.SGD);
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comms[0], null, null)) {
      long dim = coll.outputDim();
      coll.backward(coll.forward(Training.batch(0, 0, 1)));  // LOCAL_BATCH x dim floats
      assertThrows(ShardrecException.class, () -> refused.run(coll, dim), what);
      ShardrecException e =
          assertThrows(ShardrecException.class, () -> coll.backward(new float[(int) dim]), what);
      assertEquals(ShardrecException.EUSAGE, e.code(), what + ": " + e);
      assertEquals(1, coll.numSteps(), what);
      coll.backward(coll.forward(Training.batch(1, 0, 1)));
      assertEquals(2, coll.numSteps(), what);
    } finally {
      comms[0].close();
    }
  }

  @Test
  void everyRefusedForwardLeavesTheBackwardToTheLibrary() {
    backwardAfter("forward", (c, dim) -> c.forward(BAD));
    backwardAfter("forward into a tensor",
                  (c, dim) -> c.forward(BAD, Buffers.floats(dim), new long[] {1, dim}));
    backwardAfter("forwardVbe", (c, dim) -> c.forwardVbe(BAD_VBE));
    backwardAfter("forwardVbe into a buffer",
                  (c, dim) -> c.forwardVbe(BAD_VBE, Buffers.floats(c.outputSizeVbe(BAD_VBE))));
    backwardAfter("forwardVbe into a tensor", (c, dim) -> {
      long n = c.outputSizeVbe(BAD_VBE);
      c.forwardVbe(BAD_VBE, Buffers.floats(n), new long[] {n});
    });
    // The library refuses a last extent that is not the output width.
    backwardAfter("forwardDistributed into a tensor", (c, dim) -> {
      Kjt good = Training.batch(2, 0, 1);
      c.inputDistStart(good);
      c.inputDistWait();
      long rows = good.batchSize();
      c.forwardDistributed(Buffers.floats(rows * (dim + 1)), new long[] {rows, dim + 1});
    });
    backwardAfter("inputDistStart", (c, dim) -> c.inputDistStart(WRONG_FEATURES));
  }
}
