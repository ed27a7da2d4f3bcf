//! Tests of the 2D mesh binding: 2 replicas x 2-way sharding (4 ranks as threads) trained with
//! SGD and a sync every step equals world size 1 on the global batch, with the built-in sync
//! and with a Rust sync hook; errors and thread-safety markers.
use shardrec::{
    Code, Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Kjt, Mesh, MeshCoords,
    MeshOptions, Optimizer, OptimizerType, SyncHook, SyncMode,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod common;
use common::{batch, plan, LOCAL_BATCH, TABLES};

const WORLD: usize = 4;
const STEPS: usize = 3;

/// One step of loss mean(0.5 * |out|^2) on the batch of ranks [first, first + ranks).
fn train_step(coll: &mut EmbeddingCollection, step: usize, first: usize, ranks: usize) {
    let (lengths, values) = batch(step, first, ranks);
    let b = (LOCAL_BATCH * ranks) as i64;
    let kjt = Kjt {
        batch_size: b,
        num_features: 3,
        lengths: &lengths,
        values: &values,
        weights: None,
    };
    let out = coll.forward_vec(&kjt).expect("forward");
    let grad: Vec<f32> = out.iter().map(|v| v / b as f32).collect();
    coll.backward(&grad).expect("backward");
}

fn weights(coll: &mut EmbeddingCollection) -> Vec<Vec<f32>> {
    TABLES
        .iter()
        .map(|t| coll.weights(t).expect("weights"))
        .collect()
}

fn sgd() -> Optimizer {
    Optimizer::new(OptimizerType::Sgd, 0.5)
}

fn seeded() -> EmbeddingOptions<'static> {
    EmbeddingOptions {
        seed: 7,
        ..Default::default()
    }
}

/// A hook doing what the built-in sync does: sum over the replica group, divide by its size.
fn averaging_hook(mut replica: Comm, calls: Arc<AtomicUsize>) -> SyncHook {
    Box::new(move |buf| {
        calls.fetch_add(1, Ordering::Relaxed);
        let n = replica.size()? as f32;
        let data = buf.as_f32_mut().expect("f32 tables sync f32 buffers");
        replica.allreduce_sum(data)?;
        data.iter_mut().for_each(|v| *v /= n);
        Ok(())
    })
}

struct RankResult {
    coords: MeshCoords,
    description: String,
    syncs: i64,
    hook_calls: usize,
    weights: Vec<Vec<f32>>,
}

