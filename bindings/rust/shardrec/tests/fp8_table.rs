//! An FP8 table through the Rust binding: `set_weights` encodes each row (the values change,
//! within the documented E4M3 bound), and training it follows an fp32 table started from the same
//! decoded weights within that bound while its updated rows are encoded again.
use shardrec::{
    Comm, CommOptions, DType, EmbeddingCollection, Feature, Kjt, Optimizer, OptimizerType, Plan,
    Table, Topology,
};

fn world1(table: Table, optimizer: &Optimizer) -> EmbeddingCollection {
    let topology = Topology {
        optimizer: optimizer.kind,
        ..Topology::new(1)
    };
    let plan = Plan::new(&[table], &[Feature::new("f0")], &topology, &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    EmbeddingCollection::new(&plan, &mut comm, optimizer, &Default::default()).expect("collection")
}

/// Elements farther from `want` than 2^-4 of their row's largest magnitude (E4M3's bound).
fn beyond_bound(got: &[f32], want: &[f32], dim: usize) -> usize {
    let mut bad = 0;
    for (g, w) in got.chunks(dim).zip(want.chunks(dim)) {
        let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        bad += g
            .iter()
            .zip(w)
            .filter(|(a, b)| (*a - *b).abs() > amax / 16.0)
            .count();
    }
    bad
}

#[test]
fn fp8_table_encodes_rows_and_trains() {
    assert_eq!(DType::from_code(7), Some(DType::Fp8E4M3));
    assert_eq!(DType::Fp8E4M3.size(), 0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.3);
    let mut fp8 = Table::new("a", 20, 8, &[0]);
    fp8.dtype = DType::Fp8E4M3;
    let mut c8 = world1(fp8, &sgd);
    let mut c32 = world1(Table::new("a", 20, 8, &[0]), &sgd);
    let w: Vec<f32> = (0..160)
        .map(|i| (((i * 7 + 97 * 13) % 23) as f32 / 23.0 - 0.5) * (1 + i % 5) as f32)
        .collect();
    c8.set_weights("a", &w).expect("set_weights");
    let decoded = c8.weights("a").expect("weights");
    assert!(
        decoded.iter().zip(&w).any(|(a, b)| a != b),
        "set_weights did not encode"
    );
    assert_eq!(beyond_bound(&decoded, &w, 8), 0);
    c32.set_weights("a", &decoded).expect("set_weights");
    let batch = Kjt {
        batch_size: 3,
        num_features: 1,
        lengths: &[2, 1, 3],
        values: &[3, 19, 3, 0, 7, 11],
        weights: None,
    };
    for c in [&mut c8, &mut c32] {
        let out = c.forward_vec(&batch).expect("forward");
        c.backward(&out).expect("backward");
    }
    let got = c8.weights("a").expect("weights");
    let want = c32.weights("a").expect("weights");
    let moved: Vec<usize> = (0..got.len()).filter(|&i| want[i] != decoded[i]).collect();
    assert!(!moved.is_empty());
    assert!(
        moved.iter().any(|&i| got[i] != want[i]),
        "the updated rows were not encoded again"
    );
    assert_eq!(beyond_bound(&got, &want, 8), 0);
}
