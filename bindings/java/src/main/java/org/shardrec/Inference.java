// A read-only, hot-swappable embedding collection for serving (shardrec/inference.h), looked up
// from any number of Java threads at once.
package org.shardrec;

import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.shardrec.swig.Native;

/**
 * An inference handle: every table of a training checkpoint (any plan, world size or mesh) or of
 * a serving file, reassembled whole in the storage asked for, plus the checkpoint's dense
 * tensors; no communicator and no optimizer state.
 *
 * <p><b>Threads.</b> Every method may be called from any number of threads at once, including
 * {@link #reload} (one reload at a time; a second concurrent one throws EUSAGE) and
 * {@link #close}: close() waits for the calls running on other threads, and later calls throw
 * ShardrecException EINVAL. The C read path takes no lock; the wrapper holds the read side of a
 * read-write lock during each call (readers never wait for each other) so that close() cannot
 * free the handle under it. Each thread passes its own output buffer.
 *
 * <p><b>Versions.</b> A lookup reads exactly one version and returns its number (1 after open,
 * +1 per reload). A request that also needs the dense tensors of that version pins a
 * {@link InferenceSnapshot} with {@link #pin()} and uses both through it.
 */
public final class Inference extends NativeHandle {
  /** Options of {@link #open(String, Options)}; the defaults serve every table as trained. */
  public static final class Options {
    ServingStorage defaultStorage = ServingStorage.AS_TRAINED;
    final Map<String, ServingStorage> tableStorage = new LinkedHashMap<>();
    BoundsPolicy boundsPolicy = BoundsPolicy.ERROR;
    DeviceType device = DeviceType.HOST;
    final Map<String, Long> tiers = new LinkedHashMap<>();

    /**
     * Serves table {@code table} from the checkpoint's files through a row cache of
     * {@code cacheBytes} (shardrec_serving_tier_t; {@link Inference#tierStats} reports it).
     */
    public Options tier(String table, long cacheBytes) {
      if (table == null || table.indexOf('\n') >= 0) {
        throw ShardrecException.invalid("a table name must not be null or hold a newline");
      }
      // C reads the cache as unsigned: a negative one would ask for a cache of exabytes.
      if (cacheBytes < 0) {
        throw ShardrecException.invalid("tier cache bytes of table " + table
                                        + " must be >= 0, got " + cacheBytes);
      }
      tiers.put(table, cacheBytes);
      return this;
    }

    /** Storage of the tables not named in {@link #tableStorage} (ignored for a serving file). */
    public Options defaultStorage(ServingStorage v) {
      if (v == null) throw ShardrecException.invalid("defaultStorage must not be null");
      defaultStorage = v;
      return this;
    }

    /** Storage of table {@code table} (ignored for a serving file). */
    public Options tableStorage(String table, ServingStorage v) {
      if (table == null || table.indexOf('\n') >= 0) {
        throw ShardrecException.invalid("a table name must not be null or hold a newline");
      }
      if (v == null) throw ShardrecException.invalid("storage of " + table + " must not be null");
      tableStorage.put(table, v);
      return this;
    }

    /** What lookups do with an id outside its table (default ERROR). */
    public Options boundsPolicy(BoundsPolicy v) {
      if (v == null) throw ShardrecException.invalid("boundsPolicy must not be null");
      boundsPolicy = v;
      return this;
    }

    /** Must be HOST: a device is refused by the library with EUNSUPPORTED. */
    public Options device(DeviceType v) {
      if (v == null) throw ShardrecException.invalid("device must not be null");
      device = v;
      return this;
    }
  }

  /** A table as served: name, shape and the storage it resolved to (never AS_TRAINED). */
  public static final class TableInfo {
    public final String name;
    public final long rows;
    public final int dim;
    public final ServingStorage storage;

    TableInfo(String name, long rows, int dim, ServingStorage storage) {
      this.name = name;
      this.rows = rows;
      this.dim = dim;
      this.storage = storage;
    }

    @Override
    public String toString() {
      return name + " [" + rows + " x " + dim + ", " + storage + "]";
    }
  }

  // Reloads keep features, tables and pooling, so these never change for a handle.
  private final long outputDim;
  private final boolean sequence;

