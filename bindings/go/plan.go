// Sharding plans: configs in Go structs, the planner, JSON form and placement queries.

package shardrec

import (
	"fmt"
	"math"
	"runtime"

	"shardrec.dev/shardrec/internal/swig"
)

// ShardingType is how a table is split over ranks (shardrec_sharding_type_t).
//
// Unlike the other enumerations it is an alias of int, not a distinct type, so that constraints
// written as the earlier docs did, ShardingTypes: []int{shardrec.RowWise}, still compile and
// plan the same. That []int form is deprecated: write []shardrec.ShardingType. ShardingType
// becomes a distinct type no earlier than the minor release after the one that deprecated the
// []int form (CHANGELOG.md).
type ShardingType = int

// Sharding types (shardrec/config.h).
const (
	DataParallel    ShardingType = 0
	TableWise       ShardingType = 1
	RowWise         ShardingType = 2
	ColumnWise      ShardingType = 3
	TableRowWise    ShardingType = 4
	TableColumnWise ShardingType = 5
	Grid            ShardingType = 6
)

// Pooling is how a bag of embedding rows becomes one output row (shardrec_pooling_t).
type Pooling int

// Pooling modes (shardrec/config.h).
const (
	PoolingSum  Pooling = 0
	PoolingMean Pooling = 1
	PoolingNone Pooling = 2
)

// InitKind is how table weights are initialised (shardrec_init_kind_t).
type InitKind int

// Initialisation kinds (shardrec/config.h).
const (
	InitDefault  InitKind = 0
	InitUniform  InitKind = 1
	InitConstant InitKind = 2
)

// DType is the element type of a table's weights (shardrec_dtype_t).
type DType int

// Size is the size in bytes of one element (shardrec_dtype_size); 0 for an unknown value.
func (d DType) Size() int { return int(swig.Dtype_size(int(d))) }

// Element types (shardrec/common.h); tables store FLOAT32, FLOAT16, BFLOAT16 or, on the host,
// FP8 E4M3 / E5M2 rows (a per-row scale; weight storage types only, Size 0).
const (
	DTypeFloat32  DType = 0
	DTypeFloat16  DType = 1
	DTypeBFloat16 DType = 2
	DTypeFloat64  DType = 3
	DTypeInt32    DType = 4
	DTypeInt64    DType = 5
	DTypeUint8    DType = 6
	DTypeFP8E4M3  DType = 7
	DTypeFP8E5M2  DType = 8
)

// DeviceType is where buffers live (shardrec_device_type_t).
type DeviceType int

// Device types (shardrec/common.h).
const (
	DeviceHost DeviceType = 0
	DeviceCUDA DeviceType = 1
)

// FeatureConfig is a sparse feature (a KJT key).
type FeatureConfig struct {
	Name          string
	PoolingFactor float32 // 0 means 1.0
}

// TableConfig is an embedding table; Features are indices into the feature list, or
// FeatureNames name them instead (use one of the two).
type TableConfig struct {
	Name         string
	Rows         int64
	Dim          int
	Pooling      Pooling
	DType        DType
	Features     []int32
	InitKind     InitKind
	InitLow      float32
	InitHigh     float32
	FeatureNames []string
	// Optimizer is the table's own fused optimizer (TorchRec's per-table fused params): the
	// planner counts its state and the collection trains the table with it. nil: the
	// collection's default optimizer.
	Optimizer *OptimizerConfig
	// Dynamic makes the table dynamic (raw 64-bit ids, Rows is the capacity); nil: fixed.
	Dynamic *DynamicTableConfig
}

// Topology is the sharding group a plan is made for; zero fields mean the defaults.
type Topology struct {
	WorldSize          int
	RanksPerNode       int
	DeviceType         DeviceType
	MemoryBytes        uint64
	MemoryBytesPerRank []int64
	IntraNodeBandwidth float64
	InterNodeBandwidth float64
	BatchSize          int
	Optimizer          OptimizerType
	MemoryBandwidth    float64
	ReservedFraction   float64
	CollectiveLatency  float64 // seconds per collective; 0 means the device default
	PerIDCost          float64 // seconds of host work per id per step; 0 means the device default
	// The local disk of tiered tables (CalibrateDisk measures it): bytes per rank, 0 means 1 TiB;
	// random 4 KiB reads in bytes/s (0: 1 GiB/s) and reads/s (0: 100000) per rank.
	DiskCapacity      uint64
	DiskReadBandwidth float64
	DiskReadIOPS      float64
}

