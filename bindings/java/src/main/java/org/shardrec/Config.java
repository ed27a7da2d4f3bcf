// Plain configuration classes with library defaults (zero means default, as in the C structs):
// features, tables, topology, per-table constraints (the enumerations are top-level types).
package org.shardrec;


/** Configuration classes of config.h and embedding_options.h. */
public final class Config {
  private Config() {}

  // Deprecated aliases: the constants of this binding's earlier docs (ints then), now aliases of
  // the enum constants that replaced them, so programs that pass them to the binding still
  // compile and behave the same. Removed no earlier than the minor release after the one that
  // deprecated them (CHANGELOG.md).

  /** @deprecated Use {@link ShardingType#DATA_PARALLEL}. */
  @Deprecated
  public static final ShardingType DATA_PARALLEL = ShardingType.DATA_PARALLEL;

  /** @deprecated Use {@link ShardingType#TABLE_WISE}. */
  @Deprecated
  public static final ShardingType TABLE_WISE = ShardingType.TABLE_WISE;

  /** @deprecated Use {@link ShardingType#ROW_WISE}. */
  @Deprecated
  public static final ShardingType ROW_WISE = ShardingType.ROW_WISE;

  /** @deprecated Use {@link ShardingType#COLUMN_WISE}. */
  @Deprecated
  public static final ShardingType COLUMN_WISE = ShardingType.COLUMN_WISE;

  /** @deprecated Use {@link ShardingType#TABLE_ROW_WISE}. */
  @Deprecated
  public static final ShardingType TABLE_ROW_WISE = ShardingType.TABLE_ROW_WISE;

  /** @deprecated Use {@link ShardingType#TABLE_COLUMN_WISE}. */
  @Deprecated
  public static final ShardingType TABLE_COLUMN_WISE = ShardingType.TABLE_COLUMN_WISE;

  /** @deprecated Use {@link ShardingType#GRID}. */
  @Deprecated
  public static final ShardingType GRID = ShardingType.GRID;

  /** @deprecated Use {@link Pooling#SUM}. */
  @Deprecated
  public static final Pooling POOLING_SUM = Pooling.SUM;

  /** @deprecated Use {@link Pooling#MEAN}. */
  @Deprecated
  public static final Pooling POOLING_MEAN = Pooling.MEAN;

  /** @deprecated Use {@link Pooling#NONE}. */
  @Deprecated
  public static final Pooling POOLING_NONE = Pooling.NONE;

  /** @deprecated Use {@link InitKind#DEFAULT}. */
  @Deprecated
  public static final InitKind INIT_DEFAULT = InitKind.DEFAULT;

  /** @deprecated Use {@link InitKind#UNIFORM}. */
  @Deprecated
  public static final InitKind INIT_UNIFORM = InitKind.UNIFORM;

  /** @deprecated Use {@link InitKind#CONSTANT}. */
  @Deprecated
  public static final InitKind INIT_CONSTANT = InitKind.CONSTANT;

  /** @deprecated Use {@link DType#FLOAT32}. */
  @Deprecated
  public static final DType DTYPE_FLOAT32 = DType.FLOAT32;

  /** @deprecated Use {@link DType#FLOAT64}. */
  @Deprecated
  public static final DType DTYPE_FLOAT64 = DType.FLOAT64;

  /** @deprecated Use {@link DType#INT32}. */
  @Deprecated
  public static final DType DTYPE_INT32 = DType.INT32;

  /** @deprecated Use {@link DType#INT64}. */
  @Deprecated
  public static final DType DTYPE_INT64 = DType.INT64;

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
    /** Names of the features that read this table, as an alternative to {@link #features}. */
    public String[] featureNames = new String[0];
    /**
     * The table's own fused optimizer (TorchRec's per-table fused params): the planner counts its
     * state and the collection trains the table with it. null: the collection's default.
     */
    public Optimizer optimizer;
    /**
     * Makes the table dynamic (raw 64-bit ids; {@link #rows} is then its capacity), copied when
     * the plan is made. null: a fixed table (ids in [0, rows)).
     */
    public DynamicTable dynamic;
    public InitKind initKind = InitKind.DEFAULT;
    public float initLow;
    public float initHigh;

    public Table(String name, long rows, int dim) {
      this.name = name;
      this.rows = rows;
      this.dim = dim;
    }