  /** Cannot fail once the handle is registered: a failing constructor would free it twice. */
  private Inference(long handle, long outputDim, boolean sequence, long numTables) {
    super(handle, Native::inference_destroy);
    this.outputDim = outputDim;
    this.sequence = sequence;
    describeAs(
        "Inference (" + numTables + (numTables == 1 ? " table)" : " tables)"));
  }

  /** {@link #open(String, Options)} with the default options. */
  public static Inference open(String path) {
    return open(path, null);
  }

  /**
   * Opens a checkpoint directory (written by {@link Checkpoint#save}, any plan and world size)
   * or a serving file (written by {@link #save}, mapped read-only). Throws ShardrecException:
   * ENOTFOUND, ECORRUPT (the message names the file and record), EINVAL (an unknown table or
   * storage), EUNSUPPORTED (a device request).
   */
  public static Inference open(String path, Options options) {
    Options o = options == null ? new Options() : options;
    StringBuilder names = new StringBuilder();
    int[] storages = new int[o.tableStorage.size()];
    int i = 0;
    for (Map.Entry<String, ServingStorage> e : o.tableStorage.entrySet()) {
      if (names.length() > 0) names.append('\n');
      names.append(e.getKey());
      storages[i++] = e.getValue().code();
    }
    StringBuilder tierNames = new StringBuilder();
    long[] cacheBytes = new long[o.tiers.size()];
    i = 0;
    for (Map.Entry<String, Long> e : o.tiers.entrySet()) {
      if (tierNames.length() > 0) tierNames.append('\n');
      tierNames.append(e.getKey());
      cacheBytes[i++] = e.getValue();
    }
    long[] out = new long[1];
    Native.bind_inference_open_tiered(out, path, o.defaultStorage.code(), o.boundsPolicy.code(),
                                      o.device.code(), names.toString(), storages,
                                      tierNames.toString(), cacheBytes);
    long h = out[0];
    long[] dim = new long[1];
    int[] seq = new int[1];
    long[] tables = new long[1];
    try {
      Native.inference_output_dim(h, dim);
      Native.inference_is_sequence(h, seq);
      Native.inference_num_tables(h, tables);
    } catch (RuntimeException ex) {
      Native.inference_destroy(h);
      throw ex;
    }
    return new Inference(h, dim[0], seq[0] != 0, tables[0]);
  }

  /** Width of one output row (the library's answer, asked now). */
  public long outputDim() {
    long[] out = new long[1];
    use(h -> Native.inference_output_dim(h, out));
    return out[0];
  }

  /** Whether every table is NONE-pooled (one output row per id). */
  public boolean isSequence() {
    int[] out = new int[1];
    use(h -> Native.inference_is_sequence(h, out));
    return out[0] != 0;
  }

  /** Number of features a batch carries. */
  public long numFeatures() {
    long[] out = new long[1];
    use(h -> Native.inference_num_features(h, out));
    return out[0];
  }

  /** Number of tables. */
  public int numTables() {
    long[] out = new long[1];
    use(h -> Native.inference_num_tables(h, out));
    return (int) out[0];
  }

  /** Table {@code index} (plan order). */
  public TableInfo table(int index) {
    String[] name = new String[1];
    long[] rows = new long[1];
    int[] dim = new int[1];
    int[] storage = new int[1];
    use(h -> Native.inference_table_info(h, Indices.of("table", index), name, rows, dim, storage));
    return new TableInfo(name[0], rows[0], dim[0], ServingStorage.of(storage[0]));
  }

  /** Every table, in plan order. */
  public List<TableInfo> tables() {
    int n = numTables();
    List<TableInfo> out = new ArrayList<>(n);
    for (int i = 0; i < n; ++i) out.add(table(i));
    return out;
  }

  /** Number of the version served now (1 after open, +1 per successful reload). */
  public long version() {
    long[] out = new long[1];
    use(h -> Native.inference_version(h, out));
    return out[0];
  }