// setC copies the fields into the C struct (MemoryBytesPerRank is set separately).
func (topo *Topology) setC(t swig.Topology_t) {
	t.SetWorld_size(topo.WorldSize)
	t.SetRanks_per_node(topo.RanksPerNode)
	t.SetDevice_type(int(topo.DeviceType))
	t.SetMemory_bytes(topo.MemoryBytes)
	t.SetIntra_node_bandwidth(topo.IntraNodeBandwidth)
	t.SetInter_node_bandwidth(topo.InterNodeBandwidth)
	t.SetBatch_size(topo.BatchSize)
	t.SetOptimizer(int(topo.Optimizer))
	t.SetMemory_bandwidth(topo.MemoryBandwidth)
	t.SetReserved_fraction(topo.ReservedFraction)
	t.SetCollective_latency(topo.CollectiveLatency)
	t.SetPer_id_cost(topo.PerIDCost)
	t.SetDisk_capacity(topo.DiskCapacity)
	t.SetDisk_read_bandwidth(topo.DiskReadBandwidth)
	t.SetDisk_read_iops(topo.DiskReadIOPS)
}

// CalibrateOptions are the options of Topology.Calibrate; zero fields mean the defaults.
type CalibrateOptions struct {
	RanksShareMemory bool    // ranks are threads of one process (a local group)
	TimeBudget       float64 // soft limit in seconds; 0 means 0.25
	ThreadsPerRank   int     // the collections' num_threads; 0 means 1
	RanksPerMachine  int     // ranks running at once on this machine; 0 means RanksPerNode
}

// Calibration is what Topology.Calibrate measured (bytes/s and seconds; shardrec_calibration_t).
type Calibration struct {
	GatherBandwidth, StreamBandwidth, LoopbackBandwidth float64
	LoopbackLatency, HandoffLatency, Elapsed            float64
	Oversubscription                                    float64
	// ShmBandwidth is what each rank sends per second in an all-to-all on the shared-memory
	// transport of one host's ranks (two rank threads, 4 MiB per rank); 0 when this process
	// cannot use the transport.
	ShmBandwidth float64
	// ShmLatency is the seconds of an all-reduce of one int64 on that transport whose ranks
	// arrive apart (from the later one's arrival to the return of the one asleep waiting for
	// it: its wake included); 0 when unavailable.
	ShmLatency float64
	// ShmUsed says the topology's IntraNodeBandwidth is ShmBandwidth (and, with every rank on
	// one host, its CollectiveLatency is built on ShmLatency); false: the loopback figures.
	ShmUsed bool
}

// Calibrate measures this machine (about 0.2-0.8 s; shardrec_topology_calibrate) and writes
// MemoryBandwidth, IntraNodeBandwidth, CollectiveLatency and, on host, PerIDCost. Set
// WorldSize and RanksPerNode first. On error the topology is unchanged.
func (topo *Topology) Calibrate(opts CalibrateOptions) (Calibration, error) {
	t := swig.NewTopology_t()
	defer swig.DeleteTopology_t(t)
	o := swig.NewCalibrate_options()
	defer swig.DeleteCalibrate_options(o)
	c := swig.NewCalibration()
	defer swig.DeleteCalibration(c)
	if err := swig.Topology_init(t, uint(swig.TOPOLOGY_VERSION)); err != nil {
		return Calibration{}, err
	}
	topo.setC(t)
	if err := swig.Calibrate_options_init(o, uint(swig.CALIBRATE_OPTIONS_VERSION)); err != nil {
		return Calibration{}, err
	}
	if opts.RanksShareMemory {
		o.SetRanks_share_memory(1)
	}
	o.SetTime_budget(opts.TimeBudget)
	o.SetThreads_per_rank(opts.ThreadsPerRank)
	o.SetRanks_per_machine(opts.RanksPerMachine)
	if err := swig.Calibration_init(c, uint(swig.CALIBRATION_VERSION)); err != nil {
		return Calibration{}, err
	}
	if err := swig.Topology_calibrate(t, o, c); err != nil {
		return Calibration{}, err
	}
	topo.MemoryBandwidth = t.GetMemory_bandwidth()
	topo.IntraNodeBandwidth = t.GetIntra_node_bandwidth()
	topo.CollectiveLatency = t.GetCollective_latency()
	topo.PerIDCost = t.GetPer_id_cost()
	return Calibration{
		GatherBandwidth: c.GetGather_bandwidth(), StreamBandwidth: c.GetStream_bandwidth(),
		LoopbackBandwidth: c.GetLoopback_bandwidth(), LoopbackLatency: c.GetLoopback_latency(),
		HandoffLatency: c.GetHandoff_latency(), Elapsed: c.GetElapsed(),
		Oversubscription: c.GetOversubscription(), ShmBandwidth: c.GetShm_bandwidth(),
		ShmLatency: c.GetShm_latency(), ShmUsed: c.GetShm_used() != 0,
	}, nil
}