    public Table features(int... v) {
      features = ShardrecException.nonNull(v, "features").clone();
      return this;
    }

    /** Names the features that read this table (instead of {@link #features(int...)}). */
    public Table featureNames(String... v) {
      featureNames = ShardrecException.nonNull(v, "featureNames").clone();
      return this;
    }

    /** Gives this table its own optimizer (copied when the plan is made). */
    public Table optimizer(Optimizer v) {
      optimizer = v;
      return this;
    }

    /** Makes this table dynamic (docs/dynamic-tables.md); null makes it fixed again. */
    public Table dynamic(DynamicTable v) {
      dynamic = v;
      return this;
    }

    public Table pooling(Pooling v) {
      if (v == null) throw ShardrecException.invalid("pooling must not be null");
      pooling = v;
      return this;
    }

    /** Storage type of the weights (FLOAT32, FLOAT16, BFLOAT16, or FP8_E4M3 / FP8_E5M2). */
    public Table dtype(DType v) {
      dtype = ShardrecException.nonNull(v, "dtype");
      return this;
    }

    public Table init(InitKind kind, float low, float high) {
      initKind = ShardrecException.nonNull(kind, "kind");
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
    /** Seconds per collective; 0 means the device default. */
    public double collectiveLatency;
    /** Seconds of host work per id per step; 0 means the device default. */
    public double perIdCost;
    /** Disk per rank for tiered tables' records (bytes); 0 means 1 TiB. */
    public long diskCapacity;
    /** Random 4 KiB reads of that disk per rank, bytes/s (0: 1 GiB/s) and reads/s (0: 100000). */
    public double diskReadBandwidth;
    public double diskReadIops;

    public Topology(int worldSize) {
      this.worldSize = worldSize;
    }

    /** The C struct with this topology's fields (memoryBytesPerRank is not carried). */
    org.shardrec.swig.topology toNative() {
      ShardrecException.nonNull(deviceType, "deviceType");
      ShardrecException.nonNull(optimizer, "optimizer");
      org.shardrec.swig.topology t = new org.shardrec.swig.topology();
      org.shardrec.swig.Native.topology_init(t, NativeConstants.TOPOLOGY_VERSION);
      copyTo(t);
      return t;
    }

    void copyTo(org.shardrec.swig.topology t) {
      t.setWorld_size(worldSize);
      t.setRanks_per_node(ranksPerNode);
      t.setDevice_type(ShardrecException.nonNull(deviceType, "deviceType").code());
      t.setMemory_bytes(memoryBytes);
      t.setIntra_node_bandwidth(intraNodeBandwidth);
      t.setInter_node_bandwidth(interNodeBandwidth);
      t.setBatch_size(batchSize);
      t.setOptimizer(ShardrecException.nonNull(optimizer, "optimizer").code());
      t.setMemory_bandwidth(memoryBandwidth);
      t.setReserved_fraction(reservedFraction);
      t.setCollective_latency(collectiveLatency);
      t.setPer_id_cost(perIdCost);
      t.setDisk_capacity(diskCapacity);
      t.setDisk_read_bandwidth(diskReadBandwidth);
      t.setDisk_read_iops(diskReadIops);
    }

    /**
     * Measures the disk under {@code dir} for tiered tables (shardrec_topology_calibrate_disk: a
     * scratch file of {@code fileBytes}, 0 meaning 256 MiB, read at random and in sequence for
     * about {@code timeBudget} seconds, 0 meaning 1) and writes diskReadIops, diskReadBandwidth
     * and, when 0, diskCapacity (each the machine's figure over its ranks). Set worldSize /
     * ranksPerNode first.
     *
     * @return the machine's random 4 KiB reads per second
     */
    public double calibrateDisk(String dir, long fileBytes, double timeBudget) {
      org.shardrec.swig.topology t = toNative();
      double[] iops = new double[1];
      int[] direct = new int[1];
      try {
        org.shardrec.swig.Native.topology_calibrate_disk(
            t, dir, fileBytes, timeBudget, iops, direct);
        diskReadIops = t.getDisk_read_iops();
        diskReadBandwidth = t.getDisk_read_bandwidth();
        diskCapacity = t.getDisk_capacity();
        return iops[0];
      } finally {
        t.delete();
      }
    }

    /**
     * A topology for the job that {@code comm} spans (shardrec_topology_from_comm): worldSize is
     * its size and ranksPerNode its local size (comm.localSize()); every other field has its
     * default. The default way to describe a launched job to the planner. Collective: every rank
     * of {@code comm} calls it. Every host must run as many ranks; otherwise every rank gets a
     * ShardrecException (EINVAL) naming the smallest and largest.
     */
    public static Topology fromComm(Comm comm) {
      org.shardrec.swig.topology t = new Topology(1).toNative();
      try {
        NativeHandle.use(comm, "comm", c -> org.shardrec.swig.Native.topology_from_comm(t, c));
        Topology v = new Topology(t.getWorld_size());
        v.ranksPerNode = t.getRanks_per_node();
        return v;
      } finally {
        t.delete();
      }
    }

    /**
     * Measures the network between the hosts of {@code comm} (shardrec_topology_calibrate_network:
     * timed all-to-alls across hosts, about {@code timeBudget} seconds, 0 meaning 0.5) and writes
     * it into interNodeBandwidth (bytes/s per rank). Collective: every rank of {@code comm} calls
     * it with the same budget, and gets the same figure. On one host nothing crosses: returns 0
     * and leaves the topology as it is.
     *
     * @return the measured bytes/s, 0 on one host
     */
    public double calibrateNetwork(Comm comm, double timeBudget) {
      org.shardrec.swig.topology t = toNative();
      double[] measured = new double[1];
      try {
        NativeHandle.use(comm, "comm", c -> org.shardrec.swig.Native.topology_calibrate_network(
            t, c, timeBudget, measured));
        interNodeBandwidth = t.getInter_node_bandwidth();
        return measured[0];
      } finally {
        t.delete();
      }
    }

    /**
     * Measures this machine (shardrec_topology_calibrate, about 0.2-0.8 s) and writes the
     * figures into this topology: memoryBandwidth, intraNodeBandwidth, collectiveLatency and
     * (host) perIdCost. Set worldSize / ranksPerNode first.
     *
     * @param ranksShareMemory true when the ranks are threads of one process (a local group)
     * @param threadsPerRank the collections' num_threads (0 means 1)
     * @return the raw figures
     */
    public Calibration calibrate(boolean ranksShareMemory, int threadsPerRank) {
      return calibrate(ranksShareMemory, threadsPerRank, 0);
    }

    /**
     * As {@link #calibrate(boolean, int)}, with the number of ranks that run at once on this
     * machine when it differs from ranksPerNode (0 means ranksPerNode).
     */
    public Calibration calibrate(boolean ranksShareMemory, int threadsPerRank,
                                 int ranksPerMachine) {
      org.shardrec.swig.topology t = toNative();
      org.shardrec.swig.calibrate_options o = new org.shardrec.swig.calibrate_options();
      org.shardrec.swig.calibration c = new org.shardrec.swig.calibration();
      try {
        org.shardrec.swig.Native.calibrate_options_init(o, NativeConstants.CALIBRATE_OPTIONS_VERSION);
        o.setRanks_share_memory(ranksShareMemory ? 1 : 0);
        o.setThreads_per_rank(threadsPerRank);
        o.setRanks_per_machine(ranksPerMachine);
        org.shardrec.swig.Native.calibration_init(c, NativeConstants.CALIBRATION_VERSION);
        org.shardrec.swig.Native.topology_calibrate(t, o, c);
        memoryBandwidth = t.getMemory_bandwidth();
        intraNodeBandwidth = t.getIntra_node_bandwidth();
        collectiveLatency = t.getCollective_latency();
        perIdCost = t.getPer_id_cost();
        Calibration v = new Calibration();
        v.gatherBandwidth = c.getGather_bandwidth();
        v.streamBandwidth = c.getStream_bandwidth();
        v.loopbackBandwidth = c.getLoopback_bandwidth();
        v.loopbackLatency = c.getLoopback_latency();
        v.handoffLatency = c.getHandoff_latency();
        v.elapsed = c.getElapsed();
        v.oversubscription = c.getOversubscription();
        v.shmBandwidth = c.getShm_bandwidth();
        v.shmLatency = c.getShm_latency();
        v.shmUsed = c.getShm_used() != 0;
        return v;
      } finally {
        t.delete();
        o.delete();
        c.delete();
      }
    }

    public Topology batchSize(int v) {
      batchSize = v;
      return this;
    }

    /** The optimizer the plan is made for (the default of tables without their own). */
    public Topology optimizer(OptimizerType v) {
      optimizer = ShardrecException.nonNull(v, "optimizer");
      return this;
    }

    public Topology ranksPerNode(int v) {
      ranksPerNode = v;
      return this;
    }
  }