  /**
   * The row-wise quantization parameters of rows of an INT8 or INT4 table ({@link #rowScales}):
   * each value of row i reads back as q * scale(i) + bias(i), within scale(i) / 2 of the trained
   * value (plus fp32 rounding); of an FP8 table, its power-of-two scale(i) and bias 0 (a value
   * reads back as the decoded code x scale(i)). An immutable value.
   */
  public static final class RowScales {
    /** The number of the version read. */
    public final long version;
    private final float[] scales;
    private final float[] biases;

    RowScales(float[] scales, float[] biases, long version) {
      this.scales = scales;
      this.biases = biases;
      this.version = version;
    }

    /** Number of rows asked for. */
    public int size() {
      return scales.length;
    }

    /** The scale of the i-th id asked for. */
    public float scale(int i) {
      return scales[i];
    }

    /** The bias (the row's minimum) of the i-th id asked for. */
    public float bias(int i) {
      return biases[i];
    }

    /** A copy of every scale, in the order of the ids. */
    public float[] scales() {
      return scales.clone();
    }

    /** A copy of every bias, in the order of the ids. */
    public float[] biases() {
      return biases.clone();
    }
  }

  /**
   * The scale and bias of rows {@code ids} of table {@code table}, which must be served as
   * {@link ServingStorage#INT8}, {@link ServingStorage#INT4} or an FP8 storage (an FP8 checkpoint
   * served AS_TRAINED included; bias 0) (shardrec_inference_row_scales): a fixed table's row
   * indices in [0, rows), or a dynamic table's ids (one without a row: scale 0, bias 0). For
   * INT8/INT4 a bag's lookup error is at most the sum over its ids of |weight| * scale / 2.
   * ShardrecException EINVAL for another storage or an index out of range, ENOTFOUND for an
   * unknown table. Thread-safe, as {@link #lookup}.
   */
  public RowScales rowScales(String table, long[] ids) {
    if (ids == null) throw ShardrecException.invalid("ids must not be null");
    FloatBuffer scales = Buffers.floats(ids.length);
    FloatBuffer biases = Buffers.floats(ids.length);
    long[] version = new long[1];
    use(h -> Native.inference_row_scales(h, table, Buffers.of(ids), ids.length, scales, biases,
                                         version));
    float[] s = new float[ids.length];
    float[] b = new float[ids.length];
    scales.get(s);
    biases.get(b);
    return new RowScales(s, b, version[0]);
  }

  /** Floats of the lookup output of {@code batch}: [batch, outputDim] or [numValues, dim]. */
  public long outputSize(Kjt batch) {
    return outputSize(batch, outputDim, sequence);
  }

  static long outputSize(Kjt batch, long outputDim, boolean sequence) {
    // Every lookup sizes its output here first, so a null batch stops here, before any use.
    if (batch == null) throw ShardrecException.invalid("batch must not be null");
    return (sequence ? batch.numValues() : batch.batchSize()) * outputDim;
  }

  /**
   * Looks up {@code batch} into {@code out} (a direct native-order buffer holding exactly
   * {@link #outputSize} floats from its position; no copy) and returns the number of the
   * version that answered. A bad batch throws ShardrecException EINVAL naming the feature,
   * sample and id, and disturbs no other thread. A table served from the checkpoint's files
   * (tiers) whose missed rows cannot be read, or whose file changed since open (a checksum taken
   * at open fails, or the file is shorter), throws ECORRUPT or EIO naming the table and the file;
   * nothing is cached and the handle serves on.
   */
  public long lookup(Kjt batch, FloatBuffer out) {
    FloatBuffer o = Buffers.out(out, outputSize(batch), "out");
    long[] version = new long[1];
    use(h -> Native.bind_inference_lookup(h, batch.batchSize, batch.numFeatures,
                                          batch.lengths, batch.values, batch.weights, o,
                                          version));
    return version[0];
  }

  /**
   * {@link #lookup(Kjt, FloatBuffer)} into a Java array of exactly {@link #outputSize} floats,
   * written in place (the array is pinned for the native call, not copied).
   */
  public long lookup(Kjt batch, float[] out) {
    checkArray(out, outputSize(batch));
    long[] version = new long[1];
    use(h -> Native.bind_inference_lookup_array(h, 0, batch.batchSize, batch.numFeatures,
                                                batch.lengths, batch.values, batch.weights,
                                                out, version));
    return version[0];
  }

