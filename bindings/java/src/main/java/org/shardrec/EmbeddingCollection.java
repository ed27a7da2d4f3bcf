// Sharded embedding collection: forward/backward over direct buffers, pipelined input
// distribution, and full-table weight and optimizer-state accessors.
package org.shardrec;

import java.lang.ref.Reference;
import java.nio.FloatBuffer;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;
import org.shardrec.swig.Native;
import org.shardrec.swig.embedding_options;
import org.shardrec.swig.optimizer_config;

/** This rank's part of a sharded collection. One thread at a time. */
public final class EmbeddingCollection extends NativeHandle {
  private final Map<String, long[]> tableShapes;
  private long lastOutput = -1;

  /** Cannot fail once the handle is registered: a failing constructor would free it twice. */
  private EmbeddingCollection(long handle, Map<String, long[]> tableShapes) {
    super(handle, Native::embedding_destroy);
    this.tableShapes = tableShapes;
    describeAs("EmbeddingCollection (" + tableShapes.size() + " tables)");
  }

  private static Map<String, long[]> tableShapes(Plan plan) {
    Map<String, long[]> shapes = new HashMap<>();
    for (int t = 0; t < plan.numTables(); ++t) {
      shapes.put(plan.tableName(t), new long[] {plan.tableRows(t), plan.tableDim(t)});
    }
    return shapes;
  }

  /**
   * Collective over {@code comm}: every rank passes the same plan. A null optimizer means the
   * plan's (the topology's type with default hyperparameters); a given one must be of that type
   * unless every table has its own. A null options means the defaults.
   */
  public static EmbeddingCollection create(Plan plan, Comm comm, Config.Optimizer optimizer,
                                           Config.EmbeddingOptions options) {
    try {
      return create(plan, optimizer, options,
                    (out, o, e) -> Native.embedding_create(out, plan.handle(), comm.handle(), o, e));
    } finally {
      Reference.reachabilityFence(plan);
      Reference.reachabilityFence(comm);
    }
  }

  /** One native create call, given the filled optimizer and options structs. */
  interface NativeCreate {
    void call(long[] out, optimizer_config optimizer, embedding_options options);
  }

  /** Fills the C structs from the Java configs, runs {@code create}, wraps the handle. */
  static EmbeddingCollection create(Plan plan, Config.Optimizer optimizer,
                                    Config.EmbeddingOptions options, NativeCreate create) {
    // No optimizer: a NULL one, so the collection trains with the plan's.
    optimizer_config o = optimizer == null ? null : optimizer.toNative();
    embedding_options e = new embedding_options();
    try {
      Native.embedding_options_init(e, NativeConstants.EMBEDDING_OPTIONS_VERSION);
      Config.EmbeddingOptions eo = options == null ? new Config.EmbeddingOptions() : options;
      e.setSeed(eo.seed);
      e.setBounds_policy(eo.boundsPolicy.code());
      e.setNum_threads(eo.numThreads);
      e.setDp_comm(eo.dpComm == null ? 0 : eo.dpComm.handle());
      e.setForward_comm_encoding(eo.forwardCommEncoding.code());
      e.setBackward_comm_encoding(eo.backwardCommEncoding.code());
      e.setNon_finite(eo.nonFinite.code());
      e.setTable_memory(eo.tableMemory.code());
      e.setDevice_type(eo.deviceType.code());
      e.setDevice_index(eo.deviceIndex);
      e.setMax_batch_size(eo.maxBatchSize);
      e.setMax_ids_per_batch(eo.maxIdsPerBatch);
      long[] out = new long[1];
      try {
        create.call(out, o, e);
      } finally {
        Reference.reachabilityFence(eo.dpComm);
      }
      Map<String, long[]> shapes;
      try {
        shapes = tableShapes(plan);
      } catch (RuntimeException ex) {
        Native.embedding_destroy(out[0]);
        throw ex;
      }
      return new EmbeddingCollection(out[0], shapes);
    } finally {
      if (o != null) o.delete();
      e.delete();
    }
  }

