//! A tensor buffer or shape the Rust binding refuses on one rank fails the collective forward or
//! backward on every rank in the same call, and the ranks stay in step: the refusing rank gets
//! its own error, the other EINVAL naming it, and the step that follows trains as if nothing had
//! been refused.
use shardrec::{
    Code, Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Kjt, Optimizer, OptimizerType,
    Result,
};

mod common;
use common::{batch, on_ranks, plan_for, LOCAL_BATCH, TABLES};

fn adagrad() -> Optimizer {
    Optimizer::new(OptimizerType::Adagrad, 0.1)
}

/// `call(refused)` on this rank: rank `bad` refuses its arguments and gets EINVAL, the other
/// rank EINVAL naming rank `bad`.
fn refused_together(rank: usize, bad: usize, call: impl FnOnce(bool) -> Result<()>) {
    let err = call(rank == bad).expect_err("every rank fails the call");
    assert_eq!(err.code(), Code::Invalid, "rank {rank}: {err}");
    if rank != bad {
        assert!(
            err.message().contains(&format!("rank {bad}")),
            "rank {rank}: {err}"
        );
    }
}

#[test]
fn refused_tensors_fail_every_rank_and_keep_the_ranks_in_step() {
    let opts = EmbeddingOptions {
        seed: 7,
        ..Default::default()
    };
    let plan1 = plan_for(1, OptimizerType::Adagrad);
    let mut comm1 = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut coll1 = EmbeddingCollection::new(&plan1, &mut comm1, &adagrad(), &opts).unwrap();
    let (lengths, values) = batch(0, 0, 2);
    let b = (LOCAL_BATCH * 2) as i64;
    let kjt = Kjt {
        batch_size: b,
        num_features: 3,
        lengths: &lengths,
        values: &values,
        weights: None,
    };
    let out = coll1.forward_vec(&kjt).unwrap();
    coll1
        .backward(&out.iter().map(|v| v / b as f32).collect::<Vec<_>>())
        .unwrap();
    let single: Vec<Vec<f32>> = TABLES.iter().map(|t| coll1.weights(t).unwrap()).collect();

    let plan2 = plan_for(2, OptimizerType::Adagrad);
    let results = on_ranks(&plan2, &adagrad(), |rank, coll| {
        let (lengths, values) = batch(0, rank, 1);
        let b = LOCAL_BATCH as i64;
        let kjt = Kjt {
            batch_size: b,
            num_features: 3,
            lengths: &lengths,
            values: &values,
            weights: None,
        };
        let dim = coll.output_dim().unwrap();
        let need = (b * dim) as usize;
        let shape = [b, dim];
        // A shape of one more row than the buffer on rank 1, a negative extent on rank 0.
        refused_together(rank, 1, |bad| {
            let s = if bad { [b + 1, dim] } else { shape };
            coll.forward_tensor(&kjt, &mut vec![0.0; need], &s)
        });
        refused_together(rank, 0, |bad| {
            let s = if bad { [-1, dim] } else { shape };
            coll.forward_tensor(&kjt, &mut vec![0.0; need], &s)
        });
        let mut out = vec![0.0f32; need];
        coll.forward_tensor(&kjt, &mut out, &shape).unwrap();
        let grad: Vec<f32> = out.iter().map(|v| v / b as f32).collect();
        // The gradient one float short of its shape on rank 1.
        refused_together(rank, 1, |bad| {
            coll.backward_tensor(if bad { &grad[..need - 1] } else { &grad }, &shape)
        });
        coll.backward_tensor(&grad, &shape).unwrap();
        TABLES
            .iter()
            .map(|t| coll.weights(t).unwrap())
            .collect::<Vec<Vec<f32>>>()
    });
    for t in 0..TABLES.len() {
        for (i, (got, want)) in results[0][t].iter().zip(&single[t]).enumerate() {
            let tol = 1e-5 * want.abs().max(1.0);
            assert!(
                (got - want).abs() <= tol,
                "{}[{i}]: after the refusals {got}, one rank {want}",
                TABLES[t]
            );
        }
        assert_eq!(results[0][t], results[1][t], "ranks agree on {}", TABLES[t]);
    }
}

/// Sizes no buffer can have are errors, never a panic or an abort in safe code: a negative or
/// huge batch size before a `_vec` call allocates its output, a local group beyond the library's
/// limit before its pointers are allocated, and dense shapes whose products overflow.
#[test]
fn impossible_sizes_are_errors_not_panics() {
    let plan1 = plan_for(1, OptimizerType::Adagrad);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut coll =
        EmbeddingCollection::new(&plan1, &mut comm, &adagrad(), &Default::default()).unwrap();
    let (lengths, values) = batch(0, 0, 1);
    for b in [-1, i64::MAX, (LOCAL_BATCH + 1) as i64] {
        let kjt = Kjt::new(b, 3, &lengths, &values);
        assert_eq!(
            coll.output_size(&kjt).unwrap_err().code(),
            Code::Invalid,
            "batch_size {b}"
        );
        assert_eq!(
            coll.forward_vec(&kjt).unwrap_err().code(),
            Code::Invalid,
            "batch_size {b}"
        );
    }
    // A feature count beyond int64 is named as given (it was "num_features is -1").
    let mut out = vec![0.0f32; 4];
    let err = coll
        .forward(&Kjt::new(2, usize::MAX, &lengths, &values), &mut out)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("num_features is 18446744073709551615"),
        "{err}"
    );
    match Comm::local_group(usize::MAX, &CommOptions::default()) {
        Err(err) => assert_eq!(err.code(), Code::Invalid, "{err}"),
        Ok(_) => panic!("a local group of usize::MAX ranks was created"),
    }
    let mut out = vec![0.0f32; 4];
    let err = shardrec::dot_interaction_forward(&[], &[], 1 << 62, 1, 4, &mut out).unwrap_err();
    assert_eq!(err.code(), Code::Invalid, "{err}");
}
