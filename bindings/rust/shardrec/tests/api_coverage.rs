//! The parts of the C API added to the Rust crate last, each checked by value: library and
//! device queries, the dense collectives at world 2, the plan's ranks per node, per-table
//! optimizer states, dense optimizer state (Adam moments by hand), DDP external gradients
//! (averaged in place), dense tensors in checkpoints, the non-finite policy and table dtypes.
use shardrec::{
    device_check, device_count, device_plugin_path, version, version_code, Activation, Bucketer,
    BucketerOptions, Code, Comm, CommOptions, DType, DenseLayer, DenseOptimizer, DenseState,
    DenseTensor, DenseTensorMut, DeviceType, EmbeddingCollection, EmbeddingOptions, Feature, Kjt,
    LoadOptions, Mlp, NonFinitePolicy, Optimizer, OptimizerType, Plan, ReduceOp, StateInfo, Table,
    TableMemory, Topology,
};
use std::thread;

/// Runs `body(rank, comm)` on one thread per rank of a new local group; results in rank order.
fn on_ranks<T: Send + 'static>(
    world: usize,
    body: impl Fn(usize, &mut Comm) -> T + Send + Sync + Copy + 'static,
) -> Vec<T> {
    let comms = Comm::local_group(world, &CommOptions::default()).expect("group");
    let handles: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(rank, mut comm)| thread::spawn(move || body(rank, &mut comm)))
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect()
}