  /** The lookup output of {@code batch} in a new array. */
  public float[] lookup(Kjt batch) {
    float[] out = new float[checkedSize(outputSize(batch))];
    lookup(batch, out);
    return out;
  }

  /** Floats the lookup of a VBE batch writes (shardrec_inference_vbe_output_len). */
  public long outputSizeVbe(VbeKjt batch) {
    if (batch == null) throw ShardrecException.invalid("batch must not be null");
    long[] n = new long[1];
    use(h -> Native.bind_inference_vbe_output_len(h, batch.batchSize, batch.numFeatures,
                                                  batch.lengths, batch.values, batch.weights,
                                                  batch.featureBatchSizes, batch.inverseIndices,
                                                  n));
    return n[0];
  }

  /**
   * Looks up a VBE batch into {@code out} (a direct native-order buffer holding exactly
   * {@link #outputSizeVbe(VbeKjt)} floats; no copy), each distinct bag once, and returns the number
   * of the version that answered. A bad batch (sizes that do not add up, an inverse index outside
   * [0, B_f), any error of the plain lookup) throws ShardrecException EINVAL naming the feature
   * and sample; {@code out} is then not written.
   */
  public long lookupVbe(VbeKjt batch, FloatBuffer out) {
    FloatBuffer o = Buffers.out(out, outputSizeVbe(batch), "out");
    long[] version = new long[1];
    use(h -> Native.bind_inference_lookup_vbe(h, batch.batchSize, batch.numFeatures,
                                              batch.lengths, batch.values, batch.weights,
                                              batch.featureBatchSizes, batch.inverseIndices, o,
                                              version));
    return version[0];
  }

  /** The lookup output of a VBE batch in a new array. */
  public float[] lookupVbe(VbeKjt batch) {
    FloatBuffer out = Buffers.floats(outputSizeVbe(batch));
    lookupVbe(batch, out);
    return Buffers.toArray(out);
  }

  /**
   * A copy of dense tensor {@code name} (saved with the checkpoint) of the version served now.
   * For zero-copy reads, or to read it with the embeddings of one version, use {@link #pin()}.
   * Throws ShardrecException ENOTFOUND for an unknown name.
   */
  public float[] denseTensor(String name) {
    try (InferenceSnapshot s = pin()) {
      return s.denseTensorCopy(name);
    }
  }

  /**
   * Pins the version served now: the snapshot keeps its tables and dense tensors unchanged
   * until it is closed, whatever reloads happen (also after this handle is closed).
   */
  public InferenceSnapshot pin() {
    long[] out = new long[1];
    use(h -> Native.inference_pin(h, out));
    return InferenceSnapshot.wrap(out[0], outputDim, sequence);
  }

  /** Writes the version served now as one serving file, atomically (temp, fsync, rename). */
  public void save(String path) {
    use(h -> Native.inference_save(h, path));
  }

  /**
   * Opens {@code path} (checkpoint or serving file) with this handle's options and swaps it in
   * while lookups run; lookups that started before finish on the old version. The source must
   * have the same features and tables (else EINVAL and nothing changes); a reload while another
   * runs throws EUSAGE. Returns once the lookups running on the old version have returned.
   */
  public void reload(String path) {
    use(h -> Native.inference_reload(h, path));
  }

  /**
   * Publishes {@code table} with rows upserted and {@code tombstones} removed as the next
   * version, atomically, while lookups run (shardrec_inference_apply_delta: requests started
   * before it finish on the old version), and returns the new version number. {@code rows}
   * (a direct native-order buffer, read from its position, no copy) holds {@code ids.length x
   * dim} floats, row {@code i} for {@code ids[i]}, converted to the table's storage type. A
   * dynamic table takes any ids (each at most once, none also a tombstone); a fixed table takes
   * row indices in [0, rows) and no tombstones. Nothing changes on an error (EINVAL, ENOTFOUND
   * for an unknown table, EUSAGE while a reload or another delta runs). Any thread.
   */
  public long applyDelta(String table, long[] ids, FloatBuffer rows, long[] tombstones) {
    return apply(table, ids, rows, tombstones, 0);
  }