  /** What Topology.calibrate measured (bytes/s and seconds; see shardrec_calibration_t). */
  public static final class Calibration {
    public double gatherBandwidth;
    public double streamBandwidth;
    public double loopbackBandwidth;
    public double loopbackLatency;
    public double handoffLatency;
    public double elapsed;
    public double oversubscription;
    /**
     * Bytes/s each rank sends in an all-to-all on the shared-memory transport of one host's ranks
     * (two rank threads, 4 MiB per rank); 0 when this process cannot use the transport.
     */
    public double shmBandwidth;
    /**
     * Seconds of an all-reduce of one int64 on that transport whose ranks arrive apart (from the
     * later one's arrival to the return of the one asleep waiting for it: its wake included); 0
     * when unavailable.
     */
    public double shmLatency;
    /**
     * The topology's intraNodeBandwidth is shmBandwidth (and, with every rank on one host, its
     * collectiveLatency is built on shmLatency); false: the loopback figures.
     */
    public boolean shmUsed;
  }

  /** Constraints on how one table may be sharded. */
  public static final class Constraints {
    public final String table;
    public long shardingTypes;
    public int minPartition;
    public int[] ranks;
    public float[] poolingFactors;
    /** A tiered table: each rank's cache of it in bytes (0: held in memory). */
    public long tierCacheBytes;
    /** The expected hit rate in (0, 1]; 0: estimated from idZipfAlpha. */
    public double tierHitRate;
    /** The Zipf exponent of the table's ids (0: uniform). */
    public double idZipfAlpha;