  public long outputDim() {
    long[] out = new long[1];
    try {
      Native.embedding_output_dim(handle(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  public boolean isSequence() {
    int[] out = new int[1];
    try {
      Native.embedding_is_sequence(handle(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0] != 0;
  }

  /** Floats of the forward output of {@code batch} (not null). */
  public long outputSize(Kjt batch) {
    if (batch == null) throw nullBatch();
    return isSequence() ? batch.numValues() * outputDim() : batch.batchSize() * outputDim();
  }

  /** Forward of this rank's batch into {@code out} (collective, zero-copy). */
  public void forward(Kjt batch, FloatBuffer out) {
    FloatBuffer o = agreed(() -> Buffers.out(out, outputSize(batch), "out"),  // null: refused
                           e -> RefuseTogether.forward(handle(), batch, e));
    try {
      Native.bind_embedding_forward(handle(), batch.batchSize, batch.numFeatures, batch.lengths,
                                    batch.values, batch.weights, o);
    } finally {
      Reference.reachabilityFence(this);
    }
    lastOutput = o.capacity();
  }

  /** Forward returning a new array (convenience; copies). */
  public float[] forward(Kjt batch) {
    if (batch == null) forward(null, null);  // refused on every rank: throws
    FloatBuffer out = Buffers.floats(outputSize(batch));
    forward(batch, out);
    return Buffers.toArray(out);
  }

  /**
   * {@link #forward(Kjt, FloatBuffer)} into a tensor of extents {@code shape} (at most 4; when
   * 2 or more, the last is the output width): the library checks the shape against the output
   * (shardrec_embedding_forward_tensor). {@code out} holds exactly the shape's element count.
   */
  public void forward(Kjt batch, FloatBuffer out, long[] shape) {
    FloatBuffer o = agreed(() -> {
                             if (batch == null) throw nullBatch();
                             return Buffers.out(out, Buffers.elements(shape), "out");
                           },
                           e -> RefuseTogether.forward(handle(), batch, e));
    try {
      Native.bind_embedding_forward_tensor(handle(), batch.batchSize, batch.numFeatures,
                                           batch.lengths, batch.values, batch.weights, o, shape);
    } finally {
      Reference.reachabilityFence(this);
    }
    lastOutput = o.capacity();
  }

  /** {@link #forwardDistributed(FloatBuffer)} into a tensor of extents {@code shape}. */
  public void forwardDistributed(FloatBuffer out, long[] shape) {
    FloatBuffer o = agreed(() -> Buffers.out(out, Buffers.elements(shape), "out"),
                           e -> RefuseTogether.forwardDistributed(handle(), e));
    try {
      Native.bind_embedding_forward_distributed_tensor(handle(), o, shape);
    } finally {
      Reference.reachabilityFence(this);
    }
    lastOutput = o.capacity();
  }

  /** {@link #backward(FloatBuffer)} with the gradient as a tensor of extents {@code shape}. */
  public void backward(FloatBuffer grad, long[] shape) {
    FloatBuffer g = agreed(() -> Buffers.in(grad, Buffers.elements(shape), "grad"),
                           e -> RefuseTogether.backward(handle(), e));
    try {
      Native.bind_embedding_backward_tensor(handle(), g, shape);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  // What a call given a null batch throws (after a call every rank fails, for the collective
  // ones).
  private static IllegalArgumentException nullBatch() {
    return new IllegalArgumentException("batch must not be null");
  }

  // The buffer `check` accepts; one it refuses fails the call on every rank (RefuseTogether). A
  // refusal also forgets the last forward's output size: the library checks the next gradient.
  private FloatBuffer agreed(Supplier<FloatBuffer> check,
                             UnaryOperator<IllegalArgumentException> refuseTogether) {
    try {
      return check.get();
    } catch (IllegalArgumentException e) {
      lastOutput = -1;
      try {
        throw refuseTogether.apply(e);
      } finally {
        Reference.reachabilityFence(this);
      }
    }
  }

  /**
   * Starts the pipelined input distribution of {@code batch} (collective). A null batch throws
   * IllegalArgumentException after a start that every rank fails (an empty batch).
   */
  public void inputDistStart(Kjt batch) {
    if (batch == null) {
      try {
        throw RefuseTogether.inputDistStart(handle(), nullBatch());
      } finally {
        Reference.reachabilityFence(this);
      }
    }
    try {
      Native.bind_embedding_input_dist_start(handle(), batch.batchSize, batch.numFeatures,
                                             batch.lengths, batch.values, batch.weights);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  public void inputDistWait() {
    try {
      Native.embedding_input_dist_wait(handle());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Lookup and output distribution of the waited batch; {@code out} holds exactly its output. */
  public void forwardDistributed(FloatBuffer out) {
    FloatBuffer o = agreed(() -> Buffers.out(out, out == null ? 0 : out.remaining(), "out"),
                           e -> RefuseTogether.forwardDistributed(handle(), e));
    try {
      Native.embedding_forward_distributed(handle(), o);
    } finally {
      Reference.reachabilityFence(this);
    }
    lastOutput = o.capacity();
  }

  /** Backward of the last forward with its output gradient (collective, zero-copy). */
  public void backward(FloatBuffer grad) {
    long need = lastOutput >= 0 ? lastOutput : grad == null ? 0 : grad.remaining();
    FloatBuffer g = agreed(() -> Buffers.in(grad, need, "grad"),
                           e -> RefuseTogether.backward(handle(), e));
    try {
      Native.embedding_backward(handle(), g);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  public void backward(float[] grad) {
    backward(Buffers.of(grad));
  }

  /**
   * Waits for the device work a GPU collection's stream-ordered calls left queued and throws what
   * it found ({@code shardrec_embedding_synchronize}); returns at once for a host collection, whose
   * calls (all of them from Java: it passes host memory) return with their work done.
   */
  public void synchronize() {
    try {
      Native.embedding_synchronize(handle());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  public void setLearningRate(float lr) {
    try {
      Native.embedding_set_learning_rate(handle(), lr);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  public long numSteps() {
    long[] out = new long[1];
    try {
      Native.embedding_num_steps(handle(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  public void setNumSteps(long steps) {
    try {
      Native.embedding_set_num_steps(handle(), steps);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  private long tableSize(String table, boolean rowWise) {
    long[] shape = tableShapes.get(table);
    if (shape == null) return -1;
    return rowWise ? shape[0] : shape[0] * shape[1];
  }

  /** Full weights [rows, dim] of {@code table} into {@code out} (collective). */
  public void getWeights(String table, FloatBuffer out) {
    long n = tableSize(table, false);
    FloatBuffer o = n < 0 ? out : agreed(() -> Buffers.out(out, n, "out"), e -> RefuseTogether.call(
        () -> Native.embedding_get_weights(handle(), table, RefuseTogether.decoy(n)), e));
    try {
      Native.embedding_get_weights(handle(), table, o);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  public float[] getWeights(String table) {
    long n = tableSize(table, false);
    FloatBuffer out = Buffers.floats(Math.max(n, 0));
    try {
      Native.embedding_get_weights(handle(), table, out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return Buffers.toArray(out);
  }

  /** Replaces the weights of {@code table} (collective; every rank passes the same values). */
  public void setWeights(String table, FloatBuffer weights) {
    long n = tableSize(table, false);
    FloatBuffer w = n < 0 ? weights : agreed(() -> Buffers.in(weights, n, "weights"),
        e -> RefuseTogether.call(
            () -> Native.embedding_set_weights(handle(), table, RefuseTogether.decoy(n)), e));
    try {
      Native.embedding_set_weights(handle(), table, w);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  public void setWeights(String table, float[] weights) {
    setWeights(table, Buffers.of(weights));
  }

  public int numStates() {
    long[] out = new long[1];
    try {
      Native.embedding_num_states(handle(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return (int) out[0];
  }

  public String stateName(int index) {
    String[] name = new String[1];
    int[] rowWise = new int[1];
    try {
      Native.embedding_state_info(handle(), index, name, rowWise);
    } finally {
      Reference.reachabilityFence(this);
    }
    return name[0];
  }

  /** Whether the collection-level state {@code index} holds one value per row. */
  public boolean stateRowWise(int index) {
    String[] name = new String[1];
    int[] rowWise = new int[1];
    try {
      Native.embedding_state_info(handle(), index, name, rowWise);
    } finally {
      Reference.reachabilityFence(this);
    }
    return rowWise[0] != 0;
  }

  /** One optimizer state of a table: its name and whether it holds one value per row. */
  public static final class State {
    public final String name;
    /** True: one value per row ([rows]); false: one per element ([rows, dim]). */
    public final boolean rowWise;

    public State(String name, boolean rowWise) {
      this.name = name;
      this.rowWise = rowWise;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof State)) return false;
      State s = (State) o;
      return s.name.equals(name) && s.rowWise == rowWise;
    }

    @Override
    public int hashCode() {
      return name.hashCode() * 31 + (rowWise ? 1 : 0);
    }

    @Override
    public String toString() {
      return name + (rowWise ? " [rows]" : " [rows, dim]");
    }
  }

  /** The states of the collection's default optimizer, in order. */
  public java.util.List<State> states() {
    java.util.List<State> out = new java.util.ArrayList<>();
    for (int i = 0; i < numStates(); ++i) out.add(new State(stateName(i), stateRowWise(i)));
    return out;
  }

  /**
   * The states of the optimizer {@code table} trains with (its own or the default), in order:
   * the names {@link #getState} and {@link #setState} accept for that table.
   */
  public java.util.List<State> tableStates(String table) {
    long[] n = new long[1];
    try {
      Native.embedding_table_num_states(handle(), table, n);
    } finally {
      Reference.reachabilityFence(this);
    }
    java.util.List<State> out = new java.util.ArrayList<>();
    for (int i = 0; i < n[0]; ++i) {
      String[] name = new String[1];
      int[] rowWise = new int[1];
      try {
        Native.embedding_table_state_info(handle(), table, i, name, rowWise);
      } finally {
        Reference.reachabilityFence(this);
      }
      out.add(new State(name[0], rowWise[0] != 0));
    }
    return out;
  }

  private boolean stateRowWise(String table, String state) {
    for (State s : tableStates(table)) {
      if (s.name.equals(state)) return s.rowWise;
    }
    return false;
  }

  /** One full optimizer state of a table (collective). */
  public float[] getState(String table, String state) {
    long n = tableSize(table, stateRowWise(table, state));
    FloatBuffer out = Buffers.floats(Math.max(n, 0));
    try {
      Native.embedding_get_state(handle(), table, state, out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return Buffers.toArray(out);
  }

  public void setState(String table, String state, float[] values) {
    long n = tableSize(table, stateRowWise(table, state));
    FloatBuffer v = agreed(() -> Buffers.in(Buffers.of(values), n >= 0 ? n : values.length,
        "values"), e -> RefuseTogether.call(
            () -> Native.embedding_set_state(handle(), table, state, RefuseTogether.decoy(n)), e));
    try {
      Native.embedding_set_state(handle(), table, state, v);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** {comm seconds, total seconds} spent in forward/backward. */
  public double[] timings() {
    double[] comm = new double[1];
    double[] total = new double[1];
    try {
      Native.embedding_timings(handle(), comm, total);
    } finally {
      Reference.reachabilityFence(this);
    }
    return new double[] {comm[0], total[0]};
  }

  /** Sets the learning rate of one table (per-table schedules); the others keep theirs. */
  public void setTableLearningRate(String table, float lr) {
    try {
      Native.embedding_set_table_learning_rate(handle(), table, lr);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The optimizer {@code table} trains with (its own or the default), at its current rate. */
  public Config.Optimizer tableOptimizer(String table) {
    optimizer_config o = new optimizer_config();
    try {
      try {
        Native.embedding_table_optimizer(handle(), table, o);
      } finally {
        Reference.reachabilityFence(this);
      }
      return Config.Optimizer.fromNative(o);
    } finally {
      o.delete();
    }
  }

  /** Where one feature's embedding sits in an output row (TorchRec's KeyedTensor keys). */
  public static final class OutputBlock {
    /** The feature (KJT key). */
    public final String feature;
    /** The table it reads. */
    public final String table;
    /** First column of the block in an output row. */
    public final long offset;
    /** Number of columns. */
    public final long width;

    public OutputBlock(String feature, String table, long offset, long width) {
      this.feature = feature;
      this.table = table;
      this.offset = offset;
      this.width = width;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof OutputBlock)) return false;
      OutputBlock b = (OutputBlock) o;
      return feature.equals(b.feature) && table.equals(b.table) && offset == b.offset
          && width == b.width;
    }

    @Override
    public int hashCode() {
      return java.util.Objects.hash(feature, table, offset, width);
    }

    @Override
    public String toString() {
      return feature + "(" + table + ")[" + offset + ", +" + width + "]";
    }
  }

  /** The blocks of an output row, in order. */
  public java.util.List<OutputBlock> outputs() {
    long[] n = new long[1];
    try {
      Native.embedding_num_outputs(handle(), n);
    } finally {
      Reference.reachabilityFence(this);
    }
    java.util.List<OutputBlock> out = new java.util.ArrayList<>();
    for (long i = 0; i < n[0]; ++i) {
      String[] feature = new String[1];
      String[] table = new String[1];
      long[] offset = new long[1];
      long[] width = new long[1];
      try {
        Native.embedding_output_info(handle(), i, feature, table, offset, width);
      } finally {
        Reference.reachabilityFence(this);
      }
      out.add(new OutputBlock(feature[0], table[0], offset[0], width[0]));
    }
    return out;
  }

  /** Where this rank's time went since the collection was created (seconds). */
  public static final class StepTimings {
    public long forwards;
    public long backwards;
    public long samples;
    /** Inside the collection's step calls. */
    public double totalSeconds;
    /** Inside or waiting for collectives. */
    public double collectiveSeconds;
    public double inputDistSeconds;
    public double lookupSeconds;
    public double outputDistSeconds;
    public double backwardSeconds;
    /** Part of collectiveSeconds in the collectives that carry embeddings or their gradients. */
    public double embeddingCommSeconds;

    /** samples / totalSeconds; 0 before the first step. */
    public double samplesPerSecond() {
      return totalSeconds > 0 ? samples / totalSeconds : 0;
    }
  }

  /**
   * This rank's part of dynamic table {@code table} (not collective, changes nothing).
   * ShardrecException EINVAL for a table that is not dynamic, ENOTFOUND for an unknown one.
   */
  public DynamicTableStats dynamicStats(String table) {
    org.shardrec.swig.dynamic_table_stats s = new org.shardrec.swig.dynamic_table_stats();
    try {
      Native.dynamic_table_stats_init(s, NativeConstants.DYNAMIC_TABLE_STATS_VERSION);
      try {
        Native.embedding_dynamic_stats(handle(), table, s);
      } finally {
        Reference.reachabilityFence(this);
      }
      return DynamicTableStats.fromNative(s);
    } finally {
      s.delete();
    }
  }

  /**
   * Starts a new delta period of dynamic table {@code table}
   * (shardrec_embedding_dynamic_mark): forgets the rows changed and ids evicted before and
   * tracks them from now on (tracking is off until the first mark). Not collective, but every
   * rank must mark between the same two training steps. ShardrecException EINVAL for a table
   * that is not dynamic, ENOTFOUND for an unknown one.
   */
  public void dynamicMark(String table) {
    try {
      Native.embedding_dynamic_mark(handle(), table);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * The whole dynamic table's changes since the marks, on every rank
   * (shardrec_embedding_dynamic_delta; collective: every rank calls it). The marks stay; call
   * {@link #dynamicMark} to start the next period. Changes nothing in the collection.
   * ShardrecException EUSAGE (on every rank) when a rank has not marked the table, EINVAL for a
   * table that is not dynamic, ENOTFOUND for an unknown one.
   */
  public DynamicDelta dynamicDelta(String table) {
    try {
      return DynamicDelta.gather(handle(), table, tableShapes.get(table));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Sets whether the next forwards train (true, the default) or evaluate (false), like a
   * model's train()/eval() (shardrec_embedding_set_training). An evaluation forward changes
   * nothing: a dynamic table's known ids read their rows, unknown or not yet admitted ids read
   * zeros, and nothing is inserted, touched, admitted, evicted or marked for delta export; its
   * backward throws EUSAGE. Every rank must be in the same mode for a forward. Not collective.
   * GPU collections refuse evaluation (EUNSUPPORTED).
   */
  public void setTraining(boolean training) {
    try {
      Native.embedding_set_training(handle(), training ? 1 : 0);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Whether the next forwards train (true) or evaluate (false). */
  public boolean isTraining() {
    int[] out = new int[1];
    try {
      Native.embedding_is_training(handle(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0] != 0;
  }

  /**
   * Sets the eviction scores of rows of dynamic table {@code table} (eviction SCORE;
   * shardrec_embedding_dynamic_set_scores): {@code scores[i]} (finite) for {@code ids[i]}. When a
   * shard is full, the rows the forward did not see leave lowest score first, ties by smallest
   * id; a new row scores 0. Per owner, not collective: this rank sets the ids with a row on its
   * shards and ignores the others, so every rank may be given the same whole list. Returns how
   * many entries named a row held here. EINVAL (nothing set) for a non-finite score or a table
   * that is not dynamic or not SCORE; ENOTFOUND for an unknown table.
   */
  public long dynamicSetScores(String table, long[] ids, double[] scores) {
    if (ids == null || scores == null || ids.length != scores.length) {
      throw new IllegalArgumentException("one score per id is needed");
    }
    java.nio.DoubleBuffer s = java.nio.ByteBuffer.allocateDirect(8 * scores.length)
                                  .order(java.nio.ByteOrder.nativeOrder()).asDoubleBuffer();
    s.put(scores).flip();
    long[] set = new long[1];
    try {
      Native.embedding_dynamic_set_scores(handle(), table, Buffers.of(ids), s, ids.length, set);
    } finally {
      Reference.reachabilityFence(this);
    }
    return set[0];
  }

  /** The per-phase timings, for progress lines. */
  public StepTimings stepTimings() {
    org.shardrec.swig.step_timings t = new org.shardrec.swig.step_timings();
    try {
      Native.step_timings_init(t, NativeConstants.STEP_TIMINGS_VERSION);
      try {
        Native.embedding_step_timings(handle(), t);
      } finally {
        Reference.reachabilityFence(this);
      }
      StepTimings v = new StepTimings();
      v.forwards = t.getForwards();
      v.backwards = t.getBackwards();
      v.samples = t.getSamples();
      v.totalSeconds = t.getTotal_seconds();
      v.collectiveSeconds = t.getCollective_seconds();
      v.inputDistSeconds = t.getInput_dist_seconds();
      v.lookupSeconds = t.getLookup_seconds();
      v.outputDistSeconds = t.getOutput_dist_seconds();
      v.backwardSeconds = t.getBackward_seconds();
      v.embeddingCommSeconds = t.getEmbedding_comm_seconds();
      return v;
    } finally {
      t.delete();
    }
  }
}