fn world1(
    tables: &[Table],
    features: &[Feature],
    optimizer: &Optimizer,
    options: &EmbeddingOptions<'_>,
) -> EmbeddingCollection {
    let topology = Topology {
        optimizer: optimizer.kind,
        ..Topology::new(1)
    };
    let plan = Plan::new(tables, features, &topology, &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    EmbeddingCollection::new(&plan, &mut comm, optimizer, options).expect("collection")
}

#[test]
fn version_and_element_sizes() {
    let parts: Vec<i32> = version()
        .split('.')
        .map(|p| p.parse().expect("number"))
        .collect();
    assert_eq!(parts.len(), 3);
    assert_eq!(version_code(), parts[0] * 10000 + parts[1] * 100 + parts[2]);
    // The FP8 storage types (7, 8) are no element types: size 0.
    let sizes = [4, 2, 2, 8, 4, 8, 1, 0, 0];
    for code in 0..9 {
        let d = DType::from_code(code).expect("known dtype");
        assert_eq!(d as i32, code);
        assert_eq!(d.size(), sizes[code as usize], "{d:?}");
    }
    assert_eq!(DType::from_code(9), None);
}

#[test]
fn devices_report_why_they_are_missing() {
    device_check(DeviceType::Host, 0).expect("host");
    assert_eq!(
        device_check(DeviceType::Cuda, -1).unwrap_err().code(),
        Code::Invalid
    );
    let n = device_count().expect("count");
    if n > 0 {
        device_check(DeviceType::Cuda, 0).expect("device 0");
        assert!(device_plugin_path().expect("plugin").starts_with('/'));
        return;
    }
    // No GPU (as on the CI machine): the check and the plugin path say why.
    for err in [
        device_check(DeviceType::Cuda, 0).unwrap_err(),
        device_plugin_path().unwrap_err(),
    ] {
        assert!(
            matches!(err.code(), Code::NoDevice | Code::Unsupported),
            "{err}"
        );
        assert!(!err.message().is_empty());
    }
}

/// A raw collective the binding refuses on one rank (slices of different lengths) still meets
/// the other rank in C's agreement: both fail at once, the other naming it, and the next
/// collective pairs up.
#[test]
fn a_raw_collective_refused_on_one_rank_fails_every_rank_at_once() {
    let got = on_ranks(2, |rank, c| {
        let start = std::time::Instant::now();
        let mut recv = vec![0f32; if rank == 1 { 2 } else { 4 }];
        let a = c
            .allreduce(&[1f32; 4], &mut recv, ReduceOp::Sum)
            .unwrap_err();
        let mut all = vec![0f32; if rank == 1 { 3 } else { 4 }];
        let g = c.allgather(&[1f32, 2.0], &mut all).unwrap_err();
        let slow = start.elapsed() > std::time::Duration::from_secs(10);
        let mut sum = [1f32];
        c.allreduce_in_place(&mut sum, ReduceOp::Sum)
            .expect("the next allreduce");
        (a, g, slow, sum[0])
    });
    for (rank, (a, g, slow, sum)) in got.into_iter().enumerate() {
        assert_eq!(
            (a.code(), g.code()),
            (Code::Invalid, Code::Invalid),
            "rank {rank}"
        );
        let (want_a, want_g) = if rank == 0 {
            (
                "rank 1 refused its allreduce",
                "rank 1 refused its allgather",
            )
        } else {
            ("recv has 2 elements", "recv has 3 elements")
        };
        assert!(a.message().contains(want_a), "rank {rank}: {a}");
        assert!(g.message().contains(want_g), "rank {rank}: {g}");
        assert!(!slow, "rank {rank} waited for the refusing rank");
        assert_eq!(sum, 2.0);
    }
}

#[test]
fn collectives_at_world_two() {
    let got = on_ranks(2, |rank, c| {
        let r = rank as f32;
        let mut all = [0f32; 4];
        c.allgather(&[r + 1.0, 10.0 * (r + 1.0)], &mut all)
            .expect("allgather");
        let mut b: [i64; 2] = if rank == 1 { [7, 8] } else { [-1, -1] };
        c.broadcast(&mut b, 1).expect("broadcast");
        let mut max = [0f64; 2];
        c.allreduce(&[rank as f64, 5.0 - rank as f64], &mut max, ReduceOp::Max)
            .expect("max");
        let mut sum = [rank as i32 + 3];
        c.allreduce_in_place(&mut sum, ReduceOp::Sum).expect("sum");
        // Bad lengths are refused (after meeting the other rank in C's agreement).
        let short = c.allgather(&[1f32, 2.0], &mut [0f32; 3]).unwrap_err();
        assert_eq!(short.code(), Code::Invalid);
        assert_eq!(
            c.allreduce(&[1u8], &mut [0u8; 2], ReduceOp::Sum)
                .unwrap_err()
                .code(),
            Code::Invalid
        );
        (all, b, max, sum)
    });
    for (all, b, max, sum) in got {
        assert_eq!(all, [1.0, 10.0, 2.0, 20.0]);
        assert_eq!(b, [7, 8]);
        assert_eq!(max, [1.0, 5.0]);
        assert_eq!(sum, [7]);
    }
}

#[test]
fn plan_ranks_per_node() {
    let tables = [Table::new("t", 64, 8, &[0])];
    let features = [Feature::new("f")];
    let p = Plan::new(
        &tables,
        &features,
        &Topology {
            ranks_per_node: 2,
            ..Topology::new(4)
        },
        &[],
    )
    .expect("plan");
    assert_eq!(p.ranks_per_node().expect("rpn"), 2);
    let q = Plan::new(&tables, &features, &Topology::new(4), &[]).expect("plan");
    assert_eq!(q.ranks_per_node().expect("rpn"), 4);
}

#[test]
fn table_states_follow_each_tables_optimizer() {
    let adam = Optimizer::new(OptimizerType::Adam, 0.01);
    let rowwise = Optimizer::new(OptimizerType::RowwiseAdagrad, 0.1);
    let tables = [
        Table::new("a", 10, 4, &[0]).optimizer(adam),
        Table::new("b", 6, 2, &[1]),
    ];
    let features = [Feature::new("f0"), Feature::new("f1")];
    let mut coll = world1(&tables, &features, &rowwise, &Default::default());
    let info = |name: &str, row_wise| StateInfo {
        name: name.to_string(),
        row_wise,
    };
    assert_eq!(
        coll.table_states("a").expect("a"),
        vec![info("momentum1", false), info("momentum2", false)]
    );
    assert_eq!(
        coll.table_states("b").expect("b"),
        vec![info("momentum1", true)]
    );
    assert_eq!(coll.state("a", "momentum2").expect("a.m2").len(), 40);
    assert_eq!(coll.state("b", "momentum1").expect("b.m1").len(), 6);
    assert_eq!(
        coll.table_states("nope").unwrap_err().code(),
        Code::NotFound
    );
}

#[test]
fn dense_optimizer_state_holds_adam_moments() {
    let mut mlp = Mlp::new(2, &[1], Some(&[Activation::None]), 3, "m").expect("mlp");
    let mut opt = DenseOptimizer::new(&Optimizer::new(OptimizerType::Adam, 0.1)).expect("opt");
    assert!(opt
        .state(0, DenseState::Momentum1)
        .expect("before")
        .is_empty());
    // y = w . x + b with x = (1, 2), dy = 3: dw = (3, 6), db = 3.
    let mut y = [0f32; 1];
    mlp.forward(&[1.0, 2.0], 1, &mut y).expect("forward");
    mlp.backward(&[3.0], None, None).expect("backward");
    assert_eq!(mlp.grad(0).expect("dw"), &[3.0, 6.0]);
    assert_eq!(mlp.grad(1).expect("db"), &[3.0]);
    opt.step(&mut [&mut mlp]).expect("step");
    for (tensor, g) in [vec![3f32, 6.0], vec![3.0]].iter().enumerate() {
        let m = opt
            .state(tensor, DenseState::Momentum1)
            .expect("m")
            .to_vec();
        let v = opt
            .state(tensor, DenseState::Momentum2)
            .expect("v")
            .to_vec();
        assert_eq!((m.len(), v.len()), (g.len(), g.len()));
        for i in 0..g.len() {
            assert!((m[i] - 0.1 * g[i]).abs() < 1e-6, "m[{i}] = {}", m[i]);
            assert!(
                (v[i] - 0.001 * g[i] * g[i]).abs() < 1e-6,
                "v[{i}] = {}",
                v[i]
            );
        }
    }
    opt.state_mut(0, DenseState::Momentum1)
        .expect("m")
        .copy_from_slice(&[0.5, -0.5]);
    assert_eq!(
        opt.state(0, DenseState::Momentum1).expect("m"),
        &[0.5, -0.5]
    );
    assert_eq!(opt.state(0, DenseState::Momentum2).expect("v").len(), 2);
    assert_eq!(
        opt.state(2, DenseState::Momentum1).unwrap_err().code(),
        Code::Invalid
    );
}

#[test]
fn external_gradients_are_averaged() {
    let got = on_ranks(2, |rank, c| {
        let mut ddp = Bucketer::new(c, &[3, 2], &BucketerOptions::default()).expect("bucketer");
        let r = rank as f32;
        assert!(ddp
            .set_external(0, vec![r, 2.0 * r, 4.0])
            .expect("set")
            .is_none());
        assert_eq!(
            ddp.set_external(1, vec![0.0; 3]).unwrap_err().code(),
            Code::Invalid
        );
        assert_eq!(
            ddp.set_external(2, vec![0.0; 2]).unwrap_err().code(),
            Code::Invalid
        );
        assert!(ddp.external(1).is_none());
        ddp.mark_ready(0).expect("ready 0");
        ddp.mark_ready(1).expect("ready 1");
        ddp.finish().expect("finish");
        ddp.external(0).expect("external").to_vec()
    });
    for g in got {
        assert_eq!(g, [0.5, 1.0, 4.0]);
    }
}

#[test]
fn checkpoint_carries_dense_tensors() {
    let dir = std::env::temp_dir().join(format!("shardrec_dense_rust_{}", std::process::id()));
    let dir = dir.to_str().expect("utf-8 path").to_string();
    let mut coll = world1(
        &[Table::new("t", 8, 4, &[0])],
        &[Feature::new("f")],
        &Optimizer::default(),
        &Default::default(),
    );
    let params = [1.5f32, -2.0, 3.25];
    coll.save_checkpoint_with_dense(
        &dir,
        &[DenseTensor {
            name: "mlp.w",
            data: &params,
        }],
    )
    .expect("save");
    let mut back = [0f32; 3];
    coll.load_checkpoint_with_dense(
        &dir,
        &LoadOptions::default(),
        &mut [DenseTensorMut {
            name: "mlp.w",
            data: &mut back,
        }],
    )
    .expect("load");
    assert_eq!(back, params);
    let mut short = [0f32; 2];
    assert!(coll
        .load_checkpoint_with_dense(
            &dir,
            &LoadOptions::default(),
            &mut [DenseTensorMut {
                name: "mlp.w",
                data: &mut short
            }]
        )
        .is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn non_finite_policy_reaches_the_collection() {
    let nan = [f32::NAN];
    let batch = Kjt::new(1, 1, &[1], &[0]).with_weights(&nan);
    for policy in [NonFinitePolicy::Check, NonFinitePolicy::Allow] {
        let options = EmbeddingOptions {
            non_finite: policy,
            table_memory: TableMemory::SmallPages,
            ..Default::default()
        };
        let mut coll = world1(
            &[Table::new("t", 4, 2, &[0])],
            &[Feature::new("f")],
            &Optimizer::default(),
            &options,
        );
        let out = coll.forward_vec(&batch);
        match policy {
            NonFinitePolicy::Check => assert_eq!(out.unwrap_err().code(), Code::Invalid),
            NonFinitePolicy::Allow => assert!(out.expect("forward").iter().all(|v| v.is_nan())),
        }
    }
}

#[test]
fn half_precision_tables_store_rounded_weights() {
    let table = Table {
        dtype: DType::BFloat16,
        ..Table::new("t", 2, 2, &[0])
    };
    let mut coll = world1(
        &[table],
        &[Feature::new("f")],
        &Optimizer::default(),
        &Default::default(),
    );
    // 1 + 2^-10 is not a bfloat16 (8-bit mantissa): it is stored as 1.
    coll.set_weights("t", &[1.0 + 1.0 / 1024.0, 2.0, 3.0, 0.5])
        .expect("set");
    assert_eq!(coll.weights("t").expect("get"), vec![1.0, 2.0, 3.0, 0.5]);
}

#[test]
fn embedding_device_is_forwarded() {
    let plan = Plan::new(
        &[Table::new("t", 4, 2, &[0])],
        &[Feature::new("f")],
        &Topology::new(1),
        &[],
    )
    .expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let options = EmbeddingOptions {
        device_type: DeviceType::Cuda,
        ..Default::default()
    };
    let err = EmbeddingCollection::new(&plan, &mut comm, &Optimizer::default(), &options)
        .err()
        .expect("a CUDA collection is refused here");
    assert!(
        matches!(err.code(), Code::Unsupported | Code::NoDevice),
        "{err}"
    );
}

/// An in-process key-value store: what a launcher's store (etcd, Redis, ...) would provide.
#[derive(Default)]
struct MemoryStore {
    map: std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>,
    changed: std::sync::Condvar,
    sets: std::sync::atomic::AtomicUsize,
}

impl shardrec::Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> shardrec::Result<()> {
        self.sets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.map
            .lock()
            .unwrap()
            .insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, timeout_ms: i64) -> shardrec::Result<Vec<u8>> {
        let deadline = std::time::Duration::from_millis(timeout_ms.max(1) as u64);
        let map = self.map.lock().unwrap();
        let (map, _) = self
            .changed
            .wait_timeout_while(map, deadline, |m| !m.contains_key(key))
            .unwrap();
        map.get(key)
            .cloned()
            .ok_or_else(|| shardrec::Error::new(Code::Timeout, format!("no key {key}")))
    }
}

#[test]
fn custom_store_rendezvous_at_world_two() {
    let store = std::sync::Arc::new(MemoryStore::default());
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let store = store.clone();
            thread::spawn(move || {
                let options = CommOptions {
                    timeout_ms: 20000,
                    ..Default::default()
                };
                let mut c = Comm::with_store(store, 2, rank, &options).expect("with_store");
                assert_eq!(
                    (c.rank().expect("rank"), c.size().expect("size")),
                    (rank, 2)
                );
                let mut v = [rank as f32 + 1.0, 10.0];
                c.allreduce_in_place(&mut v, ReduceOp::Sum)
                    .expect("allreduce");
                v
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("rank"), [3.0, 20.0]);
    }
    assert!(
        store.sets.load(std::sync::atomic::Ordering::Relaxed) >= 2,
        "the store was not used"
    );
    assert_eq!(Code::Timeout.status(), -7);
    assert_eq!(
        shardrec::Error::new(Code::Timeout, "x").code(),
        Code::Timeout
    );
}

#[test]
fn tensor_views_match_the_plain_calls() {
    let tables = [Table::new("t", 4, 3, &[0])];
    let features = [Feature::new("f")];
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.5);
    let options = EmbeddingOptions {
        seed: 5,
        ..Default::default()
    };
    let mut plain = world1(&tables, &features, &sgd, &options);
    let mut viewed = world1(&tables, &features, &sgd, &options);
    let batch = Kjt::new(2, 1, &[2, 1], &[0, 3, 1]);
    let want = plain.forward_vec(&batch).expect("forward");
    let mut got = [0f32; 6];
    viewed
        .forward_tensor(&batch, &mut got, &[2, 3])
        .expect("forward_tensor");
    assert_eq!(got.to_vec(), want);
    plain.backward(&want).expect("backward");
    viewed
        .backward_tensor(&got, &[2, 3])
        .expect("backward_tensor");
    assert_eq!(
        plain.weights("t").expect("w"),
        viewed.weights("t").expect("w")
    );
    viewed.synchronize().expect("synchronize"); // a host collection: nothing queued
    assert_eq!(
        plain.num_steps().expect("steps"),
        viewed.num_steps().expect("steps")
    );
    viewed.input_dist_start(&batch).expect("start");
    viewed.input_dist_wait().expect("wait");
    let mut dist = [0f32; 6];
    viewed
        .forward_distributed_tensor(&mut dist, &[6])
        .expect("distributed");
    assert_eq!(dist.to_vec(), viewed.forward_vec(&batch).expect("forward"));
    // A last extent other than the output width: refused by the library.
    let e = viewed
        .forward_tensor(&batch, &mut [0f32; 6], &[3, 2])
        .unwrap_err();
    assert_eq!(e.code(), Code::Invalid);
    // A shape that does not match the buffer: refused before the call.
    let e = viewed
        .forward_tensor(&batch, &mut [0f32; 6], &[2, 4])
        .unwrap_err();
    assert_eq!(e.code(), Code::Invalid);
    assert!(e.message().contains("shape"), "{e}");
}

#[test]
fn layers_compute_with_bound_storage() {
    let mut mlp = Mlp::new(2, &[1], Some(&[Activation::None]), 3, "m").expect("mlp");
    mlp.bind_tensor(0, Some(vec![1.0, 2.0]), Some(vec![0.0; 2]))
        .expect("bind weight");
    mlp.bind_tensor(1, Some(vec![0.5]), None)
        .expect("bind bias");
    let mut y = [0f32; 1];
    mlp.forward(&[3.0, 4.0], 1, &mut y).expect("forward");
    assert_eq!(y, [1.0 * 3.0 + 2.0 * 4.0 + 0.5]);
    mlp.backward(&[1.0], None, None).expect("backward");
    assert_eq!(mlp.grad(0).expect("dw"), &[3.0, 4.0]);
    assert_eq!(mlp.param(0).expect("w"), &[1.0, 2.0]);
    let e = mlp.bind_tensor(0, Some(vec![0.0; 3]), None).unwrap_err();
    assert_eq!(e.code(), Code::Invalid);
    assert!(mlp.bind_tensor(2, Some(vec![0.0]), None).is_err());
}

#[test]
fn local_rank_and_calls_after_an_abort() {
    let opts = CommOptions {
        timeout_ms: 30000,
        ..Default::default()
    };
    let mut comms = Comm::local_group(2, &opts).expect("group");
    assert_eq!(comms[1].local_rank().expect("local rank"), 1);
    assert_eq!(comms[1].local_size().expect("local size"), 2);
    comms[0].abort().expect("abort");
    let start = std::time::Instant::now();
    assert_eq!(comms[0].barrier().unwrap_err().code(), Code::Aborted);
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn an_abort_handle_unblocks_a_call_on_another_thread() {
    let opts = CommOptions {
        timeout_ms: 30000,
        ..Default::default()
    };
    let mut comms = Comm::local_group(2, &opts).expect("group");
    let mut rank1 = comms.pop().expect("rank 1");
    let handle = rank1.abort_handle();
    // Rank 1 waits in a barrier rank 0 never enters, until another thread aborts it.
    let blocked = thread::spawn(move || {
        let start = std::time::Instant::now();
        let code = rank1.barrier().unwrap_err().code();
        (code, start.elapsed())
    });
    thread::sleep(std::time::Duration::from_millis(200));
    let aborter = thread::spawn(move || handle.abort());
    aborter.join().expect("aborter").expect("abort");
    let (code, waited) = blocked.join().expect("rank 1");
    assert_eq!(code, Code::Aborted);
    assert!(waited < std::time::Duration::from_secs(10), "{waited:?}");
    // A handle outlives its Comm safely: the C communicator lives until the handle is dropped.
    let late = comms[0].abort_handle();
    drop(comms);
    late.abort().expect("abort after the Comm was dropped");
}

#[test]
fn from_env_without_launcher_variables_is_not_found() {
    let launched = [
        "RANK",
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if !launched {
        match Comm::from_env(&CommOptions::default()) {
            Err(err) => assert_eq!(err.code(), Code::NotFound),
            Ok(_) => panic!("a communicator without launcher variables"),
        }
    }
}

#[test]
fn bind_local_numa_gives_local_rank_zero_node_zero() {
    let opts = CommOptions {
        timeout_ms: 10000,
        ..Default::default()
    };
    let comms = Comm::local_group(1, &opts).expect("group");
    assert_eq!(comms[0].bind_local_numa().expect("bind"), 0);
}
