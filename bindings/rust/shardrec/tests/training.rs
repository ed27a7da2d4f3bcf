//! Tests of the Rust binding: exactness of sharded training through the binding (2 ranks as
//! threads vs. world size 1 on the concatenated batch), errors carrying the C status and
//! message, and thread-safety markers.
use shardrec::{
    Code, Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Kjt, Optimizer, OptimizerType,
    Plan, ShardingType,
};

mod common;
use common::{batch, on_ranks, plan, plan_for, DIMS, LOCAL_BATCH, ROWS, TABLES};

fn train(
    coll: &mut EmbeddingCollection,
    steps: usize,
    first: usize,
    ranks: usize,
) -> Vec<Vec<f32>> {
    for step in 0..steps {
        let (lengths, values) = batch(step, first, ranks);
        let b = (LOCAL_BATCH * ranks) as i64;
        let kjt = Kjt {
            batch_size: b,
            num_features: 3,
            lengths: &lengths,
            values: &values,
            weights: None,
        };
        let out = coll.forward_vec(&kjt).expect("forward");
        let grad: Vec<f32> = out.iter().map(|v| v / b as f32).collect();
        coll.backward(&grad).expect("backward");
    }
    TABLES
        .iter()
        .map(|t| coll.weights(t).expect("weights"))
        .collect()
}

fn adagrad() -> Optimizer {
    Optimizer::new(OptimizerType::Adagrad, 0.1)
}

#[test]
fn two_rank_sharded_training_equals_single_rank() {
    let steps = 4;
    let plan1 = plan_for(1, OptimizerType::Adagrad);
    let mut comm1 = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let opts = EmbeddingOptions {
        seed: 7,
        ..Default::default()
    };
    let mut coll1 = EmbeddingCollection::new(&plan1, &mut comm1, &adagrad(), &opts).unwrap();
    let initial = train(&mut coll1, 0, 0, 2);
    let single = train(&mut coll1, steps, 0, 2);

    let plan2 = plan_for(2, OptimizerType::Adagrad);
    let results = on_ranks(&plan2, &adagrad(), |rank, coll| train(coll, steps, rank, 1));
    for t in 0..3 {
        assert_eq!(results[0][t].len(), (ROWS[t] * DIMS[t] as i64) as usize);
        for (i, (got, want)) in results[0][t].iter().zip(&single[t]).enumerate() {
            let tol = 1e-5 * want.abs().max(1.0);
            assert!(
                (got - want).abs() <= tol,
                "{}[{i}]: sharded {got}, single {want}",
                TABLES[t]
            );
        }
        assert_ne!(initial[t], single[t], "training changed {}", TABLES[t]);
        assert_eq!(results[0][t], results[1][t], "ranks agree on {}", TABLES[t]);
    }
}

#[test]
fn mixed_plan_shards_as_constrained() {
    let p = plan(2);
    assert_eq!(
        p.table_sharding(p.find_table("t0").unwrap()).unwrap().0,
        ShardingType::TableWise
    );
    assert_eq!(p.shard(0, 0).unwrap().rank, 1);
    assert_eq!(p.table_sharding(1).unwrap().0, ShardingType::RowWise);
    assert_eq!(p.table_sharding(2).unwrap(), (ShardingType::ColumnWise, 2));
    let copy = Plan::from_json(&p.to_json().unwrap()).unwrap();
    assert_eq!(copy.hash().unwrap(), p.hash().unwrap());
}

#[test]
fn out_of_range_id_gives_einval_with_the_c_message() {
    let p = plan(1);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut coll =
        EmbeddingCollection::new(&p, &mut comm, &Optimizer::default(), &Default::default())
            .unwrap();
    let kjt = Kjt {
        batch_size: 1,
        num_features: 3,
        lengths: &[1, 1, 1],
        values: &[0, 987654, 0],
        weights: None,
    };
    let err = coll.forward_vec(&kjt).unwrap_err();
    assert_eq!(err.code(), Code::Invalid);
    assert_eq!(err.code_name(), "SHARDREC_EINVAL");
    assert!(err.message().contains("987654"), "{err}");
    assert_eq!(coll.num_steps().unwrap(), 0);
    let err = p.find_table("nope").unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("nope"), "{err}");
}

#[test]
fn wrong_buffer_sizes_are_rejected_by_the_library() {
    let p = plan(1);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut coll =
        EmbeddingCollection::new(&p, &mut comm, &Optimizer::default(), &Default::default())
            .unwrap();
    let (lengths, values) = batch(0, 0, 1);
    let kjt = Kjt {
        batch_size: LOCAL_BATCH as i64,
        num_features: 3,
        lengths: &lengths,
        values: &values,
        weights: None,
    };
    let n = coll.output_size(&kjt).unwrap();
    assert_eq!(
        coll.forward(&kjt, &mut vec![0.0; n + 1])
            .unwrap_err()
            .code(),
        Code::Invalid
    );
    coll.forward(&kjt, &mut vec![0.0; n]).unwrap();
    assert_eq!(
        coll.backward(&vec![0.0; n - 1]).unwrap_err().code(),
        Code::Invalid
    );
    assert_eq!(coll.weights("nope").unwrap_err().code(), Code::NotFound);
}

#[test]
fn handles_are_send_and_plans_are_sync() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Comm>();
    send::<EmbeddingCollection>();
    send::<Plan>();
    sync::<Plan>();
}
