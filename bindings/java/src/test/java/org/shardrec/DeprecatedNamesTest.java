// The deprecated constants of the binding's earlier docs (Config.ROW_WISE,
// Config.Optimizer.ADAGRAD, Comm.REDUCE_SUM, Mesh.SYNC_WEIGHTS_ONLY, ...) still compile and
// behave like the enum constants that replaced them: each is the same constant, and a program
// written with the old names trains bit for bit like the same program with the new ones.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.nio.FloatBuffer;
import java.util.List;
import org.junit.jupiter.api.Test;

@SuppressWarnings("deprecation")
class DeprecatedNamesTest {
  @Test
  void everyOldNameIsTheNewConstant() {
    assertSame(ShardingType.DATA_PARALLEL, Config.DATA_PARALLEL);
    assertSame(ShardingType.TABLE_WISE, Config.TABLE_WISE);
    assertSame(ShardingType.ROW_WISE, Config.ROW_WISE);
    assertSame(ShardingType.COLUMN_WISE, Config.COLUMN_WISE);
    assertSame(ShardingType.TABLE_ROW_WISE, Config.TABLE_ROW_WISE);
    assertSame(ShardingType.TABLE_COLUMN_WISE, Config.TABLE_COLUMN_WISE);
    assertSame(ShardingType.GRID, Config.GRID);
    assertSame(Pooling.SUM, Config.POOLING_SUM);
    assertSame(Pooling.MEAN, Config.POOLING_MEAN);
    assertSame(Pooling.NONE, Config.POOLING_NONE);
    assertSame(InitKind.DEFAULT, Config.INIT_DEFAULT);
    assertSame(InitKind.UNIFORM, Config.INIT_UNIFORM);
    assertSame(InitKind.CONSTANT, Config.INIT_CONSTANT);
    assertSame(DType.FLOAT32, Config.DTYPE_FLOAT32);
    assertSame(DType.FLOAT64, Config.DTYPE_FLOAT64);
    assertSame(DType.INT32, Config.DTYPE_INT32);
    assertSame(DType.INT64, Config.DTYPE_INT64);
    assertSame(OptimizerType.SGD, Config.Optimizer.SGD);
    assertSame(OptimizerType.ADAGRAD, Config.Optimizer.ADAGRAD);
    assertSame(OptimizerType.ROWWISE_ADAGRAD, Config.Optimizer.ROWWISE_ADAGRAD);
    assertSame(OptimizerType.ADAM, Config.Optimizer.ADAM);
    assertSame(OptimizerType.PARTIAL_ROWWISE_ADAM, Config.Optimizer.PARTIAL_ROWWISE_ADAM);
    assertSame(OptimizerType.LAMB, Config.Optimizer.LAMB);
    assertSame(BoundsPolicy.ERROR, Config.EmbeddingOptions.BOUNDS_ERROR);
    assertSame(BoundsPolicy.CLAMP, Config.EmbeddingOptions.BOUNDS_CLAMP);
    assertSame(BoundsPolicy.SKIP, Config.EmbeddingOptions.BOUNDS_SKIP);
    assertSame(ReduceOp.SUM, Comm.REDUCE_SUM);
    assertSame(ReduceOp.AVG, Comm.REDUCE_AVG);
    assertSame(ReduceOp.MAX, Comm.REDUCE_MAX);
    assertSame(ReduceOp.MIN, Comm.REDUCE_MIN);
    assertSame(MeshLayout.DEFAULT, Mesh.LAYOUT_DEFAULT);
    assertSame(MeshLayout.INTER_HOST, Mesh.LAYOUT_INTER_HOST);
    assertSame(SyncMode.DEFAULT, Mesh.SYNC_DEFAULT);
    assertSame(SyncMode.WEIGHTS_AND_STATE, Mesh.SYNC_WEIGHTS_AND_STATE);
    assertSame(SyncMode.WEIGHTS_ONLY, Mesh.SYNC_WEIGHTS_ONLY);
  }

  /** The weights of both tables after two steps of the program, in the old or the new names. */
  private static float[][] train(boolean oldNames) {
    List<Config.Feature> features = List.of(new Config.Feature("f0"), new Config.Feature("f1"));
    Config.Table users = new Config.Table("users", 40, 8).features(0);
    Config.Table items = new Config.Table("items", 30, 4).features(1);
    Config.Topology topology = new Config.Topology(1);
    Config.Optimizer optimizer = new Config.Optimizer().learningRate(0.1f);
    Config.EmbeddingOptions options = new Config.EmbeddingOptions().seed(7);
    Config.Constraints rowWise = new Config.Constraints("users");
    if (oldNames) {
      items.pooling(Config.POOLING_MEAN).init(Config.INIT_UNIFORM, -0.2f, 0.2f);
      topology.optimizer = Config.Optimizer.ADAGRAD;
      optimizer.type(Config.Optimizer.ADAGRAD);
      options.boundsPolicy = Config.EmbeddingOptions.BOUNDS_CLAMP;
      rowWise.shardingTypes(Config.ROW_WISE);
    } else {
      items.pooling(Pooling.MEAN).init(InitKind.UNIFORM, -0.2f, 0.2f);
      topology.optimizer = OptimizerType.ADAGRAD;
      optimizer.type(OptimizerType.ADAGRAD);
      options.boundsPolicy = BoundsPolicy.CLAMP;
      rowWise.shardingTypes(ShardingType.ROW_WISE);
    }
    try (Comm comm = Comm.createLocalGroup(1)[0];
         Plan plan = Plan.create(List.of(users, items), features, topology, List.of(rowWise))) {
      assertEquals(ShardingType.ROW_WISE, plan.tableSharding(0));
      Mesh mesh = Mesh.create(comm, new Mesh.Options().layout(
                                        oldNames ? Mesh.LAYOUT_DEFAULT : MeshLayout.DEFAULT));
      try (EmbeddingCollection coll = mesh.embeddingCollection(plan, optimizer, options)) {
        // Id 99 is outside both tables: clamped to row 0.
        Kjt batch = Kjt.of(2, 2, new int[] {2, 1, 1, 2}, new long[] {3, 99, 5, 7, 29, 99});
        for (int step = 0; step < 2; ++step) {
          coll.backward(coll.forward(batch));
          mesh.sync(coll, oldNames ? Mesh.SYNC_WEIGHTS_ONLY : SyncMode.WEIGHTS_ONLY);
        }
        return new float[][] {coll.getWeights("users"), coll.getWeights("items")};
      } finally {
        mesh.close();
      }
    }
  }

  @Test
  void aProgramInTheOldNamesTrainsLikeTheNewOne() {
    float[][] old = train(true);
    float[][] now = train(false);
    assertArrayEquals(now[0], old[0]);
    assertArrayEquals(now[1], old[1]);
  }

  @Test
  void oldCollectiveNamesWork() {
    try (Comm comm = Comm.createLocalGroup(1)[0]) {
      FloatBuffer out = Buffers.floats(2);
      comm.allreduce(Buffers.of(new float[] {2f, -3f}), out, 2, Config.DTYPE_FLOAT32,
                     Comm.REDUCE_MAX);
      assertEquals(2f, out.get(0));
      assertEquals(-3f, out.get(1));
    }
  }
}
