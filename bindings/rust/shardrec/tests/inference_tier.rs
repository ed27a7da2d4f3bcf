//! Tables served from the checkpoint's files through a row cache, through the Rust binding: the
//! same bits as the checkpoint opened in memory, across a reload, with the cache's statistics;
//! and the planner's tier constraints and disk calibration.
use shardrec::{
    Comm, CommOptions, Constraints, EmbeddingCollection, EmbeddingOptions, Feature, Inference,
    InferenceOptions, Kjt, Optimizer, OptimizerType, Plan, ServingStorage, Table, Topology,
};

mod common;
use common::{batch, plan_for, LOCAL_BATCH};

fn kjt<'a>(lengths: &'a [i32], values: &'a [i64]) -> Kjt<'a> {
    Kjt {
        batch_size: LOCAL_BATCH as i64,
        num_features: 3,
        lengths,
        values,
        weights: None,
    }
}

/// Two checkpoints of a world-1 run, after 2 and 3 steps, under a fresh folder.
fn train(root: &std::path::Path) -> (String, String) {
    let dir1 = root.join("v1").to_str().unwrap().to_string();
    let dir2 = root.join("v2").to_str().unwrap().to_string();
    let plan = plan_for(1, OptimizerType::Sgd);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .pop()
        .unwrap();
    let options = EmbeddingOptions {
        seed: 11,
        ..Default::default()
    };
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.5);
    let mut coll = EmbeddingCollection::new(&plan, &mut comm, &sgd, &options).unwrap();
    for step in 0..3 {
        let (l, v) = batch(step, 0, 1);
        let out = coll.forward_vec(&kjt(&l, &v)).unwrap();
        let grad: Vec<f32> = out.iter().map(|x| x / LOCAL_BATCH as f32).collect();
        coll.backward(&grad).unwrap();
        if step == 1 {
            coll.save_checkpoint(&dir1).unwrap();
        }
    }
    coll.save_checkpoint(&dir2).unwrap();
    (dir1, dir2)
}

#[test]
fn tiered_tables_serve_the_bits_of_the_tables_in_memory() {
    let root = std::env::temp_dir().join(format!(
        "shardrec_inference_tier_rust_{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (dir1, dir2) = train(&root);
    let tiers = [("t0", 200u64), ("t1", 200), ("t2", 200)]; // a row or two each
    for storage in [ServingStorage::AsTrained, ServingStorage::Int8] {
        let mem_options = InferenceOptions {
            default_storage: storage,
            ..Default::default()
        };
        let mem = Inference::open(&dir1, &mem_options).unwrap();
        let disk_options = InferenceOptions {
            tiers: &tiers,
            ..mem_options
        };
        let disk = Inference::open(&dir1, &disk_options).unwrap();
        for step in 5..8 {
            let (l, v) = batch(step, 0, 1);
            let want = mem.lookup_vec(&kjt(&l, &v)).unwrap().0;
            let got = disk.lookup_vec(&kjt(&l, &v)).unwrap().0;
            let same = want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same && want.len() == got.len(), "{storage:?} step {step}");
        }
        let s = disk.tier_stats("t1").unwrap();
        assert_eq!(s.model_version, 1);
        assert!(
            s.misses > 0 && s.disk_reads > 0 && s.cache_slots > 0,
            "{s:?}"
        );
        assert!(
            s.cache_bytes <= 200 && s.cache_rows <= s.cache_slots,
            "{s:?}"
        );
        disk.reload(&dir2).unwrap();
        let s = disk.tier_stats("t1").unwrap();
        assert_eq!((s.model_version, s.hits + s.misses), (2, 0));
        assert!(mem.tier_stats("t1").is_err());
    }
    let bad = InferenceOptions {
        tiers: &[("nope", 4096)],
        ..Default::default()
    };
    let err = Inference::open(&dir1, &bad)
        .err()
        .expect("a tier of an unknown table");
    assert!(err.to_string().contains("nope"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn plans_tiered_tables_and_calibrates_a_disk() {
    let tables = [Table::new("big", 10_000_000, 64, &[0])];
    let features = [Feature {
        name: "f".into(),
        pooling_factor: 20.0,
    }];
    let mut topo = Topology {
        world_size: 1,
        memory_bytes: 4 << 30,
        optimizer: OptimizerType::Adagrad,
        ..Default::default()
    };
    assert!(Plan::new(&tables, &features, &topo, &[]).is_err());
    let tier = Constraints {
        tier_cache_bytes: 512 << 20,
        id_zipf_alpha: 1.05,
        ..Constraints::new("big", &[], &[])
    };
    let plan = Plan::new(&tables, &features, &topo, &[tier]).unwrap();
    let stats = plan.stats().unwrap();
    assert!(stats.contains("cache 512.00 MiB"), "{stats}");
    let dir = std::env::temp_dir().join(format!(
        "shardrec_calibrate_disk_rust_{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (iops, _direct) = topo
        .calibrate_disk(dir.to_str().unwrap(), 16 << 20, 0.2)
        .unwrap();
    assert!(iops > 100.0, "iops {iops}");
    assert_eq!(topo.disk_read_iops, iops);
    assert!(topo.disk_read_bandwidth > 0.0 && topo.disk_capacity > 0);
    std::fs::remove_dir(&dir).unwrap(); // empty: the scratch file is gone
}