/// Trains 2 replicas x 2-way sharding, one thread per rank, syncing after every step.
fn train_2d(use_hook: bool) -> Vec<RankResult> {
    let plan2 = plan(2);
    let world = Comm::local_group(WORLD, &CommOptions::default()).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = world
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let plan2 = &plan2;
                s.spawn(move || {
                    let options = MeshOptions {
                        sharding_group_size: 2,
                        ..Default::default()
                    };
                    let mut mesh = Mesh::new(&mut comm, &options).unwrap();
                    let calls = Arc::new(AtomicUsize::new(0));
                    if use_hook {
                        let replica = mesh.replica_comm().unwrap();
                        mesh.set_sync_hook(Some(averaging_hook(replica, calls.clone())))
                            .unwrap();
                    }
                    let mut coll = mesh.embedding_collection(plan2, &sgd(), &seeded()).unwrap();
                    for step in 0..STEPS {
                        train_step(&mut coll, step, rank, 1);
                        assert!(mesh.step(&mut coll).unwrap(), "interval 1 syncs every step");
                    }
                    assert_eq!(mesh.sharding_comm().unwrap().size().unwrap(), 2);
                    assert_eq!(mesh.replica_comm().unwrap().size().unwrap(), 2);
                    let stats = mesh.sync_stats().unwrap();
                    assert!(stats.collectives >= 1 && stats.bytes > 0, "{stats:?}");
                    RankResult {
                        coords: mesh.coords().unwrap(),
                        description: mesh.describe().unwrap(),
                        syncs: stats.syncs,
                        hook_calls: calls.load(Ordering::Relaxed),
                        weights: weights(&mut coll),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn two_replicas_of_two_way_sharding_equal_one_rank_on_the_global_batch() {
    let plan1 = plan(1);
    let mut comm1 = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut coll1 = EmbeddingCollection::new(&plan1, &mut comm1, &sgd(), &seeded()).unwrap();
    let initial = weights(&mut coll1);
    for step in 0..STEPS {
        train_step(&mut coll1, step, 0, WORLD);
    }
    let single = weights(&mut coll1);
    for t in 0..3 {
        assert_ne!(initial[t], single[t], "training changed {}", TABLES[t]);
    }

    for use_hook in [false, true] {
        let results = train_2d(use_hook);
        for (rank, res) in results.iter().enumerate() {
            let r = rank as i32;
            // Default layout, W = 4, S = 2: plan rank p of sharding group g is global rank 2p + g.
            let want = MeshCoords {
                sharding_group: r % 2,
                shard_rank: r / 2,
                replica_group: r / 2,
                replica_rank: r % 2,
            };
            assert_eq!(res.coords, want, "rank {rank}");
            assert_eq!(res.syncs, STEPS as i64);
            assert_eq!(
                res.hook_calls >= STEPS,
                use_hook,
                "hook calls {}",
                res.hook_calls
            );
            for t in 0..3 {
                assert_eq!(res.weights[t].len(), single[t].len());
                for (i, (got, want)) in res.weights[t].iter().zip(&single[t]).enumerate() {
                    let tol = 1e-5 * want.abs().max(1.0);
                    assert!(
                        (got - want).abs() <= tol,
                        "hook {use_hook} rank {rank} {}[{i}]: 2D {got}, single {want}",
                        TABLES[t]
                    );
                }
            }
        }
        let text = &results[0].description;
        assert!(
            text.contains("replica groups (weight sync): [0,1] [2,3]"),
            "{text}"
        );
        assert!(text.contains("[0,2] [1,3]"), "{text}");
    }
}

#[test]
fn group_size_that_does_not_divide_the_world_gives_einval_with_the_c_message() {
    let mut world = Comm::local_group(WORLD, &CommOptions::default()).unwrap();
    // Creation is collective: every rank calls it and every rank refuses it.
    let options = MeshOptions {
        sharding_group_size: 3,
        ..Default::default()
    };
    std::thread::scope(|s| {
        for comm in world.iter_mut() {
            let options = &options;
            s.spawn(move || {
                let err = Mesh::new(comm, options)
                    .err()
                    .expect("S = 3 does not divide 4");
                assert_eq!(err.code(), Code::Invalid);
                assert_eq!(err.code_name(), "SHARDREC_EINVAL");
                assert!(
                    err.message()
                        .contains("sharding group size 3 must divide the world size 4"),
                    "{err}"
                );
            });
        }
    });
}

#[test]
fn one_rank_mesh_syncs_without_calling_the_hook() {
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut mesh = Mesh::new(&mut comm, &MeshOptions::default()).unwrap();
    assert_eq!(mesh.coords().unwrap(), MeshCoords::default());
    let p = plan(1);
    let mut coll = mesh
        .embedding_collection(&p, &Optimizer::default(), &Default::default())
        .unwrap();
    mesh.sync(&mut coll, SyncMode::WeightsOnly).unwrap();
    mesh.set_sync_hook(Some(Box::new(|_| panic!("R = 1 never calls the hook"))))
        .unwrap();
    mesh.sync(&mut coll, SyncMode::Default).unwrap();
    mesh.set_sync_hook(None).unwrap();
    drop(mesh);
    assert_eq!(comm.rank().unwrap(), 0, "the world outlives the mesh");
}

#[test]
fn a_panicking_hook_fails_the_sync_on_every_replica() {
    let p = plan(1);
    let world = Comm::local_group(2, &CommOptions::default()).unwrap();
    let errors: Vec<shardrec::Error> = std::thread::scope(|s| {
        let handles: Vec<_> = world
            .into_iter()
            .map(|mut comm| {
                let p = &p;
                s.spawn(move || {
                    // S = 1: two replicas of an unsharded collection.
                    let options = MeshOptions {
                        sharding_group_size: 1,
                        ..Default::default()
                    };
                    let mut mesh = Mesh::new(&mut comm, &options).unwrap();
                    let mut coll = mesh.embedding_collection(p, &sgd(), &seeded()).unwrap();
                    mesh.set_sync_hook(Some(Box::new(|_| panic!("hook failure on purpose"))))
                        .unwrap();
                    mesh.sync(&mut coll, SyncMode::Default).unwrap_err()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for err in errors {
        assert_eq!(err.code(), Code::Internal, "{err}");
        assert!(err.message().contains("sync hook"), "{err}");
    }
}

#[test]
fn meshes_are_send() {
    fn send<T: Send>() {}
    send::<Mesh>();
}
