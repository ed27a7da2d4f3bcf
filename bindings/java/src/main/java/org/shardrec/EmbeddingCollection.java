// Sharded embedding collection: forward/backward over direct buffers, pipelined input
// distribution, and full-table weight and optimizer-state accessors.
package org.shardrec;

import java.nio.FloatBuffer;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;
import org.shardrec.swig.Native;
import org.shardrec.swig.embedding_options;
import org.shardrec.swig.optimizer_config;

/**
 * This rank's part of a sharded collection. One thread at a time, except close(): from any
 * thread, it waits for the call in flight (a forward blocked on a peer until the timeout or
 * {@link Comm#abort()} of its communicator ends it).
 */
public final class EmbeddingCollection extends NativeHandle {
  private final Map<String, long[]> tableShapes;
  private long lastOutput = -1;

  /** Cannot fail once the handle is registered: a failing constructor would free it twice. */
  private EmbeddingCollection(long handle, Map<String, long[]> tableShapes) {
    super(handle, Native::embedding_destroy);
    this.tableShapes = tableShapes;
    describeAs(
        "EmbeddingCollection (" + tableShapes.size() + (tableShapes.size() == 1 ? " table)" : " tables)"));
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
    if (comm == null) throw ShardrecException.invalid("comm must not be null");
    return create(plan, optimizer, options, (out, p, o, e) -> comm.use(c -> {
      Native.embedding_create(out, p, c, o, e);
      return null;
    }));
  }

  /** One native create call, given the plan's pointer and the filled optimizer and options. */
  interface NativeCreate {
    void call(long[] out, long plan, optimizer_config optimizer, embedding_options options);
  }

  /**
   * Fills the C structs from the Java configs, runs {@code create} while the plan and the
   * options' dpComm are held (see NativeHandle), wraps the handle.
   */
  static EmbeddingCollection create(Plan plan, Config.Optimizer optimizer,
                                    Config.EmbeddingOptions options, NativeCreate create) {
    Config.EmbeddingOptions eo = options == null ? new Config.EmbeddingOptions() : options;
    // Creation is collective: a rank that cannot create still meets its peers' agreement, with
    // a NULL plan that C refuses on every rank together (else the peers wait, and this rank's
    // next create would meet their first).
    String refused = plan == null ? "plan must not be null"
                     : plan.isClosed() ? "Plan is closed"
                     : eo.dpComm != null && eo.dpComm.isClosed() ? "the options' dpComm is closed"
                     : nullOption(optimizer, eo);
    if (refused != null) {
      embedding_options e = new embedding_options();
      try {
        Native.embedding_options_init(e, NativeConstants.EMBEDDING_OPTIONS_VERSION);
        create.call(new long[1], 0, null, e);
      } catch (ShardrecException expected) {
        // C's refusal of the NULL plan; this rank's reason is the one to report.
      } finally {
        e.delete();
      }
      // A null plan or option is a bad argument; a closed handle is use after close, as for its
      // own calls (EINVAL both).
      if (plan == null) throw ShardrecException.invalid(refused);
      throw new ShardrecException(ShardrecException.EINVAL, refused);
    }
    // No optimizer: a NULL one, so the collection trains with the plan's.
    optimizer_config o = optimizer == null ? null : optimizer.toNative();
    embedding_options e = new embedding_options();
    long tiers = 0;  // the options' tier array (C memory), read by the create call
    try {
      Native.embedding_options_init(e, NativeConstants.EMBEDDING_OPTIONS_VERSION);
      e.setSeed(eo.seed);
      e.setBounds_policy(eo.boundsPolicy.code());
      e.setNum_threads(eo.numThreads);
      e.setForward_comm_encoding(eo.forwardCommEncoding.code());
      e.setBackward_comm_encoding(eo.backwardCommEncoding.code());
      e.setNon_finite(eo.nonFinite.code());
      e.setTable_memory(eo.tableMemory.code());
      e.setDevice_type(eo.deviceType.code());
      e.setDevice_index(eo.deviceIndex);
      e.setMax_batch_size(eo.maxBatchSize);
      e.setMax_ids_per_batch(eo.maxIdsPerBatch);
      if (!eo.tiers.isEmpty()) {
        tiers = Native.bind_tiers_new();
        for (TableTier t : eo.tiers) Native.bind_tiers_add(tiers, t.table, t.dir, t.cacheBytes);
        Native.bind_tiers_apply(tiers, e);
      }
      long[] out = new long[1];
      // The plan is held from its shapes to the create: no close() comes in between.
      Map<String, long[]> shapes = plan.use(p -> {
        Map<String, long[]> read = tableShapes(plan);
        useOrNull(eo.dpComm, dp -> {
          e.setDp_comm(dp);
          create.call(out, p, o, e);
          return null;
        });
        return read;
      });
      return new EmbeddingCollection(out[0], shapes);
    } finally {
      if (o != null) o.delete();
      e.delete();
      if (tiers != 0) Native.bind_tiers_free(tiers);
    }
  }

