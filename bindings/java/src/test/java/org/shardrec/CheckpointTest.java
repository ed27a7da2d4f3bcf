// JUnit tests of checkpoints through the Java binding: a 2-rank Adagrad collection saved and
// loaded into a 1-rank collection of another seed bit for bit (resharding), a table exported
// and imported, a missing checkpoint reported as SHARDREC_ENOTFOUND.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CheckpointTest {
  private static Config.Optimizer adagrad() {
    return new Config.Optimizer().type(OptimizerType.ADAGRAD).learningRate(0.1f);
  }

  private static List<float[]> everything(EmbeddingCollection coll) {
    List<float[]> out = new ArrayList<>();
    for (String t : Training.TABLES) {
      out.add(coll.getWeights(t));
      out.add(coll.getState(t, "momentum1"));
    }
    return out;
  }

  @Test
  void saveOnTwoRanksLoadOnOneIsBitExact(@TempDir Path dir) throws Exception {
    String export = dir.resolve("t1.safetensors").toString();
    Comm[] comms = Comm.createLocalGroup(2);
    ExecutorService pool = Executors.newFixedThreadPool(2);
    List<float[]> saved;
    try (Plan plan = Training.plan(2)) {
      List<Future<List<float[]>>> futures = new ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        futures.add(pool.submit(() -> {
          try (EmbeddingCollection coll = EmbeddingCollection.create(
                   plan, comms[rank], adagrad(), new Config.EmbeddingOptions().seed(7))) {
            for (int s = 0; s < 2; ++s) Training.step(coll, Training.batch(s, rank, 1));
            Checkpoint.save(coll, dir.toString());
            Checkpoint.exportTable(coll, "t1", export, true);
            return everything(coll);
          }
        }));
      }
      saved = futures.get(0).get();
      futures.get(1).get();
    } finally {
      pool.shutdown();
      for (Comm c : comms) c.close();
    }
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comm, adagrad(), new Config.EmbeddingOptions().seed(99));
         EmbeddingCollection fresh = EmbeddingCollection.create(
             plan, comm, adagrad(), new Config.EmbeddingOptions().seed(5))) {
      Checkpoint.load(coll, dir.toString(), null);
      List<float[]> loaded = everything(coll);
      for (int i = 0; i < saved.size(); ++i) assertArrayEquals(saved.get(i), loaded.get(i));
      assertEquals(2, coll.numSteps());
      Checkpoint.importTable(fresh, "t1", export, true);
      List<float[]> imported = everything(fresh);
      assertArrayEquals(saved.get(2), imported.get(2));
      assertArrayEquals(saved.get(3), imported.get(3));
      ShardrecException e = assertThrows(ShardrecException.class,
          ()
              -> Checkpoint.load(fresh, dir.resolve("missing").toString(),
                                 new Checkpoint.Options().allowPartialLoad(true)));
      assertEquals(-11, e.code());
    }
  }

  // Paths and names reach C as the String's UTF-8 bytes: a directory named with a character beyond
  // the BMP is the one Java sees (JNI's modified UTF-8 would have written it as two surrogates), and
  // a NUL, which C would cut the string at, is refused.
  @Test
  void pathsAreUtf8AndANulIsRefused(@TempDir Path dir) throws Exception {
    Path ck = dir.resolve("ckpt-\uD83D\uDE80-\u00e9");
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comm, adagrad(), new Config.EmbeddingOptions().seed(7))) {
      Training.step(coll, Training.batch(0, 0, 1));
      Checkpoint.save(coll, ck.toString());
      assertTrue(Files.exists(ck.resolve("manifest.json")), "manifest under " + ck);
      Checkpoint.load(coll, ck.toString(), null);
      ShardrecException nul = assertThrows(ShardrecException.class,
          () -> Checkpoint.save(coll, dir.resolve("a").toString() + "\0b"));
      assertTrue(nul.getMessage().contains("NUL"), nul.getMessage());
      assertFalse(Files.exists(dir.resolve("a")));
      assertThrows(ShardrecException.class, () -> coll.getWeights("t1\0x"));
      // A null table is a bad argument (EINVAL), not an unknown table.
      ShardrecException none = assertThrows(ShardrecException.class, () -> coll.getWeights(null));
      assertEquals(ShardrecException.EINVAL, none.code(), none.getMessage());
      none = assertThrows(ShardrecException.class,
          () -> coll.setWeights(null, new float[] {1f}));
      assertEquals(ShardrecException.EINVAL, none.code(), none.getMessage());
    }
  }
}
