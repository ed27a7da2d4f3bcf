//! Quantized communication through the Rust binding: two-rank runs with bf16 and FP8 collectives
//! stay close to the exact single-rank run and differ from it (the option reached the library),
//! and the embedding-collective time is reported.
use shardrec::{
    Comm, CommEncoding, CommOptions, EmbeddingCollection, EmbeddingOptions, Kjt, Optimizer,
    OptimizerType,
};

mod common;
use common::{batch, plan_for, LOCAL_BATCH, TABLES};

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

#[test]
fn bf16_communication_trains_close_to_exact() {
    // bf16 gradients (relative 2^-8) through Adagrad: well inside 1e-2 of the values.
    trains_close_to_exact(CommEncoding::Bf16, 1e-2);
}

#[test]
fn fp8_communication_trains_close_to_exact() {
    // FP8 E4M3 values (relative 2^-4) through Adagrad: inside 1e-1 of the values.
    trains_close_to_exact(CommEncoding::Fp8E4M3, 1e-1);
    assert_eq!(CommEncoding::Fp8E5M2 as i32, 4);
}

fn trains_close_to_exact(encoding: CommEncoding, rel: f32) {
    let steps = 2;
    let adagrad = Optimizer::new(OptimizerType::Adagrad, 0.1);
    let plan1 = plan_for(1, OptimizerType::Adagrad);
    let mut comm1 = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let opts = EmbeddingOptions {
        seed: 7,
        ..Default::default()
    };
    let mut coll1 = EmbeddingCollection::new(&plan1, &mut comm1, &adagrad, &opts).unwrap();
    let single = train(&mut coll1, steps, 0, 2);

    let plan2 = plan_for(2, OptimizerType::Adagrad);
    let comms = Comm::local_group(2, &CommOptions::default()).unwrap();
    let results: Vec<(Vec<Vec<f32>>, shardrec::StepTimings)> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let (plan2, adagrad) = (&plan2, &adagrad);
                s.spawn(move || {
                    let opts = EmbeddingOptions {
                        seed: 7,
                        forward_comm_encoding: encoding,
                        backward_comm_encoding: encoding,
                        ..Default::default()
                    };
                    let mut coll =
                        EmbeddingCollection::new(plan2, &mut comm, adagrad, &opts).unwrap();
                    let w = train(&mut coll, steps, rank, 1);
                    (w, coll.step_timings().unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut differs = false;
    for t in 0..TABLES.len() {
        for (i, (got, want)) in results[0].0[t].iter().zip(&single[t]).enumerate() {
            let tol = rel * want.abs().max(0.1);
            assert!(
                (got - want).abs() <= tol,
                "{}[{i}]: {encoding:?} {got}, exact {want}",
                TABLES[t]
            );
            differs |= got != want;
        }
    }
    assert!(
        differs,
        "{encoding:?} communication changed nothing: the option did not reach the library"
    );
    let t = results[0].1;
    assert!(t.embedding_comm_seconds > 0.0 && t.embedding_comm_seconds <= t.collective_seconds);
    assert_eq!(CommEncoding::default(), CommEncoding::Fp32);
}