    public Constraints(String table) {
      this.table = table;
    }

    /** Plans the table tiered with a cache of {@code cacheBytes} per rank (docs/disk-tier.md). */
    public Constraints tier(long cacheBytes, double hitRate, double zipfAlpha) {
      tierCacheBytes = cacheBytes;
      tierHitRate = hitRate;
      idZipfAlpha = zipfAlpha;
      return this;
    }

    /** Allows only the given sharding types. */
    public Constraints shardingTypes(ShardingType... types) {
      long mask = 0;
      for (ShardingType t : ShardrecException.nonNull(types, "types")) {
        mask |= 1L << ShardrecException.nonNull(t, "a sharding type").code();
      }
      shardingTypes = mask;
      return this;
    }

    public Constraints ranks(int... v) {
      ranks = ShardrecException.nonNull(v, "ranks").clone();
      return this;
    }

    /** Smallest column block of a column-wise split (0: 128, or even over pinned ranks). */
    public Constraints minPartition(int v) {
      minPartition = v;
      return this;
    }
  }

  /** Fused optimizer; defaults are those of the C init function. */
  public static final class Optimizer {
    // Deprecated aliases of the earlier docs' constants (see the top of Config).
    /** @deprecated Use {@link OptimizerType#SGD}. */
    @Deprecated
    public static final OptimizerType SGD = OptimizerType.SGD;

    /** @deprecated Use {@link OptimizerType#ADAGRAD}. */
    @Deprecated
    public static final OptimizerType ADAGRAD = OptimizerType.ADAGRAD;

    /** @deprecated Use {@link OptimizerType#ROWWISE_ADAGRAD}. */
    @Deprecated
    public static final OptimizerType ROWWISE_ADAGRAD = OptimizerType.ROWWISE_ADAGRAD;

    /** @deprecated Use {@link OptimizerType#ADAM}. */
    @Deprecated
    public static final OptimizerType ADAM = OptimizerType.ADAM;

    /** @deprecated Use {@link OptimizerType#PARTIAL_ROWWISE_ADAM}. */
    @Deprecated
    public static final OptimizerType PARTIAL_ROWWISE_ADAM = OptimizerType.PARTIAL_ROWWISE_ADAM;

