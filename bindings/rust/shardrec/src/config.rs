//! Plain configuration types with the library defaults, converted to the C structs for a call.
use crate::sys;

/// How a table is sharded (`SHARDREC_SHARDING_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardingType {
    DataParallel = 0,
    TableWise = 1,
    RowWise = 2,
    ColumnWise = 3,
    TableRowWise = 4,
    TableColumnWise = 5,
    Grid = 6,
}

impl ShardingType {
    pub(crate) fn from_raw(v: i32) -> Option<ShardingType> {
        use ShardingType::*;
        [
            DataParallel,
            TableWise,
            RowWise,
            ColumnWise,
            TableRowWise,
            TableColumnWise,
            Grid,
        ]
        .into_iter()
        .find(|t| *t as i32 == v)
    }
}

/// How the ids of one bag are combined (`SHARDREC_POOLING_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pooling {
    #[default]
    Sum = 0,
    Mean = 1,
    None = 2,
}

/// A sparse feature (a KJT key).
#[derive(Clone, Debug, Default)]
pub struct Feature {
    pub name: String,
    /// Planner hint: expected ids per bag; 0 means 1.0.
    pub pooling_factor: f32,
}

impl Feature {
    pub fn new(name: &str) -> Feature {
        Feature {
            name: name.to_string(),
            pooling_factor: 0.0,
        }
    }
}

/// An embedding table; `features` are indices into the feature list, or `feature_names` name
/// them instead (use one of the two).
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub name: String,
    pub rows: i64,
    pub dim: i32,
    pub pooling: Pooling,
    /// Weight storage type: `Float32` (default), `Float16`, `BFloat16`, `Fp8E4M3` or `Fp8E5M2`.
    pub dtype: crate::DType,
    pub features: Vec<i32>,
    /// `SHARDREC_INIT_*` kind with its bounds (0 = default uniform in ±sqrt(1/rows)).
    pub init_kind: i32,
    pub init_low: f32,
    pub init_high: f32,
    /// Names of the features that read the table, as an alternative to `features`.
    pub feature_names: Vec<String>,
    /// The table's own fused optimizer (TorchRec's per-table fused params): the planner counts
    /// its state and the collection trains the table with it. `None`: the collection's default.
    pub optimizer: Option<Optimizer>,
    /// Makes the table dynamic (raw 64-bit ids; `rows` is then its capacity), copied when the
    /// plan is made. `None`: a fixed table (ids in `0..rows`).
    pub dynamic: Option<crate::DynamicTable>,
}

impl Table {
    pub fn new(name: &str, rows: i64, dim: i32, features: &[i32]) -> Table {
        Table {
            name: name.to_string(),
            rows,
            dim,
            features: features.to_vec(),
            ..Table::default()
        }
    }

    /// A table read by the named features.
    pub fn with_feature_names(name: &str, rows: i64, dim: i32, features: &[&str]) -> Table {
        Table {
            name: name.to_string(),
            rows,
            dim,
            feature_names: features.iter().map(|f| f.to_string()).collect(),
            ..Table::default()
        }
    }

    /// Gives the table its own optimizer.
    pub fn optimizer(mut self, optimizer: Optimizer) -> Table {
        self.optimizer = Some(optimizer);
        self
    }

    /// Makes this table dynamic (docs/dynamic-tables.md).
    pub fn dynamic(mut self, dynamic: crate::DynamicTable) -> Table {
        self.dynamic = Some(dynamic);
        self
    }
}

/// The sharding group a plan is made for; zero fields mean the library defaults.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub world_size: i32,
    pub ranks_per_node: i32,
    pub device_type: i32,
    pub memory_bytes: u64,
    pub memory_bytes_per_rank: Vec<u64>,
    pub intra_node_bandwidth: f64,
    pub inter_node_bandwidth: f64,
    pub batch_size: i32,
    /// Default optimizer of the tables without their own: the planner counts its state, and a
    /// collection created without an optimizer trains with it.
    pub optimizer: OptimizerType,
    pub memory_bandwidth: f64,
    pub reserved_fraction: f64,
    /// Seconds per collective; 0 means the device default.
    pub collective_latency: f64,
    /// Seconds of host work per id per step; 0 means the device default.
    pub per_id_cost: f64,
    /// Disk per rank for tiered tables' records (bytes); 0 means 1 TiB.
    pub disk_capacity: u64,
    /// Random 4 KiB reads of that disk per rank: bytes/s (0: 1 GiB/s) and reads/s (0: 100000).
    pub disk_read_bandwidth: f64,
    pub disk_read_iops: f64,
}