// CalibrateNetwork measures the network between the hosts of comm
// (shardrec_topology_calibrate_network: timed all-to-alls across hosts, about timeBudget
// seconds, 0 meaning 0.5) and writes it into InterNodeBandwidth (bytes/s per rank). Collective:
// every rank of comm calls it with the same budget, and gets the same figure. On one host nothing
// crosses: it returns 0 and leaves the topology as it is; on error too.
func (topo *Topology) CalibrateNetwork(comm *Comm, timeBudget float64) (float64, error) {
	t := swig.NewTopology_t()
	defer swig.DeleteTopology_t(t)
	if err := swig.Topology_init(t, uint(swig.TOPOLOGY_VERSION)); err != nil {
		return 0, err
	}
	topo.setC(t)
	measured := make([]float64, 1)
	h, done := comm.ref().acquire() // a nil comm reaches C as NULL and gets its error
	err := swig.Topology_calibrate_network(t, h, timeBudget, measured)
	done()
	if err != nil {
		return 0, err
	}
	topo.InterNodeBandwidth = t.GetInter_node_bandwidth()
	return measured[0], nil
}

// FillFromComm sets WorldSize to comm's size and RanksPerNode to its local size
// (shardrec_topology_from_comm), the default way to describe a launched job to the planner.
// Collective: every rank of comm calls it. Every host must run as many ranks; otherwise every
// rank gets an InvalidArgument error naming the smallest and largest. On error the topology is
// unchanged; other fields are never touched.
func (topo *Topology) FillFromComm(comm *Comm) error {
	t := swig.NewTopology_t()
	defer swig.DeleteTopology_t(t)
	if err := swig.Topology_init(t, uint(swig.TOPOLOGY_VERSION)); err != nil {
		return err
	}
	h, done := comm.ref().acquire() // a nil comm reaches C as NULL and gets its error
	err := swig.Topology_from_comm(t, h)
	done()
	if err != nil {
		return err
	}
	topo.WorldSize = t.GetWorld_size()
	topo.RanksPerNode = t.GetRanks_per_node()
	return nil
}

// TableConstraints restricts how one table may be sharded.
type TableConstraints struct {
	Table          string
	ShardingTypes  []ShardingType // allowed sharding types; empty means the default set ([]int is deprecated)
	MinPartition   int
	Ranks          []int32
	PoolingFactors []float32
	// A tiered table (docs/disk-tier.md, "Planning"): each rank's cache of it in bytes (0: held
	// in memory), the expected hit rate in (0, 1] (0: estimated from IDZipfAlpha) and the ids'
	// Zipf exponent (0: uniform).
	TierCacheBytes int64
	TierHitRate    float64
	IDZipfAlpha    float64
}

// Shard is one rectangle of a table on one rank.
type Shard struct {
	RowOffset, Rows int64
	ColOffset, Cols int
	Rank            int
}

// Plan is an immutable sharding plan; safe for concurrent use, Close included.
type Plan struct {
	owned handleRef
}

func newPlan(h uintptr) *Plan {
	p := &Plan{owned: handleRef{h: h}}
	runtime.SetFinalizer(p, closeLeaked((*Plan).Close))
	return p
}

