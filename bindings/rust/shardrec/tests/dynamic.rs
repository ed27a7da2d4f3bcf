//! A dynamic table trained on raw 64-bit ids (beyond 2^53, negative, the extremes) through the
//! Rust binding: admission at the second sight, LRU eviction at capacity, the stats read back.
use shardrec::{
    Code, Comm, CommOptions, DynamicTable, DynamicTableStats, EmbeddingCollection, Eviction,
    Feature, Kjt, Optimizer, OptimizerType, Plan, Table, Topology,
};

const CAPACITY: i64 = 4;
const DIM: usize = 4;

/// One bag of `ids` for the dynamic table and id 2 for the fixed one, gradient = output.
fn step(coll: &mut EmbeddingCollection, ids: &[i64]) -> Vec<f32> {
    let mut values = ids.to_vec();
    values.push(2);
    let lengths = [ids.len() as i32, 1];
    let batch = Kjt {
        batch_size: 1,
        num_features: 2,
        lengths: &lengths,
        values: &values,
        weights: None,
    };
    let out = coll.forward_vec(&batch).expect("forward");
    coll.backward(&out).expect("backward");
    out[..DIM].to_vec()
}

#[test]
fn dynamic_table_trains_on_raw_ids() {
    let tables = [
        Table::new("dyn", CAPACITY, DIM as i32, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 2)),
        Table::new("fixed", 3, 2, &[1]),
    ];
    let features = [Feature::new("raw"), Feature::new("small")];
    let plan = Plan::new(&tables, &features, &Topology::new(1), &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let mut coll =
        EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default()).expect("collection");

    // 2^53 and 2^53 + 1 are one f64 apart from nothing: they must stay two rows.
    let (a, b, c) = (1i64 << 53, (1i64 << 53) + 1, -7i64);
    let out = step(&mut coll, &[a, b, c]);
    assert!(
        out.iter().all(|v| *v == 0.0),
        "ids below the admission threshold read {out:?}"
    );
    let s = coll.dynamic_stats("dyn").expect("stats");
    assert_eq!(
        (s.size, s.capacity, s.last_rejected_admission),
        (0, CAPACITY, 3),
        "{s:?}"
    );

    let out = step(&mut coll, &[a, b, c]);
    assert!(out.iter().any(|v| *v != 0.0), "admitted rows read zeros");
    let s = coll.dynamic_stats("dyn").expect("stats");
    assert_eq!(
        (s.size, s.last_inserted, s.last_evicted),
        (3, 3, 0),
        "{s:?}"
    );
    assert!(s.metadata_bytes > 0);

    // Two new ids seen twice each in one bag: one free slot, one LRU victim among a, b, c.
    step(&mut coll, &[i64::MIN, i64::MIN, i64::MAX, i64::MAX]);
    let s = coll.dynamic_stats("dyn").expect("stats");
    let want = DynamicTableStats {
        size: CAPACITY,
        capacity: CAPACITY,
        load_factor: 1.0,
        last_inserted: 2,
        last_evicted: 1,
        total_inserted: 5,
        total_evicted: 1,
        total_rejected_admission: 3,
        metadata_bytes: s.metadata_bytes,
        capacity_bytes: s.capacity_bytes,
        last_admitted: 2,
        total_admitted: 5,
        ..Default::default()
    };
    assert_eq!(s, want);

    assert_eq!(
        coll.dynamic_stats("fixed").expect_err("fixed table").code(),
        Code::Invalid
    );
    assert_eq!(
        coll.dynamic_stats("nope")
            .expect_err("unknown table")
            .code(),
        Code::NotFound
    );
}

#[test]
fn ttl_without_steps_is_rejected() {
    let features = [Feature::new("f")];
    let mut dynamic = DynamicTable {
        eviction: Eviction::Ttl,
        ..Default::default()
    };
    let table = |d: DynamicTable| [Table::new("dyn", 8, 4, &[0]).dynamic(d)];
    assert!(Plan::new(&table(dynamic), &features, &Topology::new(1), &[]).is_err());
    dynamic.ttl_steps = 5;
    Plan::new(&table(dynamic), &features, &Topology::new(1), &[]).expect("plan with ttl_steps");
}

/// A capacity in bytes (`rows` 0): the planner's slots are those whose row (SGD: no state) and
/// metadata fit; the stats report both figures; rows and bytes together are refused.
#[test]
fn capacity_in_bytes_becomes_slots() {
    let features = [Feature::new("f")];
    let dynamic = DynamicTable {
        eviction: Eviction::Lru,
        capacity_bytes: 1600,
        ..Default::default()
    };
    let plan = Plan::new(
        &[Table::new("dyn", 0, DIM as i32, &[0]).dynamic(dynamic)],
        &features,
        &Topology::new(1),
        &[],
    )
    .expect("plan from bytes");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let coll =
        EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default()).expect("collection");
    let s = coll.dynamic_stats("dyn").expect("stats");
    let per_slot = 4 * DIM as i64 + s.metadata_bytes as i64 / s.capacity;
    assert!(s.capacity > 0 && s.capacity == 1600 / per_slot, "{s:?}");
    assert_eq!(
        s.capacity_bytes,
        ((s.capacity + 1) * 4 * DIM as i64) as u64 + s.metadata_bytes
    );
    let both = [Table::new("dyn", 8, DIM as i32, &[0]).dynamic(dynamic)];
    match Plan::new(&both, &features, &Topology::new(1), &[]) {
        Ok(_) => panic!("rows and bytes both were accepted"),
        Err(e) => assert_eq!(e.code(), Code::Invalid),
    }
}

/// Rows of "dyn" after three steps that each see one id once, admission at the second sight and
/// admission counts halved every `decay` steps (0: never).
fn admitted_after_three_steps(decay: i64) -> shardrec::Result<i64> {
    let dynamic = DynamicTable {
        admission_threshold: 2,
        admission_decay_steps: decay,
        ..Default::default()
    };
    let plan = Plan::new(
        &[Table::new("dyn", 8, DIM as i32, &[0]).dynamic(dynamic)],
        &[Feature::new("f")],
        &Topology::new(1),
        &[],
    )?;
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let mut coll = EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default())?;
    let (lengths, values) = ([1i32], [1i64 << 60]);
    for _ in 0..3 {
        let batch = Kjt {
            batch_size: 1,
            num_features: 1,
            lengths: &lengths,
            values: &values,
            weights: None,
        };
        let out = coll.forward_vec(&batch)?;
        coll.backward(&out)?;
    }
    Ok(coll.dynamic_stats("dyn")?.size)
}

/// Without decay the id gets a row at its second step; halved before every step it never does; a
/// negative decay is refused.
#[test]
fn admission_counts_decay() {
    assert_eq!(admitted_after_three_steps(0).expect("no decay"), 1);
    assert_eq!(admitted_after_three_steps(1).expect("decay 1"), 0);
    assert_eq!(
        admitted_after_three_steps(-1)
            .expect_err("negative decay")
            .code(),
        Code::Invalid
    );
}
