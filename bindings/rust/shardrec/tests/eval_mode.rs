//! Evaluation mode and SCORE eviction through the Rust binding: an evaluation forward reads
//! known rows and zeros and changes nothing; the caller's scores choose the row that leaves.
use shardrec::{
    Code, Comm, CommOptions, DynamicTable, EmbeddingCollection, Eviction, Feature, Kjt, Optimizer,
    OptimizerType, Plan, Table, Topology,
};

const DIM: usize = 4;

/// One sample: a bag of `a` for "dyn", a bag of `b` for "scored".
fn forward(coll: &mut EmbeddingCollection, a: &[i64], b: &[i64]) -> shardrec::Result<Vec<f32>> {
    let lengths = [a.len() as i32, b.len() as i32];
    let values: Vec<i64> = a.iter().chain(b).copied().collect();
    let batch = Kjt {
        batch_size: 1,
        num_features: 2,
        lengths: &lengths,
        values: &values,
        weights: None,
    };
    coll.forward_vec(&batch)
}

fn train(coll: &mut EmbeddingCollection, a: &[i64], b: &[i64]) {
    let out = forward(coll, a, b).expect("forward");
    coll.backward(&out).expect("backward");
}

#[test]
fn evaluation_changes_nothing_and_scores_choose_the_victim() {
    let tables = [
        Table::new("dyn", 4, DIM as i32, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 0)),
        Table::new("scored", 2, DIM as i32, &[1]).dynamic(DynamicTable::new(Eviction::Score, 0)),
    ];
    let features = [Feature::new("a"), Feature::new("b")];
    let plan = Plan::new(&tables, &features, &Topology::new(1), &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let mut coll =
        EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default()).expect("collection");

    train(&mut coll, &[10], &[1, 2]);
    let before = coll.dynamic_stats("dyn").expect("stats");
    assert!(coll.is_training().expect("mode"));
    // Evaluation: 10 reads its row, twice the same; 30 reads zeros; nothing changes.
    coll.set_training(false).expect("evaluate");
    assert!(!coll.is_training().expect("mode"));
    let known = forward(&mut coll, &[10], &[]).expect("known");
    assert_ne!(known[..DIM], [0.0; DIM]);
    let unknown = forward(&mut coll, &[30], &[]).expect("unknown");
    assert_eq!(unknown[..DIM], [0.0; DIM]);
    assert_eq!(
        coll.backward(&unknown).expect_err("backward").code(),
        Code::Usage
    );
    assert_eq!(forward(&mut coll, &[10], &[]).expect("again"), known);
    assert_eq!(coll.dynamic_stats("dyn").expect("stats"), before);
    coll.set_training(true).expect("train");
    train(&mut coll, &[30], &[]);
    assert_eq!(coll.dynamic_stats("dyn").expect("stats").size, 2);

    // Scores: 1 keeps 5, 2 gets -1, 99 has no row (not counted). A new id evicts 2.
    assert_eq!(
        coll.dynamic_set_scores("scored", &[1, 2, 99], &[5.0, -1.0, 3.0])
            .expect("set"),
        2
    );
    coll.dynamic_mark("scored").expect("mark");
    train(&mut coll, &[], &[3]);
    let d = coll.dynamic_delta("scored").expect("delta");
    assert_eq!(
        (d.ids.as_slice(), d.tombstones.as_slice()),
        (&[3i64][..], &[2i64][..])
    );
    // Refused, nothing set.
    let code = |r: shardrec::Result<usize>| r.expect_err("refused").code();
    assert_eq!(
        code(coll.dynamic_set_scores("scored", &[1], &[f64::NAN])),
        Code::Invalid
    );
    assert_eq!(
        code(coll.dynamic_set_scores("scored", &[1, 3], &[1.0])),
        Code::Invalid
    );
    assert_eq!(
        code(coll.dynamic_set_scores("dyn", &[10], &[1.0])),
        Code::Invalid
    );
    assert_eq!(
        code(coll.dynamic_set_scores("nope", &[], &[])),
        Code::NotFound
    );
}
