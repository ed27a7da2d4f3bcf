// Plain configuration classes with library defaults (zero means default, as in the C structs):
// features, tables, topology, per-table constraints (the enumerations are top-level types).
package org.shardrec;

/** Configuration classes of config.h and embedding.h. */
public final class Config {
  private Config() {}

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
    public Pooling pooling = Pooling.SUM;
    public DType dtype = DType.FLOAT32;
    public int[] features = new int[0];
    public InitKind initKind = InitKind.DEFAULT;
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

    public Table pooling(Pooling v) {
      pooling = v;
      return this;
    }

    public Table init(InitKind kind, float low, float high) {
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
    public DeviceType deviceType = DeviceType.HOST;
    public long memoryBytes;
    public long[] memoryBytesPerRank;
    public double intraNodeBandwidth;
    public double interNodeBandwidth;
    public int batchSize;
    public OptimizerType optimizer = OptimizerType.SGD;
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

    /** Allows only the given sharding types. */
    public Constraints shardingTypes(ShardingType... types) {
      long mask = 0;
      for (ShardingType t : types) mask |= 1L << t.code();
      shardingTypes = mask;
      return this;
    }

    public Constraints ranks(int... v) {
      ranks = v.clone();
      return this;
    }
  }

  /** Fused optimizer; defaults are those of the C init function. */
  public static final class Optimizer {
    public OptimizerType type = OptimizerType.SGD;
    public float learningRate = 0.01f;
    public float eps = 1e-8f;
    public float beta1 = 0.9f;
    public float beta2 = 0.999f;
    public float weightDecay;
    public WeightDecayMode weightDecayMode = WeightDecayMode.NONE;

    public Optimizer type(OptimizerType v) {
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
    public long seed;
    public BoundsPolicy boundsPolicy = BoundsPolicy.ERROR;
    public int numThreads;
    public Comm dpComm;

    public EmbeddingOptions seed(long v) {
      seed = v;
      return this;
    }
  }
}