/// Options of [`Topology::calibrate`]; zero fields mean the defaults.
#[derive(Clone, Debug, Default)]
pub struct CalibrateOptions {
    /// The ranks are threads of one process (a local group).
    pub ranks_share_memory: bool,
    /// Soft limit in seconds; 0 means 0.25.
    pub time_budget: f64,
    /// The collections' `num_threads`; 0 means 1.
    pub threads_per_rank: i32,
    /// Ranks running at once on this machine; 0 means the topology's `ranks_per_node`.
    pub ranks_per_machine: i32,
}

/// What [`Topology::calibrate`] measured (bytes/s and seconds; see `shardrec_calibration_t`).
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    pub gather_bandwidth: f64,
    pub stream_bandwidth: f64,
    pub loopback_bandwidth: f64,
    pub loopback_latency: f64,
    pub handoff_latency: f64,
    pub elapsed: f64,
    pub oversubscription: f64,
    /// Bytes/s each rank sends in an all-to-all on the shared-memory transport of one host's
    /// ranks (two rank threads, 4 MiB per rank); 0 when this process cannot use the transport.
    pub shm_bandwidth: f64,
    /// Seconds of an all-reduce of one int64 on that transport whose ranks arrive apart (from
    /// the later one's arrival to the return of the one asleep waiting for it: its wake
    /// included); 0 when unavailable.
    pub shm_latency: f64,
    /// The topology's `intra_node_bandwidth` is `shm_bandwidth` (and, with every rank on one
    /// host, its `collective_latency` is built on `shm_latency`); false: the loopback figures.
    pub shm_used: bool,
}

impl Topology {
    pub fn new(world_size: i32) -> Topology {
        Topology {
            world_size,
            ..Topology::default()
        }
    }

    /// The C struct; borrows `memory_bytes_per_rank`.
    pub(crate) fn raw(&self) -> sys::shardrec_topology_t {
        // SAFETY: the struct is plain data; init fills the defaults.
        let mut t: sys::shardrec_topology_t = unsafe { std::mem::zeroed() };
        unsafe { sys::shardrec_topology_init(&mut t, sys::SHARDREC_TOPOLOGY_VERSION) };
        t.world_size = self.world_size;
        t.ranks_per_node = self.ranks_per_node;
        t.device_type = self.device_type;
        t.memory_bytes = self.memory_bytes;
        if !self.memory_bytes_per_rank.is_empty() {
            t.memory_bytes_per_rank = self.memory_bytes_per_rank.as_ptr();
            t.num_memory_bytes_per_rank = self.memory_bytes_per_rank.len();
        }
        t.intra_node_bandwidth = self.intra_node_bandwidth;
        t.inter_node_bandwidth = self.inter_node_bandwidth;
        t.batch_size = self.batch_size;
        t.optimizer = self.optimizer as i32;
        t.memory_bandwidth = self.memory_bandwidth;
        t.reserved_fraction = self.reserved_fraction;
        t.collective_latency = self.collective_latency;
        t.per_id_cost = self.per_id_cost;
        t.disk_capacity = self.disk_capacity;
        t.disk_read_bandwidth = self.disk_read_bandwidth;
        t.disk_read_iops = self.disk_read_iops;
        t
    }

    /// Measures the disk under `dir` for tiered tables (`shardrec_topology_calibrate_disk`: a
    /// scratch file of `file_bytes`, 0 meaning 256 MiB, read at random and in sequence for about
    /// `time_budget` seconds, 0 meaning 1) and writes `disk_read_iops`, `disk_read_bandwidth`
    /// and, when 0, `disk_capacity` (each the machine's figure over its ranks). Returns the
    /// machine's random reads per second and whether the reads bypassed the page cache. Set
    /// `world_size` and `ranks_per_node` first. On error nothing is written.
    pub fn calibrate_disk(
        &mut self,
        dir: &str,
        file_bytes: u64,
        time_budget: f64,
    ) -> crate::Result<(f64, bool)> {
        let cdir = crate::cstring(dir, "dir")?;
        let mut t = self.raw();
        let (mut iops, mut direct) = (0.0, 0i32);
        // SAFETY: `t` borrows `self.memory_bytes_per_rank` (not read); the outputs outlive the call.
        crate::check(unsafe {
            sys::shardrec_topology_calibrate_disk(
                &mut t,
                cdir.as_ptr(),
                file_bytes,
                time_budget,
                &mut iops,
                &mut direct,
            )
        })?;
        self.disk_capacity = t.disk_capacity;
        self.disk_read_bandwidth = t.disk_read_bandwidth;
        self.disk_read_iops = t.disk_read_iops;
        Ok((iops, direct != 0))
    }

