//! The capacity hints reach the library: a host collection accepts (and ignores) them, and a
//! negative one is rejected with the library's message naming the fields.
use shardrec::{
    Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Optimizer, OptimizerType,
};

mod common;
use common::plan_for;

#[test]
fn host_collection_accepts_hints_and_negative_ones_are_rejected() {
    let adagrad = Optimizer::new(OptimizerType::Adagrad, 0.1);
    let plan = plan_for(1, OptimizerType::Adagrad);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let hints = EmbeddingOptions {
        max_batch_size: 64,
        max_ids_per_batch: 4096,
        ..Default::default()
    };
    EmbeddingCollection::new(&plan, &mut comm, &adagrad, &hints)
        .expect("hints on a host collection");
    let bad = EmbeddingOptions {
        max_batch_size: 64,
        max_ids_per_batch: -1,
        ..Default::default()
    };
    let err = EmbeddingCollection::new(&plan, &mut comm, &adagrad, &bad)
        .err()
        .expect("a negative hint was accepted");
    assert!(format!("{err}").contains("max_ids_per_batch"), "{err}");
}
