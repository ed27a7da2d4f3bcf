// The delta export of a dynamic table through the Java binding: mark, train, and the delta's
// rows equal what a forward reads, with a tombstone for the id LRU eviction removed.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class DynamicDeltaTest {
  private static final int DIM = 4;
  private static final int WIDTH = DIM + 2; // the fixed table's 2 columns follow

  /** One sample per id, each a bag of that id (the fixed feature reads row 0). */
  private static float[] forward(EmbeddingCollection coll, boolean train, long... ids) {
    int n = ids.length;
    int[] lengths = new int[2 * n];
    Arrays.fill(lengths, 1);
    long[] values = Arrays.copyOf(ids, 2 * n);
    float[] out = coll.forward(Kjt.of(n, 2, lengths, values));
    if (train) coll.backward(out);
    return out;
  }

  /** Byte range of tensor {@code name} in a safetensors header (from its data_offsets). */
  private static int[] range(String header, String name) {
    Matcher m = Pattern.compile("\"" + name + "\":\\{[^}]*\"data_offsets\":\\[(\\d+),(\\d+)\\]")
                    .matcher(header);
    if (!m.find()) throw new AssertionError("no tensor " + name + " in " + header);
    return new int[] {Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2))};
  }

  @Test
  void deltaAfterMarkHoldsTheForwardsRowsAndATombstone(@TempDir Path dir) throws Exception {
    List<Config.Table> tables =
        List.of(new Config.Table("dyn", 4, DIM)
                    .features(0)
                    .dynamic(new Config.DynamicTable().eviction(Eviction.LRU)),
            new Config.Table("fixed", 3, 2).features(1));
    List<Config.Feature> features = List.of(new Config.Feature("raw"), new Config.Feature("small"));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      assertEquals(ShardrecException.EUSAGE,
          assertThrows(ShardrecException.class, () -> coll.dynamicDelta("dyn")).code());
      forward(coll, true, 10, 20, 30);
      coll.dynamicMark("dyn");
      DynamicDelta d = coll.dynamicDelta("dyn");
      assertEquals(0, d.ids.length);
      assertEquals(0, d.tombstones.length);
      assertEquals(DIM, d.dim);

      // 20 trains again; 40 takes the free slot and 50 evicts the row seen longest ago, 10
      // (10 and 30 tie on last sight: the smaller id leaves).
      forward(coll, true, 20);
      forward(coll, true, 40, 50);
      d = coll.dynamicDelta("dyn");
      assertArrayEquals(new long[] {20, 40, 50}, d.ids);
      assertArrayEquals(new long[] {10}, d.tombstones);
      assertEquals(3 * DIM, d.rows.capacity());
      assertEquals(3 * DIM, d.rowsArray().length);
      // The rows are the table's current rows: what a forward of those ids reads.
      float[] out = forward(coll, false, d.ids);
      for (int i = 0; i < d.ids.length; ++i) {
        assertArrayEquals(
            Arrays.copyOfRange(out, i * WIDTH, i * WIDTH + DIM), d.row(i), "row of id " + d.ids[i]);
      }
      assertEquals(ShardrecException.EINVAL,
          assertThrows(ShardrecException.class, () -> coll.dynamicMark("fixed")).code());
      assertEquals(ShardrecException.EINVAL,
          assertThrows(ShardrecException.class, () -> coll.dynamicDelta("fixed")).code());
      assertEquals(ShardrecException.ENOTFOUND,
          assertThrows(ShardrecException.class, () -> coll.dynamicDelta("nope")).code());
    }
  }

  /**
   * At world 2 the delta is collective: a row-wise table's changes on both ranks' shards, the
   * same on both, whose rows equal what each rank's forward reads.
   */
  @Test
  void deltaGathersBothRanks() throws Exception {
    List<Config.Table> tables = List.of(new Config.Table("dyn", 64, DIM).features(0).dynamic(
        new Config.DynamicTable().eviction(Eviction.LRU)));
    List<Config.Feature> features = List.of(new Config.Feature("raw"));
    List<Config.Constraints> rowWise =
        List.of(new Config.Constraints("dyn").shardingTypes(ShardingType.ROW_WISE));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    long[][] first = {{1, 2, 3}, {101, 102, 103}};
    long[][] second = {{7, 1L << 60}, {-5, 2}};
    Comm[] comms = Comm.createLocalGroup(2);
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(2), rowWise)) {
      List<Future<DynamicDelta>> results = new ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        results.add(pool.submit(() -> {
          try (EmbeddingCollection coll =
                   EmbeddingCollection.create(plan, comms[rank], sgd, null)) {
            forwardOne(coll, true, first[rank]);
            coll.dynamicMark("dyn");
            forwardOne(coll, true, second[rank]);
            DynamicDelta d = coll.dynamicDelta("dyn");
            float[] out = forwardOne(coll, false, d.ids);
            assertArrayEquals(out, d.rowsArray(), "rank " + rank);
            return d;
          }
        }));
      }
      DynamicDelta d0 = results.get(0).get();
      DynamicDelta d1 = results.get(1).get();
      assertArrayEquals(new long[] {-5, 2, 7, 1L << 60}, d0.ids);
      assertEquals(0, d0.tombstones.length);
      assertArrayEquals(d0.ids, d1.ids);
      assertArrayEquals(d0.rowsArray(), d1.rowsArray());
    } finally {
      pool.shutdown();
      for (Comm c : comms) c.close();
    }
  }

  /** One sample per id of a one-feature collection. */
  private static float[] forwardOne(EmbeddingCollection coll, boolean train, long... ids) {
    int[] lengths = new int[ids.length];
    Arrays.fill(lengths, 1);
    float[] out = coll.forward(Kjt.of(ids.length, 1, lengths, ids));
    if (train) coll.backward(out);
    return out;
  }
}
