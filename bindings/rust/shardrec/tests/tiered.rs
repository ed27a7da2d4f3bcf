//! A tiered table through the Rust crate trains to the bits of the same table in memory, with a
//! cache of a few rows, and its statistics count the cache's work.
mod common;

use common::{batch, plan_for, DIMS, ROWS};
use shardrec::{
    Code, Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Kjt, Optimizer, OptimizerType,
    TableTier,
};

fn train(options: &EmbeddingOptions<'_>) -> (Vec<f32>, EmbeddingCollection) {
    let plan = plan_for(1, OptimizerType::Adagrad);
    let optimizer = Optimizer::new(OptimizerType::Adagrad, 0.05);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let mut coll = EmbeddingCollection::new(&plan, &mut comm, &optimizer, options).expect("create");
    for step in 0..5 {
        let (lengths, values) = batch(step, 0, 1);
        let kjt = Kjt::new(4, 3, &lengths, &values);
        let mut out = vec![0.0f32; coll.output_size(&kjt).expect("size")];
        coll.forward(&kjt, &mut out).expect("forward");
        coll.backward(&out).expect("backward");
    }
    let mut w = vec![0.0f32; (ROWS[0] * DIMS[0] as i64) as usize];
    coll.get_weights("t0", &mut w).expect("weights");
    (w, coll)
}

#[test]
fn tiered_table_matches_memory() {
    let dir = std::env::temp_dir().join(format!("shardrec_rust_tiered_{}", std::process::id()));
    let (memory, _) = train(&EmbeddingOptions {
        seed: 3,
        ..Default::default()
    });
    // t0: 8 fp32 columns, 8 Adagrad state floats and 32 bytes of metadata: 96 bytes a row; 12
    // rows (a batch has at most 12 ids of it).
    let tiers = [TableTier {
        table: "t0".into(),
        dir: dir.display().to_string(),
        cache_bytes: 12 * 96,
    }];
    let (tiered, coll) = train(&EmbeddingOptions {
        seed: 3,
        tiers: &tiers,
        ..Default::default()
    });
    for (i, (a, b)) in tiered.iter().zip(&memory).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "weight {i}: tiered {a}, memory {b}"
        );
    }
    let st = coll.tier_stats("t0").expect("stats");
    assert_eq!(st.cache_slots, 12);
    assert_eq!(st.steps, 5);
    assert!(
        st.misses > st.cache_slots && st.write_backs > 0,
        "no eviction: {st:?}"
    );
    assert_eq!(coll.tier_stats("t1").unwrap_err().code(), Code::Invalid);
    drop(coll);
    let _ = std::fs::remove_dir_all(&dir);
}
