// Plain configuration classes with library defaults (zero means default, as in the C structs):
// features, tables, topology, per-table constraints, and the enum values they use.
package org.shardrec;

/** Configuration classes of config.h and embedding.h. */
public final class Config {
  private Config() {}

  /** Sharding types (SHARDREC_SHARDING_*). */
  public static final int DATA_PARALLEL = 0;
  public static final int TABLE_WISE = 1;
  public static final int ROW_WISE = 2;
  public static final int COLUMN_WISE = 3;
  public static final int TABLE_ROW_WISE = 4;
  public static final int TABLE_COLUMN_WISE = 5;
  public static final int GRID = 6;

  /** Pooling (SHARDREC_POOLING_*). */
  public static final int POOLING_SUM = 0;
  public static final int POOLING_MEAN = 1;
  public static final int POOLING_NONE = 2;

  /** Initialisation (SHARDREC_INIT_*). */
  public static final int INIT_DEFAULT = 0;
  public static final int INIT_UNIFORM = 1;
  public static final int INIT_CONSTANT = 2;

  /** Element types (SHARDREC_DTYPE_*). */
  public static final int DTYPE_FLOAT32 = 0;
  public static final int DTYPE_FLOAT64 = 3;
  public static final int DTYPE_INT32 = 4;
  public static final int DTYPE_INT64 = 5;

  /** A sparse feature (a KJT key). */
  public static final class Feature {
    public final String name;
    public float poolingFactor;

    public Feature(String name) {
      this.name = name;
    }

    public Feature poolingFactor(float v) {
      poolingFactor = v;
      return this;
    }
  }

  /** An embedding table read by one or more features (indices into the feature list). */
  public static final class Table {
    public final String name;
    public final long rows;
    public final int dim;
    public int pooling = POOLING_SUM;
    public int dtype = DTYPE_FLOAT32;
    public int[] features = new int[0];
    public int initKind = INIT_DEFAULT;
    public float initLow;
    public float initHigh;

    public Table(String name, long rows, int dim) {
      this.name = name;
      this.rows = rows;
      this.dim = dim;
    }

    public Table features(int... v) {
      features = v.clone();
      return this;
    }

    public Table pooling(int v) {
      pooling = v;
      return this;
    }

    public Table init(int kind, float low, float high) {
      initKind = kind;
      initLow = low;
      initHigh = high;
      return this;
    }
  }

  /** The sharding group a plan is made for. */
  public static final class Topology {
    public final int worldSize;
    public int ranksPerNode;
    public int deviceType;
    public long memoryBytes;
    public long[] memoryBytesPerRank;
    public double intraNodeBandwidth;
    public double interNodeBandwidth;
    public int batchSize;
    public int optimizer;
    public double memoryBandwidth;
    public double reservedFraction;

    public Topology(int worldSize) {
      this.worldSize = worldSize;
    }

    public Topology batchSize(int v) {
      batchSize = v;
      return this;
    }

    public Topology ranksPerNode(int v) {
      ranksPerNode = v;
      return this;
    }
  }

  /** Constraints on how one table may be sharded. */
  public static final class Constraints {
    public final String table;
    public long shardingTypes;
    public int minPartition;
    public int[] ranks;
    public float[] poolingFactors;

    public Constraints(String table) {
      this.table = table;
    }

    /** Allows only the given SHARDREC_SHARDING_* types. */
    public Constraints shardingTypes(int... types) {
      long mask = 0;
      for (int t : types) mask |= 1L << t;
      shardingTypes = mask;
      return this;
    }

    public Constraints ranks(int... v) {
      ranks = v.clone();
      return this;
    }
  }

  /** Fused optimizer (SHARDREC_OPTIMIZER_*); defaults are those of the C init function. */
  public static final class Optimizer {
    public static final int SGD = 0;
    public static final int ADAGRAD = 1;
    public static final int ROWWISE_ADAGRAD = 2;
    public static final int ADAM = 3;
    public static final int PARTIAL_ROWWISE_ADAM = 4;
    public static final int LAMB = 5;

    public int type = SGD;
    public float learningRate = 0.01f;
    public float eps = 1e-8f;
    public float beta1 = 0.9f;
    public float beta2 = 0.999f;
    public float weightDecay;
    public int weightDecayMode;

    public Optimizer type(int v) {
      type = v;
      return this;
    }

    public Optimizer learningRate(float v) {
      learningRate = v;
      return this;
    }
  }

  /** Options of a collection. */
  public static final class EmbeddingOptions {
    public static final int BOUNDS_ERROR = 0;
    public static final int BOUNDS_CLAMP = 1;
    public static final int BOUNDS_SKIP = 2;

    public long seed;
    public int boundsPolicy = BOUNDS_ERROR;
    public int numThreads;
    public Comm dpComm;

    public EmbeddingOptions seed(long v) {
      seed = v;
      return this;
    }
  }
}