  // The first null among the fields of the configs (public, so settable to null directly), named;
  // null when none is.
  private static String nullOption(Config.Optimizer optimizer, Config.EmbeddingOptions eo) {
    if (optimizer != null && optimizer.nullField() != null) return optimizer.nullField();
    String field = eo.boundsPolicy == null ? "boundsPolicy"
                   : eo.forwardCommEncoding == null ? "forwardCommEncoding"
                   : eo.backwardCommEncoding == null ? "backwardCommEncoding"
                   : eo.nonFinite == null ? "nonFinite"
                   : eo.tableMemory == null ? "tableMemory"
                   : eo.deviceType == null ? "deviceType"
                   : eo.tiers == null ? "tiers"
                   : eo.tiers.contains(null) ? "each of tiers"
                   : null;
    return field == null ? null : field + " must not be null";
  }

  public long outputDim() {
    long[] out = new long[1];
    use(h -> Native.embedding_output_dim(h, out));
    return out[0];
  }

  public boolean isSequence() {
    int[] out = new int[1];
    use(h -> Native.embedding_is_sequence(h, out));
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
                           e -> use(h -> RefuseTogether.forward(h, batch, e)));
    forwardInto(o, h -> Native.bind_embedding_forward(h, batch.batchSize, batch.numFeatures,
                                                      batch.lengths, batch.values, batch.weights,
                                                      o));
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
                           e -> use(h -> RefuseTogether.forward(h, batch, e)));
    forwardInto(o, h -> Native.bind_embedding_forward_tensor(h, batch.batchSize,
                                                             batch.numFeatures, batch.lengths,
                                                             batch.values, batch.weights, o,
                                                             shape));
  }

  /** {@link #forwardDistributed(FloatBuffer)} into a tensor of extents {@code shape}. */
  public void forwardDistributed(FloatBuffer out, long[] shape) {
    FloatBuffer o = agreed(() -> Buffers.out(out, Buffers.elements(shape), "out"),
                           e -> use(h -> RefuseTogether.forwardDistributed(h, e)));
    forwardInto(o, h -> Native.bind_embedding_forward_distributed_tensor(h, o, shape));
  }

  /** {@link #backward(FloatBuffer)} with the gradient as a tensor of extents {@code shape}. */
  public void backward(FloatBuffer grad, long[] shape) {
    FloatBuffer g = agreed(() -> Buffers.in(grad, Buffers.elements(shape), "grad"),
                           e -> use(h -> RefuseTogether.backward(h, e)));
    use(h -> Native.bind_embedding_backward_tensor(h, g, shape));
  }

  /** Floats of the forward output of a VBE batch (shardrec_embedding_vbe_output_len). */
  public long outputSizeVbe(VbeKjt batch) {
    if (batch == null) throw nullBatch();
    long[] n = new long[1];
    use(h -> Native.bind_embedding_vbe_output_len(h, batch.batchSize, batch.numFeatures,
                                                  batch.lengths, batch.values, batch.weights,
                                                  batch.featureBatchSizes, batch.inverseIndices,
                                                  n));
    return n[0];
  }

  /**
   * Forward of this rank's VBE batch into {@code out} (collective, zero-copy; ranks may mix VBE
   * and plain batches). The backward that follows takes a gradient of the same layout; the
   * gradients of the samples that read a bag are summed into it. A batch or buffer refused here
   * is refused on every rank in the same call.
   */
  public void forwardVbe(VbeKjt batch, FloatBuffer out) {
    FloatBuffer o = agreed(() -> {
                             if (batch == null) throw nullBatch();
                             return Buffers.out(out, outputSizeVbe(batch), "out");
                           },
                           e -> use(h -> RefuseTogether.forward(h, null, e)));
    forwardInto(o, h -> Native.bind_embedding_forward_vbe(h, batch.batchSize, batch.numFeatures,
                                                          batch.lengths, batch.values,
                                                          batch.weights, batch.featureBatchSizes,
                                                          batch.inverseIndices, o));
  }

  /** {@link #forwardVbe(VbeKjt, FloatBuffer)} returning a new array (convenience; copies). */
  public float[] forwardVbe(VbeKjt batch) {
    long n;
    try {
      if (batch == null) throw nullBatch();
      n = outputSizeVbe(batch);
    } catch (ShardrecException e) {
      lastOutput = -1;
      throw use(h -> RefuseTogether.forward(h, null, e));
    }
    FloatBuffer out = Buffers.floats(n);
    forwardVbe(batch, out);
    return Buffers.toArray(out);
  }

  /** {@link #forwardVbe(VbeKjt, FloatBuffer)} into a tensor of extents {@code shape}. */
  public void forwardVbe(VbeKjt batch, FloatBuffer out, long[] shape) {
    FloatBuffer o = agreed(() -> {
                             if (batch == null) throw nullBatch();
                             return Buffers.out(out, Buffers.elements(shape), "out");
                           },
                           e -> use(h -> RefuseTogether.forward(h, null, e)));
    forwardInto(o, h -> Native.bind_embedding_forward_vbe_tensor(
                       h, batch.batchSize, batch.numFeatures, batch.lengths, batch.values,
                       batch.weights, batch.featureBatchSizes, batch.inverseIndices, o, shape));
  }

  /** {@link #inputDistStart(Kjt)} of a VBE batch; forwardDistributed then writes its output. */
  public void inputDistStartVbe(VbeKjt batch) {
    if (batch == null) throw use(h -> RefuseTogether.inputDistStart(h, nullBatch()));
    started(h -> Native.bind_embedding_input_dist_start_vbe(h, batch.batchSize,
                                                            batch.numFeatures, batch.lengths,
                                                            batch.values, batch.weights,
                                                            batch.featureBatchSizes,
                                                            batch.inverseIndices));
  }

  // What a call given a null batch throws (after a call every rank fails, for the collective
  // ones).
  private static ShardrecException nullBatch() {
    return ShardrecException.invalid("batch must not be null");
  }

  // The buffer `check` accepts; one it refuses fails the call on every rank (RefuseTogether). A
  // refusal also forgets the last forward's output size: the library checks the next gradient.
  private FloatBuffer agreed(Supplier<FloatBuffer> check,
                             UnaryOperator<ShardrecException> refuseTogether) {
    try {
      return check.get();
    } catch (ShardrecException e) {
      lastOutput = -1;
      throw refuseTogether.apply(e);
    }
  }

  /**
   * Starts the pipelined input distribution of {@code batch} (collective). A null batch throws
   * ShardrecException after a start that every rank fails (an empty batch).
   */
  public void inputDistStart(Kjt batch) {
    if (batch == null) throw use(h -> RefuseTogether.inputDistStart(h, nullBatch()));
    started(h -> Native.bind_embedding_input_dist_start(h, batch.batchSize, batch.numFeatures,
                                                        batch.lengths, batch.values,
                                                        batch.weights));
  }

  public void inputDistWait() {
    use(h -> Native.embedding_input_dist_wait(h));
  }

  /** Lookup and output distribution of the waited batch; {@code out} holds exactly its output. */
  public void forwardDistributed(FloatBuffer out) {
    FloatBuffer o = agreed(() -> Buffers.out(out, out == null ? 0 : out.remaining(), "out"),
                           e -> use(h -> RefuseTogether.forwardDistributed(h, e)));
    forwardInto(o, h -> Native.embedding_forward_distributed(h, o));
  }

  // Runs a forward's native call into `o`, then records its size for the backward's own check.
  // The size is forgotten first: a forward the library refuses leaves none, so the backward that
  // follows reaches C, which answers EUSAGE (backward needs a forward first; docs/semantics.md)
  // instead of a check against an earlier forward's size.
  private void forwardInto(FloatBuffer o, HandleCall<?> call) {
    lastOutput = -1;
    use(call);
    lastOutput = o.capacity();
  }

  // Runs a pipelined start's native call. A refused start forgets the last forward's size too:
  // what the library still takes after it is the library's to say, not a check here.
  private void started(HandleCall<?> call) {
    try {
      use(call);
    } catch (RuntimeException e) {
      lastOutput = -1;
      throw e;
    }
  }

  /** Backward of the last forward with its output gradient (collective, zero-copy). */
  public void backward(FloatBuffer grad) {
    long need = lastOutput >= 0 ? lastOutput : grad == null ? 0 : grad.remaining();
    FloatBuffer g = agreed(() -> Buffers.in(grad, need, "grad"),
                           e -> use(h -> RefuseTogether.backward(h, e)));
    use(h -> Native.embedding_backward(h, g));
  }

  /** {@link #backward(FloatBuffer)} from an array (copied); null is refused on every rank. */
  public void backward(float[] grad) {
    backward(Buffers.copyOrNull(grad));
  }

  /**
   * Waits for the device work a GPU collection's stream-ordered calls left queued and throws what
   * it found ({@code shardrec_embedding_synchronize}); returns at once for a host collection, whose
   * calls (all of them from Java: it passes host memory) return with their work done.
   */
  public void synchronize() {
    use(h -> Native.embedding_synchronize(h));
  }

  public void setLearningRate(float lr) {
    use(h -> Native.embedding_set_learning_rate(h, lr));
  }

  public long numSteps() {
    long[] out = new long[1];
    use(h -> Native.embedding_num_steps(h, out));
    return out[0];
  }

  public void setNumSteps(long steps) {
    use(h -> Native.embedding_set_num_steps(h, steps));
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
        () -> use(h -> Native.embedding_get_weights(h, table, RefuseTogether.decoy(n))), e));
    use(h -> Native.embedding_get_weights(h, table, o));
  }

  public float[] getWeights(String table) {
    long n = tableSize(table, false);
    FloatBuffer out = Buffers.floats(Math.max(n, 0));
    use(h -> Native.embedding_get_weights(h, table, out));
    return Buffers.toArray(out);
  }

  /** Replaces the weights of {@code table} (collective; every rank passes the same values). */
  public void setWeights(String table, FloatBuffer weights) {
    long n = tableSize(table, false);
    FloatBuffer w = n < 0 ? weights : agreed(() -> Buffers.in(weights, n, "weights"),
        e -> RefuseTogether.call(
            () -> use(h -> Native.embedding_set_weights(h, table, RefuseTogether.decoy(n))), e));
    use(h -> Native.embedding_set_weights(h, table, w));
  }

  public void setWeights(String table, float[] weights) {
    setWeights(table, Buffers.copyOrNull(weights));
  }

  public int numStates() {
    long[] out = new long[1];
    use(h -> Native.embedding_num_states(h, out));
    return (int) out[0];
  }

  public String stateName(int index) {
    String[] name = new String[1];
    int[] rowWise = new int[1];
    use(h -> Native.embedding_state_info(h, Indices.of("state", index), name, rowWise));
    return name[0];
  }

  /** Whether the collection-level state {@code index} holds one value per row. */
  public boolean stateRowWise(int index) {
    String[] name = new String[1];
    int[] rowWise = new int[1];
    use(h -> Native.embedding_state_info(h, Indices.of("state", index), name, rowWise));
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
    return use(h -> {
      long[] n = new long[1];
      Native.embedding_table_num_states(h, table, n);
      java.util.List<State> out = new java.util.ArrayList<>();
      for (int i = 0; i < n[0]; ++i) {
        String[] name = new String[1];
        int[] rowWise = new int[1];
        Native.embedding_table_state_info(h, table, i, name, rowWise);
        out.add(new State(name[0], rowWise[0] != 0));
      }
      return out;
    });
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
    use(h -> Native.embedding_get_state(h, table, state, out));
    return Buffers.toArray(out);
  }

  public void setState(String table, String state, float[] values) {
    long n = tableSize(table, stateRowWise(table, state));
    // An unknown table (n < 0): the library names it, refusing every rank.
    long need = n >= 0 || values == null ? n : values.length;
    FloatBuffer v = agreed(() -> Buffers.in(Buffers.copyOrNull(values), need, "values"),
        e -> RefuseTogether.call(() -> use(
            h -> Native.embedding_set_state(h, table, state, RefuseTogether.decoy(n))), e));
    use(h -> Native.embedding_set_state(h, table, state, v));
  }

  /** {comm seconds, total seconds} spent in forward/backward. */
  public double[] timings() {
    double[] comm = new double[1];
    double[] total = new double[1];
    use(h -> Native.embedding_timings(h, comm, total));
    return new double[] {comm[0], total[0]};
  }

  /** Sets the learning rate of one table (per-table schedules); the others keep theirs. */
  public void setTableLearningRate(String table, float lr) {
    use(h -> Native.embedding_set_table_learning_rate(h, table, lr));
  }

  /** The optimizer {@code table} trains with (its own or the default), at its current rate. */
  public Config.Optimizer tableOptimizer(String table) {
    optimizer_config o = new optimizer_config();
    try {
      use(h -> Native.embedding_table_optimizer(h, table, o));
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
    return use(h -> {
      long[] n = new long[1];
      Native.embedding_num_outputs(h, n);
      java.util.List<OutputBlock> out = new java.util.ArrayList<>();
      for (long i = 0; i < n[0]; ++i) {
        String[] feature = new String[1];
        String[] table = new String[1];
        long[] offset = new long[1];
        long[] width = new long[1];
        Native.embedding_output_info(h, i, feature, table, offset, width);
        out.add(new OutputBlock(feature[0], table[0], offset[0], width[0]));
      }
      return out;
    });
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
    return stats(false, table);
  }

  /**
   * The whole dynamic table {@code table}: the sums over ranks of {@link #dynamicStats} (its
   * loadFactor from the summed size and capacity), the same on every rank. Collective: every rank
   * of the collection calls it with the same table. A rank refusing its arguments (an unknown or
   * fixed table) fails every rank at once (ShardrecException EINVAL naming it on the others), and
   * ranks naming different tables all get EINVAL.
   */
  public DynamicTableStats dynamicStatsGlobal(String table) {
    return stats(true, table);
  }

  /**
   * This rank's statistics of tiered table {@code table} (not collective, changes nothing;
   * docs/disk-tier.md). ShardrecException EINVAL for a table this rank does not hold tiered,
   * ENOTFOUND for a table not in the plan.
   */
  public TierStats tierStats(String table) {
    org.shardrec.swig.tier_stats s = new org.shardrec.swig.tier_stats();
    try {
      Native.tier_stats_init(s, NativeConstants.TIER_STATS_VERSION);
      use(h -> Native.embedding_tier_stats(h, table, s));
      return TierStats.fromNative(s);
    } finally {
      s.delete();
    }
  }

  private DynamicTableStats stats(boolean global, String table) {
    org.shardrec.swig.dynamic_table_stats s = new org.shardrec.swig.dynamic_table_stats();
    try {
      Native.dynamic_table_stats_init(s, NativeConstants.DYNAMIC_TABLE_STATS_VERSION);
      if (global) {
        use(h -> Native.embedding_dynamic_stats_global(h, table, s));
      } else {
        use(h -> Native.embedding_dynamic_stats(h, table, s));
      }
      return DynamicTableStats.fromNative(s);
    } finally {
      s.delete();
    }
  }

  /**
   * Starts a new delta period of dynamic table {@code table}
   * (shardrec_embedding_dynamic_mark): forgets the rows changed, the ids that left and whether a
   * checkpoint load replaced the table ({@link DynamicDelta#full}) before, and tracks them from
   * now on (tracking is off until the first mark). Not collective, but every
   * rank must mark between the same two training steps. ShardrecException EINVAL for a table
   * that is not dynamic, ENOTFOUND for an unknown one.
   */
  public void dynamicMark(String table) {
    use(h -> Native.embedding_dynamic_mark(h, table));
  }

  /**
   * The whole dynamic table's changes since the marks, on every rank
   * (shardrec_embedding_dynamic_delta_ext; collective: every rank calls it), {@link
   * DynamicDelta#full} when a checkpoint load replaced the table since the marks. The marks
   * stay; call {@link #dynamicMark} to start the next period. Changes nothing in the collection.
   * ShardrecException EUSAGE (on every rank) when a rank has not marked the table, EINVAL for a
   * table that is not dynamic, ENOTFOUND for an unknown one.
   */
  public DynamicDelta dynamicDelta(String table) {
    return use(h -> DynamicDelta.gather(h, table, tableShapes.get(table)));
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
    use(h -> Native.embedding_set_training(h, training ? 1 : 0));
  }

  /** Whether the next forwards train (true) or evaluate (false). */
  public boolean isTraining() {
    int[] out = new int[1];
    use(h -> Native.embedding_is_training(h, out));
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
      throw ShardrecException.invalid(
          ids == null ? "ids must not be null"
          : scores == null ? "scores must not be null"
          : "scores has " + scores.length + " values for " + ids.length + " ids: one score per "
            + "id is needed");
    }
    java.nio.DoubleBuffer s = java.nio.ByteBuffer.allocateDirect(8 * scores.length)
                                  .order(java.nio.ByteOrder.nativeOrder()).asDoubleBuffer();
    s.put(scores).flip();
    long[] set = new long[1];
    use(h -> Native.embedding_dynamic_set_scores(h, table, Buffers.of(ids), s, ids.length, set));
    return set[0];
  }

  /** The per-phase timings, for progress lines. */
  public StepTimings stepTimings() {
    org.shardrec.swig.step_timings t = new org.shardrec.swig.step_timings();
    try {
      Native.step_timings_init(t, NativeConstants.STEP_TIMINGS_VERSION);
      use(h -> Native.embedding_step_timings(h, t));
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