    /// Measures the network between the hosts of `comm` (`shardrec_topology_calibrate_network`:
    /// timed all-to-alls across hosts, about `time_budget` seconds, 0 meaning 0.5) and writes it
    /// into `inter_node_bandwidth` (bytes/s per rank). Collective: every rank of `comm` calls it
    /// with the same budget, and gets the same figure. On one host nothing crosses: returns 0
    /// and leaves the topology as it is; on error too.
    pub fn calibrate_network(
        &mut self,
        comm: &mut crate::Comm,
        time_budget: f64,
    ) -> crate::Result<f64> {
        let mut t = self.raw();
        let mut measured = 0.0;
        // SAFETY: as in fill_from_comm; `measured` outlives the call.
        crate::check(unsafe {
            sys::shardrec_topology_calibrate_network(&mut t, comm.raw, time_budget, &mut measured)
        })?;
        self.inter_node_bandwidth = t.inter_node_bandwidth;
        Ok(measured)
    }

    /// Sets `world_size` to `comm`'s size and `ranks_per_node` to its local size
    /// (`shardrec_topology_from_comm`), the default way to describe a launched job to the
    /// planner. Collective: every rank of `comm` calls it. Every host must run as many ranks;
    /// otherwise every rank gets `InvalidArgument` naming the smallest and largest. On error
    /// nothing is written; other fields are never touched.
    pub fn fill_from_comm(&mut self, comm: &mut crate::Comm) -> crate::Result<()> {
        let mut t = self.raw();
        // SAFETY: `t` borrows `self.memory_bytes_per_rank` (not read); `comm.raw` is live while
        // `comm` is borrowed mutably, which also keeps other threads off it during the call.
        crate::check(unsafe { sys::shardrec_topology_from_comm(&mut t, comm.raw) })?;
        self.world_size = t.world_size;
        self.ranks_per_node = t.ranks_per_node;
        Ok(())
    }

    /// Measures this machine (`shardrec_topology_calibrate`, about 0.2-0.8 s) and writes
    /// `memory_bandwidth`, `intra_node_bandwidth`, `collective_latency` and, on host,
    /// `per_id_cost`. Set `world_size` and `ranks_per_node` first. On error nothing is written.
    pub fn calibrate(&mut self, options: &CalibrateOptions) -> crate::Result<Calibration> {
        let mut t = self.raw();
        // SAFETY: plain-data structs filled by their init functions.
        let mut o: sys::shardrec_calibrate_options_t = unsafe { std::mem::zeroed() };
        crate::check(unsafe {
            sys::shardrec_calibrate_options_init(&mut o, sys::SHARDREC_CALIBRATE_OPTIONS_VERSION)
        })?;
        o.ranks_share_memory = options.ranks_share_memory as i32;
        o.time_budget = options.time_budget;
        o.threads_per_rank = options.threads_per_rank;
        o.ranks_per_machine = options.ranks_per_machine;
        let mut c: sys::shardrec_calibration_t = unsafe { std::mem::zeroed() };
        crate::check(unsafe {
            sys::shardrec_calibration_init(&mut c, sys::SHARDREC_CALIBRATION_VERSION)
        })?;
        // SAFETY: `t` borrows `self.memory_bytes_per_rank`, which outlives the call (not read).
        crate::check(unsafe { sys::shardrec_topology_calibrate(&mut t, &o, &mut c) })?;
        self.memory_bandwidth = t.memory_bandwidth;
        self.intra_node_bandwidth = t.intra_node_bandwidth;
        self.collective_latency = t.collective_latency;
        self.per_id_cost = t.per_id_cost;
        Ok(Calibration {
            gather_bandwidth: c.gather_bandwidth,
            stream_bandwidth: c.stream_bandwidth,
            loopback_bandwidth: c.loopback_bandwidth,
            loopback_latency: c.loopback_latency,
            handoff_latency: c.handoff_latency,
            elapsed: c.elapsed,
            oversubscription: c.oversubscription,
            shm_bandwidth: c.shm_bandwidth,
            shm_latency: c.shm_latency,
            shm_used: c.shm_used != 0,
        })
    }
}

