//! The delta export of a dynamic table through the Rust binding: mark, train, and the delta's
//! rows equal what a forward reads, with a tombstone for the id LRU eviction removed.
use shardrec::{
    Code, Comm, CommOptions, DynamicTable, EmbeddingCollection, Eviction, Feature, Kjt,
    Optimizer, OptimizerType, Plan, Table, Topology,
};

const DIM: usize = 4;
const WIDTH: usize = DIM + 2; // the fixed table's 2 columns follow

/// One sample per id, each a bag of that id (the fixed feature reads row 0).
fn forward(coll: &mut EmbeddingCollection, ids: &[i64], train: bool) -> Vec<f32> {
    let n = ids.len();
    let lengths = vec![1i32; 2 * n];
    let mut values = ids.to_vec();
    values.resize(2 * n, 0);
    let batch =
        Kjt { batch_size: n as i64, num_features: 2, lengths: &lengths, values: &values, weights: None };
    let out = coll.forward_vec(&batch).expect("forward");
    if train {
        coll.backward(&out).expect("backward");
    }
    out
}

#[test]
fn delta_after_mark_holds_the_forwards_rows_and_a_tombstone() {
    let tables = [
        Table::new("dyn", 4, DIM as i32, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 0)),
        Table::new("fixed", 3, 2, &[1]),
    ];
    let features = [Feature::new("raw"), Feature::new("small")];
    let plan = Plan::new(&tables, &features, &Topology::new(1), &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default()).expect("comm").remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let mut coll =
        EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default()).expect("collection");

    assert_eq!(coll.dynamic_delta("dyn").expect_err("not marked").code(), Code::Usage);
    forward(&mut coll, &[10, 20, 30], true);
    coll.dynamic_mark("dyn").expect("mark");
    let d = coll.dynamic_delta("dyn").expect("empty delta");
    assert!(d.ids.is_empty() && d.rows.is_empty() && d.tombstones.is_empty());
    assert_eq!(d.dim, DIM);

    // 20 trains again; 40 takes the free slot and 50 evicts the row seen longest ago, 10 (10
    // and 30 tie on last sight: the smaller id leaves).
    forward(&mut coll, &[20], true);
    forward(&mut coll, &[40, 50], true);
    let d = coll.dynamic_delta("dyn").expect("delta");
    assert_eq!(d.ids, [20, 40, 50]);
    assert_eq!(d.tombstones, [10]);
    assert_eq!(d.rows.len(), 3 * DIM);
    // The rows are the table's current rows: what a forward of those ids reads.
    let out = forward(&mut coll, &d.ids, false);
    for i in 0..d.ids.len() {
        assert_eq!(d.row(i), &out[i * WIDTH..i * WIDTH + DIM], "row of id {}", d.ids[i]);
    }
    assert_eq!(coll.dynamic_mark("fixed").expect_err("fixed table").code(), Code::Invalid);
    assert_eq!(coll.dynamic_delta("fixed").expect_err("fixed table").code(), Code::Invalid);
    assert_eq!(coll.dynamic_delta("nope").expect_err("unknown table").code(), Code::NotFound);
}