// ref is the plan's handle and lock; nil for a nil plan (its calls get ErrCodeInvalid).
func (p *Plan) ref() *handleRef {
	if p == nil {
		return nil
	}
	return &p.owned
}

// Close releases the plan; collections created from it stay valid. Idempotent, and safe from
// any goroutine: it waits for the calls in flight on other goroutines to return.
func (p *Plan) Close() error {
	if p == nil {
		return nil
	}
	if h := p.owned.take(); h != 0 {
		swig.Plan_destroy(h)
	}
	runtime.SetFinalizer(p, nil)
	return nil
}

// NewPlan runs the planner.
func NewPlan(tables []TableConfig, features []FeatureConfig, topo Topology,
	constraints []TableConstraints) (*Plan, error) {
	for _, f := range features {
		if err := noNUL("feature", f.Name); err != nil {
			return nil, err
		}
	}
	for _, t := range tables {
		if err := noNUL("table", t.Name); err != nil {
			return nil, err
		}
		// C takes an int32 dim: a larger one would arrive cut to its low bits ("dim 0").
		if t.Dim < math.MinInt32 || t.Dim > math.MaxInt32 {
			return nil, &Error{Code: ErrCodeInvalid,
				Message: fmt.Sprintf("table %s: dim %d is beyond int32", t.Name, t.Dim)}
		}
		if err := noNUL("feature", t.FeatureNames...); err != nil {
			return nil, err
		}
	}
	for _, c := range constraints {
		if err := noNUL("table", c.Table); err != nil {
			return nil, err
		}
	}
	spec := swig.Bind_plan_spec_new()
	defer swig.Bind_plan_spec_free(spec)
	for _, f := range features {
		if err := swig.Bind_plan_spec_add_feature(spec, f.Name, f.PoolingFactor); err != nil {
			return nil, err
		}
	}
	for _, t := range tables {
		err := swig.Bind_plan_spec_add_table(spec, t.Name, t.Rows, t.Dim, int(t.Pooling), int(t.DType), t.Features,
			int(t.InitKind), t.InitLow, t.InitHigh)
		if err != nil {
			return nil, err
		}
		for _, name := range t.FeatureNames {
			if err := swig.Bind_plan_spec_add_table_feature_name(spec, name); err != nil {
				return nil, err
			}
		}
		if t.Optimizer != nil {
			o, err := newNativeOptimizer(t.Optimizer)
			if err != nil {
				return nil, err
			}
			err = swig.Bind_plan_spec_set_table_optimizer(spec, o)
			swig.DeleteOptimizer_config(o)
			if err != nil {
				return nil, err
			}
		}
		if t.Dynamic != nil {
			d, err := newNativeDynamic(t.Dynamic)
			if err != nil {
				return nil, err
			}
			err = swig.Bind_plan_spec_set_table_dynamic(spec, d)
			swig.DeleteDynamic_table_config(d)
			if err != nil {
				return nil, err
			}
		}
	}
	for _, c := range constraints {
		if err := nonNegative("TierCacheBytes of table "+c.Table, c.TierCacheBytes); err != nil {
			return nil, err
		}
		var mask uint
		for _, s := range c.ShardingTypes {
			mask |= 1 << uint(s)
		}
		err := swig.Bind_plan_spec_add_constraints(spec, c.Table, mask, c.MinPartition, c.Ranks,
			c.PoolingFactors)
		if err == nil {
			err = swig.Bind_plan_spec_set_constraints_tier(spec, c.TierCacheBytes, c.TierHitRate,
				c.IDZipfAlpha)
		}
		if err != nil {
			return nil, err
		}
	}
	t := swig.Bind_plan_spec_topology(spec)
	topo.setC(t)
	for r, bytes := range topo.MemoryBytesPerRank {
		if err := nonNegative(fmt.Sprintf("MemoryBytesPerRank[%d]", r), bytes); err != nil {
			return nil, err
		}
	}
	if topo.MemoryBytesPerRank != nil {
		if err := swig.Bind_plan_spec_set_memory_bytes_per_rank(spec, topo.MemoryBytesPerRank); err != nil {
			return nil, err
		}
	}
	out := make([]uintptr, 1)
	if err := swig.Bind_plan_create(out, spec); err != nil {
		return nil, err
	}
	return newPlan(out[0]), nil
}