/// Constraints on how one table may be sharded.
#[derive(Clone, Debug, Default)]
pub struct Constraints {
    pub table: String,
    /// Allowed types; empty means the default set.
    pub sharding_types: Vec<ShardingType>,
    pub min_partition: i32,
    pub ranks: Vec<i32>,
    pub pooling_factors: Vec<f32>,
    /// A tiered table (docs/disk-tier.md, "Planning"): each rank's cache of it in bytes (0: held
    /// in memory), the expected hit rate in (0, 1] (0: estimated from `id_zipf_alpha`) and the
    /// ids' Zipf exponent (0: uniform).
    pub tier_cache_bytes: u64,
    pub tier_hit_rate: f64,
    pub id_zipf_alpha: f64,
}

impl Constraints {
    pub fn new(table: &str, types: &[ShardingType], ranks: &[i32]) -> Constraints {
        Constraints {
            table: table.to_string(),
            sharding_types: types.to_vec(),
            ranks: ranks.to_vec(),
            ..Constraints::default()
        }
    }
}

/// Fused optimizer type (`SHARDREC_OPTIMIZER_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OptimizerType {
    #[default]
    Sgd = 0,
    Adagrad = 1,
    RowwiseAdagrad = 2,
    Adam = 3,
    PartialRowwiseAdam = 4,
    Lamb = 5,
}

/// Fused optimizer configuration; `Default` gives the C defaults (SGD, lr 0.01).
#[derive(Clone, Debug)]
pub struct Optimizer {
    pub kind: OptimizerType,
    pub learning_rate: f32,
    pub eps: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub weight_decay: f32,
    pub weight_decay_mode: i32,
    /// Round FLOAT16/BFLOAT16/FP8 updates stochastically instead of to nearest even.
    pub stochastic_rounding: bool,
}

impl Default for Optimizer {
    fn default() -> Optimizer {
        Optimizer {
            kind: OptimizerType::Sgd,
            learning_rate: 0.01,
            eps: 1e-8,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.0,
            weight_decay_mode: 0,
            stochastic_rounding: false,
        }
    }
}

impl Optimizer {
    pub fn new(kind: OptimizerType, learning_rate: f32) -> Optimizer {
        Optimizer {
            kind,
            learning_rate,
            ..Optimizer::default()
        }
    }

    pub(crate) fn raw(&self) -> sys::shardrec_optimizer_config_t {
        // SAFETY: plain data filled by init.
        let mut o: sys::shardrec_optimizer_config_t = unsafe { std::mem::zeroed() };
        unsafe {
            sys::shardrec_optimizer_config_init(&mut o, sys::SHARDREC_OPTIMIZER_CONFIG_VERSION)
        };
        o.type_ = self.kind as i32;
        o.learning_rate = self.learning_rate;
        o.eps = self.eps;
        o.beta1 = self.beta1;
        o.beta2 = self.beta2;
        o.weight_decay = self.weight_decay;
        o.weight_decay_mode = self.weight_decay_mode;
        o.stochastic_rounding = i32::from(self.stochastic_rounding);
        o
    }

    pub(crate) fn from_raw(o: &sys::shardrec_optimizer_config_t) -> Optimizer {
        let kind = match o.type_ {
            1 => OptimizerType::Adagrad,
            2 => OptimizerType::RowwiseAdagrad,
            3 => OptimizerType::Adam,
            4 => OptimizerType::PartialRowwiseAdam,
            5 => OptimizerType::Lamb,
            _ => OptimizerType::Sgd,
        };
        Optimizer {
            kind,
            learning_rate: o.learning_rate,
            eps: o.eps,
            beta1: o.beta1,
            beta2: o.beta2,
            weight_decay: o.weight_decay,
            weight_decay_mode: o.weight_decay_mode,
            stochastic_rounding: o.stochastic_rounding != 0,
        }
    }
}
