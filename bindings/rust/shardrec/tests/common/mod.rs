//! The fixture shared by the integration tests: three tables, a plan that mixes shard types at
//! world 2, and deterministic per-rank batches.
#![allow(dead_code)]
use shardrec::{
    Comm, CommOptions, Constraints, EmbeddingCollection, EmbeddingOptions, Feature, Optimizer,
    OptimizerType, Plan, ShardingType, Table, Topology,
};

pub const TABLES: [&str; 3] = ["t0", "t1", "t2"];
pub const ROWS: [i64; 3] = [40, 30, 50];
pub const DIMS: [i32; 3] = [8, 4, 6];
pub const LOCAL_BATCH: usize = 4;

/// The fixture plan, made for SGD.
pub fn plan(world: i32) -> Plan {
    plan_for(world, OptimizerType::Sgd)
}

/// The fixture plan, made for the collections' optimizer `optimizer`.
pub fn plan_for(world: i32, optimizer: OptimizerType) -> Plan {
    let features = [Feature::new("f0"), Feature::new("f1"), Feature::new("f2")];
    let tables: Vec<Table> = (0..3)
        .map(|t| Table::new(TABLES[t], ROWS[t], DIMS[t], &[t as i32]))
        .collect();
    let constraints = if world == 2 {
        vec![
            Constraints::new("t0", &[ShardingType::TableWise], &[1]),
            Constraints::new("t1", &[ShardingType::RowWise], &[]),
            Constraints::new("t2", &[ShardingType::ColumnWise], &[0, 1]),
        ]
    } else {
        vec![]
    };
    let topology = Topology {
        batch_size: LOCAL_BATCH as i32,
        optimizer,
        ..Topology::new(world)
    };
    Plan::new(&tables, &features, &topology, &constraints).expect("plan")
}

/// The deterministic batches of ranks [first, first + ranks) at a step, concatenated.
pub fn batch(step: usize, first: usize, ranks: usize) -> (Vec<i32>, Vec<i64>) {
    let (mut lengths, mut values) = (Vec::new(), Vec::new());
    for f in 0..3 {
        for r in first..first + ranks {
            for b in 0..LOCAL_BATCH {
                let n = (step * 7 + r * 5 + f * 3 + b * 11) % 4;
                lengths.push(n as i32);
                for k in 0..n {
                    values.push(((step * 13 + r * 17 + f * 19 + b * 23 + k * 29) as i64) % ROWS[f]);
                }
            }
        }
    }
    (lengths, values)
}

/// `body(rank, collection)` on each rank of `plan`'s world as threads, every collection made with
/// `optimizer` and seed 7; what each returned, by rank.
pub fn on_ranks<T: Send>(
    plan: &Plan,
    optimizer: &Optimizer,
    body: impl Fn(usize, &mut EmbeddingCollection) -> T + Sync,
) -> Vec<T> {
    let world = plan.world_size().expect("world size");
    let comms = Comm::local_group(world as usize, &CommOptions::default()).expect("local group");
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let body = &body;
                s.spawn(move || {
                    let opts = EmbeddingOptions {
                        seed: 7,
                        ..Default::default()
                    };
                    let mut coll = EmbeddingCollection::new(plan, &mut comm, optimizer, &opts)
                        .expect("collection");
                    body(rank, &mut coll)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