// PlanFromJSON reads and validates a plan written by JSON().
func PlanFromJSON(text string) (*Plan, error) {
	if err := noNUL("plan JSON", text); err != nil {
		return nil, err
	}
	out := make([]uintptr, 1)
	if err := swig.Plan_from_json(out, text); err != nil {
		return nil, err
	}
	return newPlan(out[0]), nil
}

// JSON is the plan's text form.
func (p *Plan) JSON() (string, error) {
	var s string
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_to_json(h, &s)
	return s, err
}

// Stats is the planner's human-readable report.
func (p *Plan) Stats() (string, error) {
	var s string
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_stats(h, &s)
	return s, err
}

// Hash is the plan's stable 64-bit hash.
func (p *Plan) Hash() (uint64, error) {
	out := make([]uint64, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_hash(h, out)
	return out[0], err
}

// WorldSize is the size of the sharding group.
func (p *Plan) WorldSize() (int, error) {
	out := make([]int32, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_world_size(h, out)
	return int(out[0]), err
}

// RanksPerNode is the ranks per node of the topology the plan was made for.
func (p *Plan) RanksPerNode() (int, error) {
	out := make([]int32, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_ranks_per_node(h, out)
	return int(out[0]), err
}

// NumTables is the number of tables.
func (p *Plan) NumTables() (int, error) {
	out := make([]uint64, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_num_tables(h, out)
	return int(out[0]), err
}

// NumFeatures is the number of features.
func (p *Plan) NumFeatures() (int, error) {
	out := make([]uint64, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_num_features(h, out)
	return int(out[0]), err
}

// TableName is the name of table t.
func (p *Plan) TableName(t int) (string, error) {
	if err := negativeIndex("table", t); err != nil {
		return "", err
	}
	var s string
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_table_name(h, int64(t), &s)
	return s, err
}

// FeatureName is the name of feature f.
func (p *Plan) FeatureName(f int) (string, error) {
	if err := negativeIndex("feature", f); err != nil {
		return "", err
	}
	var s string
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_feature_name(h, int64(f), &s)
	return s, err
}

// FindTable is the index of the table called name (SHARDREC_ENOTFOUND when none).
func (p *Plan) FindTable(name string) (int, error) {
	if err := noNUL("table", name); err != nil {
		return 0, err
	}
	out := make([]uint64, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_find_table(h, name, out)
	return int(out[0]), err
}

// TableShape is the (rows, dim) of table t.
func (p *Plan) TableShape(t int) (int64, int, error) {
	if err := negativeIndex("table", t); err != nil {
		return 0, 0, err
	}
	rows := make([]int64, 1)
	dim := make([]int32, 1)
	h, done := p.ref().acquire()
	defer done()
	if err := swig.Plan_table_rows(h, int64(t), rows); err != nil {
		return 0, 0, err
	}
	if err := swig.Plan_table_dim(h, int64(t), dim); err != nil {
		return 0, 0, err
	}
	return rows[0], int(dim[0]), nil
}

// TableSharding is the sharding type and number of shards of table t.
func (p *Plan) TableSharding(t int) (ShardingType, int, error) {
	if err := negativeIndex("table", t); err != nil {
		return 0, 0, err
	}
	typ := make([]int32, 1)
	n := make([]uint64, 1)
	h, done := p.ref().acquire()
	defer done()
	err := swig.Plan_table_sharding(h, int64(t), typ, n)
	return ShardingType(typ[0]), int(n[0]), err
}

// Shard is shard s of table t.
func (p *Plan) Shard(t, s int) (Shard, error) {
	if err := negativeIndex("table or shard", t, s); err != nil {
		return Shard{}, err
	}
	n := swig.NewShard_t()
	defer swig.DeleteShard_t(n)
	h, done := p.ref().acquire()
	defer done()
	if err := swig.Plan_shard(h, int64(t), int64(s), n); err != nil {
		return Shard{}, err
	}
	return Shard{RowOffset: n.GetRow_offset(), Rows: n.GetRows(), ColOffset: n.GetCol_offset(),
		Cols: n.GetCols(), Rank: n.GetRank()}, nil
}