    /** @deprecated Use {@link OptimizerType#LAMB}. */
    @Deprecated
    public static final OptimizerType LAMB = OptimizerType.LAMB;
    public OptimizerType type = OptimizerType.SGD;
    public float learningRate = 0.01f;
    public float eps = 1e-8f;
    public float beta1 = 0.9f;
    public float beta2 = 0.999f;
    public float weightDecay;
    public WeightDecayMode weightDecayMode = WeightDecayMode.NONE;
    /** Round FLOAT16/BFLOAT16/FP8 updates stochastically instead of to nearest even. */
    public boolean stochasticRounding;

    /** The C struct of this configuration; the caller deletes it. */
    /** "type must not be null" (or weightDecayMode) for a public field set to null; else null. */
    String nullField() {
      return type == null ? "the optimizer's type must not be null"
             : weightDecayMode == null ? "the optimizer's weightDecayMode must not be null"
             : null;
    }

    org.shardrec.swig.optimizer_config toNative() {
      String refused = nullField();
      if (refused != null) throw ShardrecException.invalid(refused);
      org.shardrec.swig.optimizer_config o = new org.shardrec.swig.optimizer_config();
      org.shardrec.swig.Native.optimizer_config_init(o, NativeConstants.OPTIMIZER_CONFIG_VERSION);
      o.setType(type.code());
      o.setLearning_rate(learningRate);
      o.setEps(eps);
      o.setBeta1(beta1);
      o.setBeta2(beta2);
      o.setWeight_decay(weightDecay);
      o.setWeight_decay_mode(weightDecayMode.code());
      o.setStochastic_rounding(stochasticRounding ? 1 : 0);
      return o;
    }

    static Optimizer fromNative(org.shardrec.swig.optimizer_config o) {
      Optimizer v = new Optimizer();
      v.type = OptimizerType.of(o.getType());
      v.learningRate = o.getLearning_rate();
      v.eps = o.getEps();
      v.beta1 = o.getBeta1();
      v.beta2 = o.getBeta2();
      v.weightDecay = o.getWeight_decay();
      v.weightDecayMode = WeightDecayMode.of(o.getWeight_decay_mode());
      v.stochasticRounding = o.getStochastic_rounding() != 0;
      return v;
    }

    public Optimizer weightDecay(float v, WeightDecayMode mode) {
      weightDecayMode = ShardrecException.nonNull(mode, "mode");
      weightDecay = v;
      return this;
    }

    public Optimizer type(OptimizerType v) {
      type = ShardrecException.nonNull(v, "type");
      return this;
    }

    public Optimizer learningRate(float v) {
      learningRate = v;
      return this;
    }
  }

  /** Options of a collection. */
  public static final class EmbeddingOptions {
    // Deprecated aliases of the earlier docs' constants (see the top of Config).
    /** @deprecated Use {@link BoundsPolicy#ERROR}. */
    @Deprecated
    public static final BoundsPolicy BOUNDS_ERROR = BoundsPolicy.ERROR;

    /** @deprecated Use {@link BoundsPolicy#CLAMP}. */
    @Deprecated
    public static final BoundsPolicy BOUNDS_CLAMP = BoundsPolicy.CLAMP;

    /** @deprecated Use {@link BoundsPolicy#SKIP}. */
    @Deprecated
    public static final BoundsPolicy BOUNDS_SKIP = BoundsPolicy.SKIP;
    public long seed;
    public BoundsPolicy boundsPolicy = BoundsPolicy.ERROR;
    public int numThreads;
    public Comm dpComm;
    /** Encoding of the forward's return all-to-all; exact fp32 by default. */
    public CommEncoding forwardCommEncoding = CommEncoding.FP32;
    /** Encoding of the backward's gradient all-to-all and data-parallel all-reduce. */
    public CommEncoding backwardCommEncoding = CommEncoding.FP32;
    /** What a NaN or infinite per-id weight or output gradient does; CHECK by default. */
    public NonFinitePolicy nonFinite = NonFinitePolicy.CHECK;
    /** Page size of the table storage; huge pages by default. */
    public TableMemory tableMemory = TableMemory.HUGE_PAGES;
    /**
     * Where the tables live: HOST (the default). CUDA collections are refused with
     * EUNSUPPORTED by this build (embedding_options.h); the field is forwarded as given.
     */
    public DeviceType deviceType = DeviceType.HOST;
    /** CUDA ordinal; ignored on the host. */
    public int deviceIndex;
    /**
     * Capacity hints of a GPU collection (embedding_options.h): the most samples and the most ids
     * (over all features) this rank passes to one forward. With both above 0 the per-step device
     * buffers are sized at creation; 0 (the default) means unknown (they grow on demand). Host
     * collections ignore them; negative values are rejected.
     */
    public long maxBatchSize;
    public long maxIdsPerBatch;
    /**
     * Tables tiered on this rank ({@link TableTier}, docs/disk-tier.md): their rows on local disk
     * under a DRAM cache, bit-identical to memory. Empty (the default): every table in memory.
     */
    public java.util.List<TableTier> tiers = new java.util.ArrayList<>();

