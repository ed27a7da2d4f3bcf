// The capacity hints reach the library: a host collection accepts (and ignores) them, and a
// negative one is rejected with the library's message naming the fields.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class CapacityHintsTest {
  @Test
  void hostCollectionAcceptsHintsAndNegativeOnesAreRejected() {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0]) {
      try (EmbeddingCollection coll = EmbeddingCollection.create(
               plan, comm, Training.optimizer(), new Config.EmbeddingOptions().capacity(64, 4096))) {
        Training.step(coll, Training.batch(0, 0, 1));
      }
      ShardrecException e = assertThrows(ShardrecException.class,
          ()
              -> EmbeddingCollection.create(plan, comm, Training.optimizer(),
                  new Config.EmbeddingOptions().capacity(-1, 4096)));
      assertTrue(e.getMessage().contains("max_batch_size"), e.getMessage());
    }
  }
}
