//! Per-table optimizers, named features, output keys and offsets, and step timings through the
//! Rust binding: a collection mixing a row-wise Adagrad table and an SGD table trains each table
//! exactly like a collection holding that table alone with that optimizer.
use shardrec::{
    Comm, CommOptions, EmbeddingCollection, Feature, Kjt, Optimizer, OptimizerType, OutputBlock,
    Plan, Table, Topology,
};

fn pattern(table: &str, i: usize) -> f32 {
    ((i * 7 + table.as_bytes()[0] as usize * 13) % 23) as f32 / 23.0 - 0.5
}

fn world1(tables: &[Table], features: &[Feature], optimizer: &Optimizer) -> EmbeddingCollection {
    // The plan is made for the collection's optimizer.
    let topology = Topology {
        optimizer: optimizer.kind,
        ..Topology::new(1)
    };
    let plan = Plan::new(tables, features, &topology, &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    EmbeddingCollection::new(&plan, &mut comm, optimizer, &Default::default()).expect("collection")
}

/// Sets every table to `pattern`, then trains `steps` steps with gradient = output.
fn train(coll: &mut EmbeddingCollection, tables: &[Table], batch: &Kjt<'_>, steps: usize) {
    for t in tables {
        let w: Vec<f32> = (0..(t.rows as usize * t.dim as usize))
            .map(|i| pattern(&t.name, i))
            .collect();
        coll.set_weights(&t.name, &w).expect("set_weights");
    }
    for _ in 0..steps {
        let out = coll.forward_vec(batch).expect("forward");
        coll.backward(&out).expect("backward");
    }
}

#[test]
fn mixed_optimizers_equal_per_table_references() {
    let adagrad = Optimizer::new(OptimizerType::RowwiseAdagrad, 0.1);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.5);
    let features = [Feature::new("f0"), Feature::new("f1")];
    let a = Table::with_feature_names("a", 50, 8, &["f0"]).optimizer(adagrad.clone());
    let b = Table::new("b", 40, 4, &[1]);
    let mut mixed = world1(&[a.clone(), b.clone()], &features, &sgd);
    let both = Kjt {
        batch_size: 2,
        num_features: 2,
        lengths: &[2, 1, 1, 2],
        values: &[3, 49, 3, 0, 17, 39],
        weights: None,
    };
    train(&mut mixed, &[a.clone(), b.clone()], &both, 3);

    let mut ref_a = world1(&[Table::new("a", 50, 8, &[0])], &features[..1], &adagrad);
    let only_a = Kjt {
        batch_size: 2,
        num_features: 1,
        lengths: &[2, 1],
        values: &[3, 49, 3],
        weights: None,
    };
    train(&mut ref_a, &[a], &only_a, 3);
    let mut ref_b = world1(&[Table::new("b", 40, 4, &[0])], &features[1..], &sgd);
    let only_b = Kjt {
        batch_size: 2,
        num_features: 1,
        lengths: &[1, 2],
        values: &[0, 17, 39],
        weights: None,
    };
    train(&mut ref_b, &[b], &only_b, 3);

    for (table, reference) in [("a", &mut ref_a), ("b", &mut ref_b)] {
        let got = mixed.weights(table).expect("weights");
        let want = reference.weights(table).expect("weights");
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6,
                "table {table} weight {i}: mixed {g}, reference {w}"
            );
        }
        assert!(
            got.iter().enumerate().any(|(i, g)| *g != pattern(table, i)),
            "{table} did not train"
        );
    }
    assert_eq!(
        mixed.table_optimizer("a").unwrap().kind,
        OptimizerType::RowwiseAdagrad
    );
    let used_b = mixed.table_optimizer("b").unwrap();
    assert_eq!(
        (used_b.kind, used_b.learning_rate),
        (OptimizerType::Sgd, 0.5)
    );
}

#[test]
fn optimizer_other_than_the_plans_is_rejected() {
    let topology = Topology {
        optimizer: OptimizerType::Adam,
        ..Topology::new(1)
    };
    let plan = Plan::new(
        &[Table::new("t", 10, 4, &[0])],
        &[Feature::new("f")],
        &topology,
        &[],
    )
    .unwrap();
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let err =
        EmbeddingCollection::new(&plan, &mut comm, &Optimizer::default(), &Default::default())
            .err()
            .expect("an SGD collection over an Adam plan");
    assert_eq!(err.code(), shardrec::Code::Invalid);
    assert!(err.message().contains("adam"), "{err}");
    let adam = Optimizer::new(OptimizerType::Adam, 0.003);
    let coll = EmbeddingCollection::new(&plan, &mut comm, &adam, &Default::default()).unwrap();
    let used = coll.table_optimizer("t").unwrap();
    assert_eq!(
        (used.kind, used.learning_rate),
        (OptimizerType::Adam, 0.003)
    );
}

#[test]
fn table_learning_rates_output_keys_and_timings() {
    let features = [
        Feature::new("user"),
        Feature::new("item"),
        Feature::new("shop"),
    ];
    let tables = [
        Table::with_feature_names("users", 30, 8, &["user"])
            .optimizer(Optimizer::new(OptimizerType::Adagrad, 0.1)),
        Table::new("items", 20, 4, &[1, 2]),
    ];
    let mut coll = world1(&tables, &features, &Optimizer::default());
    let block = |f: &str, t: &str, offset, width| OutputBlock {
        feature: f.to_string(),
        table: t.to_string(),
        offset,
        width,
    };
    assert_eq!(
        coll.outputs().unwrap(),
        vec![
            block("user", "users", 0, 8),
            block("item", "items", 8, 4),
            block("shop", "items", 12, 4)
        ]
    );
    assert_eq!(coll.output_dim().unwrap(), 16);

    coll.set_table_learning_rate("users", 0.25).unwrap();
    assert_eq!(coll.table_optimizer("users").unwrap().learning_rate, 0.25);
    let items = coll.table_optimizer("items").unwrap();
    assert_eq!(
        (items.kind, items.learning_rate),
        (OptimizerType::Sgd, 0.01)
    );
    let err = coll.set_table_learning_rate("nope", 0.1).unwrap_err();
    assert_eq!(err.code(), shardrec::Code::NotFound, "{err:?}");

    let batch = Kjt {
        batch_size: 3,
        num_features: 3,
        lengths: &[1; 9],
        values: &[0, 1, 2, 3, 4, 5, 6, 7, 8],
        weights: None,
    };
    for _ in 0..4 {
        let out = coll.forward_vec(&batch).unwrap();
        coll.backward(&out).unwrap();
    }
    let t = coll.step_timings().unwrap();
    assert_eq!((t.forwards, t.backwards, t.samples), (4, 4, 12));
    assert!(
        t.total_seconds > 0.0 && t.samples_per_second() > 0.0,
        "{t:?}"
    );
}
