//! `EmbeddingCollection::dynamic_stats_global` at world 2: every rank gets the sums over ranks of
//! `dynamic_stats`; ranks naming different tables are all refused, with the code once in the
//! error's text and not in its message.
use shardrec::{
    Code, Comm, CommOptions, Constraints, DynamicTable, DynamicTableStats, EmbeddingCollection,
    Eviction, Feature, Kjt, Optimizer, OptimizerType, Plan, ShardingType, Table, Topology,
};
use std::thread;

fn sum(a: &DynamicTableStats, b: &DynamicTableStats) -> DynamicTableStats {
    let mut s = DynamicTableStats {
        size: a.size + b.size,
        capacity: a.capacity + b.capacity,
        load_factor: 0.0,
        last_inserted: a.last_inserted + b.last_inserted,
        last_evicted: a.last_evicted + b.last_evicted,
        last_rejected_admission: a.last_rejected_admission + b.last_rejected_admission,
        last_rejected_full: a.last_rejected_full + b.last_rejected_full,
        total_inserted: a.total_inserted + b.total_inserted,
        total_evicted: a.total_evicted + b.total_evicted,
        total_rejected_admission: a.total_rejected_admission + b.total_rejected_admission,
        total_rejected_full: a.total_rejected_full + b.total_rejected_full,
        metadata_bytes: a.metadata_bytes + b.metadata_bytes,
        capacity_bytes: a.capacity_bytes + b.capacity_bytes,
        last_admitted: a.last_admitted + b.last_admitted,
        total_admitted: a.total_admitted + b.total_admitted,
    };
    s.load_factor = s.size as f64 / s.capacity as f64;
    s
}

#[test]
fn global_stats_are_the_sums_over_ranks_on_every_rank() {
    const DIM: i32 = 4;
    let tables = [
        Table::new("dyn", 8, DIM, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 0)),
        Table::new("dyn2", 8, DIM, &[1]).dynamic(DynamicTable::new(Eviction::Lru, 0)),
    ];
    let features = [Feature::new("a"), Feature::new("b")];
    let row_wise = [
        Constraints::new("dyn", &[ShardingType::RowWise], &[]),
        Constraints::new("dyn2", &[ShardingType::RowWise], &[]),
    ];
    let plan = Plan::new(&tables, &features, &Topology::new(2), &row_wise).expect("plan");
    let comms = Comm::local_group(2, &CommOptions::default()).expect("group");
    let per_rank: Vec<(DynamicTableStats, DynamicTableStats)> = thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let plan = &plan;
                s.spawn(move || {
                    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
                    let mut coll =
                        EmbeddingCollection::new(plan, &mut comm, &sgd, &Default::default())
                            .expect("collection");
                    // 12 ids over 8 slots per step, new ones each step: evictions.
                    for step in 0..2i64 {
                        let ids: Vec<i64> =
                            (1..=6).map(|i| i + 10 * rank as i64 + 100 * step).collect();
                        let values: Vec<i64> = ids.iter().chain(ids.iter()).cloned().collect();
                        let lengths = [6i32, 6];
                        let batch = Kjt {
                            batch_size: 1,
                            num_features: 2,
                            lengths: &lengths,
                            values: &values,
                            weights: None,
                        };
                        let out = coll.forward_vec(&batch).expect("forward");
                        coll.backward(&out).expect("backward");
                    }
                    let local = coll.dynamic_stats("dyn").expect("stats");
                    let global = coll.dynamic_stats_global("dyn").expect("global stats");
                    let err = coll
                        .dynamic_stats_global(["dyn", "dyn2"][rank])
                        .expect_err("different tables");
                    assert_eq!(err.code(), Code::Invalid, "rank {rank}: {err}");
                    assert!(!err.message().contains("SHARDREC_"), "{}", err.message());
                    assert_eq!(
                        err.to_string(),
                        format!("SHARDREC_EINVAL: {}", err.message())
                    );
                    (local, global)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    let want = sum(&per_rank[0].0, &per_rank[1].0);
    assert!(
        want.size > 0 && want.total_evicted > 0,
        "nothing to sum: {want:?}"
    );
    assert_eq!(per_rank[0].1, want);
    assert_eq!(per_rank[1].1, want);
}