    public EmbeddingOptions tier(String table, String dir, long cacheBytes) {
      tiers.add(new TableTier(table, dir, cacheBytes));
      return this;
    }

    public EmbeddingOptions capacity(long maxBatchSize, long maxIdsPerBatch) {
      this.maxBatchSize = maxBatchSize;
      this.maxIdsPerBatch = maxIdsPerBatch;
      return this;
    }

    public EmbeddingOptions device(DeviceType type, int index) {
      deviceType = ShardrecException.nonNull(type, "type");
      deviceIndex = index;
      return this;
    }

    public EmbeddingOptions nonFinite(NonFinitePolicy v) {
      nonFinite = ShardrecException.nonNull(v, "nonFinite");
      return this;
    }

    public EmbeddingOptions tableMemory(TableMemory v) {
      tableMemory = ShardrecException.nonNull(v, "tableMemory");
      return this;
    }

    public EmbeddingOptions seed(long v) {
      seed = v;
      return this;
    }

    /** Sets both the forward and the backward communication encoding. */
    public EmbeddingOptions commEncoding(CommEncoding forward, CommEncoding backward) {
      ShardrecException.nonNull(forward, "forward");
      backwardCommEncoding = ShardrecException.nonNull(backward, "backward");
      forwardCommEncoding = forward;
      return this;
    }
  }

  /**
   * What makes a table dynamic (shardrec_dynamic_table_config_t, docs/dynamic-tables.md): its ids
   * are any 64-bit value, a row is created the first time training sees its id (after
   * admission) and leaves by eviction. Host collections (a CUDA one refuses it); every sharding
   * type. Defaults are those of the C init function (no eviction, admission at first sight).
   */
  public static final class DynamicTable {
    public Eviction eviction = Eviction.NONE;
    /** Occurrences in training an id needs before it gets a row; 0 or 1: at first sight. */
    public int admissionThreshold;
    /** TTL only: steps a row may go unseen before it may be evicted (>= 1 with TTL). */
    public long ttlSteps;
    /**
     * 0: the capacity is the table's {@code rows}. Else the capacity in bytes of memory (the
     * table's {@code rows} must then be 0), turned into slots by the planner (docs/dynamic-tables.md,
     * "Capacity in bytes").
     */
    public long capacityBytes;
    /**
     * 0: admission counts never decay. Else every admission count is halved at the start of each
     * training step whose number is a multiple of it, so an id must reach {@code
     * admissionThreshold} within recent steps (docs/dynamic-tables.md, "Admission"); >= 0.
     */
    public long admissionDecaySteps;

    public DynamicTable eviction(Eviction v) {
      eviction = ShardrecException.nonNull(v, "eviction");
      return this;
    }

    public DynamicTable admissionThreshold(int v) {
      admissionThreshold = v;
      return this;
    }

    public DynamicTable ttlSteps(long v) {
      ttlSteps = v;
      return this;
    }

    public DynamicTable capacityBytes(long v) {
      capacityBytes = v;
      return this;
    }

    public DynamicTable admissionDecaySteps(long v) {
      admissionDecaySteps = v;
      return this;
    }

    org.shardrec.swig.dynamic_table_config toNative() {
      ShardrecException.nonNull(eviction, "eviction");
      org.shardrec.swig.dynamic_table_config d = new org.shardrec.swig.dynamic_table_config();
      org.shardrec.swig.Native.dynamic_table_config_init(
          d, NativeConstants.DYNAMIC_TABLE_CONFIG_VERSION);
      d.setEviction(eviction.code());
      d.setAdmission_threshold(admissionThreshold);
      d.setTtl_steps(ttlSteps);
      d.setCapacity_bytes(capacityBytes);
      d.setAdmission_decay_steps(admissionDecaySteps);
      return d;
    }
  }
}