  /**
   * {@link #applyDelta(String, long[], FloatBuffer, long[])} of a delta whose {@link
   * DynamicDelta#full} flag is {@code full} (shardrec_inference_apply_delta_ext): for a service
   * that receives a training delta's arrays and flag from elsewhere. With {@code full} the rows
   * become the dynamic table's only rows, every other id removed (EINVAL for a fixed table).
   */
  public long applyDelta(String table, long[] ids, FloatBuffer rows, long[] tombstones,
                         boolean full) {
    return apply(table, ids, rows, tombstones, full ? DynamicDelta.FLAG_FULL : 0);
  }

  /**
   * The delta with {@code flags} (0 or SHARDREC_DELTA_FULL): shardrec_inference_apply_delta
   * without any, shardrec_inference_apply_delta_ext with some.
   */
  private long apply(String table, long[] ids, FloatBuffer rows, long[] tombstones, long flags) {
    if (ids == null) throw ShardrecException.invalid("ids must not be null");
    long[] version = new long[1];
    int dim = -1; // names and dims stay across versions
    for (TableInfo t : tables()) {
      if (t.name.equals(table)) dim = t.dim;
    }
    final long width = dim;
    use(h -> {
      if (width < 0) {
        // Let the library name the unknown table; it reads no row.
        return Native.inference_apply_delta_ext(h, table, null, null, 0, null, flags, version);
      }
      FloatBuffer r = Buffers.in(rows, ids.length * width, "rows");
      long[] t = tombstones == null ? new long[0] : tombstones;
      if (flags == 0) {
        return Native.inference_apply_delta(h, table, Buffers.of(ids), r, ids.length,
                                            Buffers.of(t), version);
      }
      return Native.inference_apply_delta_ext(h, table, Buffers.of(ids), r, ids.length,
                                              Buffers.of(t), flags, version);
    });
    return version[0];
  }

  /** {@link #applyDelta(String, long[], FloatBuffer, long[])} with the rows in an array. */
  public long applyDelta(String table, long[] ids, float[] rows, long[] tombstones) {
    if (rows == null) throw ShardrecException.invalid("rows must not be null");
    return applyDelta(table, ids, Buffers.of(rows), tombstones);
  }

  /**
   * Replays a training collection's delta export ({@link EmbeddingCollection#dynamicDelta})
   * onto {@code table} as the next version (shardrec_inference_apply_delta_ext with the delta's
   * flags): its rows upserted (no copy), its tombstones removed; a {@link DynamicDelta#full}
   * delta's rows become the table's only rows, every other id removed, so the served table
   * equals the training one whatever this handle held before.
   */
  public long applyDelta(String table, DynamicDelta delta) {
    if (delta == null) throw ShardrecException.invalid("delta must not be null");
    return apply(table, delta.ids, delta.rows.duplicate(), delta.tombstones, delta.flags());
  }

  static void checkArray(float[] out, long expected) {
    if (out == null) throw ShardrecException.invalid("out must not be null");
    if (out.length != expected) {
      throw ShardrecException.invalid(
          "out has " + out.length + " elements, expected " + expected);
    }
  }

  static int checkedSize(long n) {
    if (n < 0 || n > Integer.MAX_VALUE - 8) {
      throw ShardrecException.invalid("an output of " + n + " floats does not fit an array");
    }
    return (int) n;
  }

  /**
   * The row cache statistics of tiered table {@code table} (served from the checkpoint's files,
   * {@link Options#tier}) in the current version (shardrec_inference_tier_stats). Throws
   * ShardrecException: EINVAL for a table held in memory, ENOTFOUND for an unknown table.
   */
  public ServingTierStats tierStats(String table) {
    org.shardrec.swig.serving_tier_stats s = new org.shardrec.swig.serving_tier_stats();
    try {
      Native.serving_tier_stats_init(s, NativeConstants.SERVING_TIER_STATS_VERSION);
      use(h -> Native.inference_tier_stats(h, table, s));
      return ServingTierStats.fromNative(s);
    } finally {
      s.delete();
    }
  }
}
