//! Serving through the Rust binding: a checkpoint written by 2 ranks (table-, row- and
//! column-wise shards) opened for inference equals the training forward (bit for bit but for the
//! row-wise table's summation order), int8/int4
//! stay within their row-wise bound, lookups from 4 threads (`std::thread::scope`, one shared
//! `&Inference`) across a reload each see one whole version, a pinned snapshot keeps its
//! version, and `FrozenMlp`/`FrozenDcn::infer` equal `forward` from other threads.
use shardrec::{
    Code, Comm, CommOptions, Dcn, DenseTensor, DeviceType, EmbeddingCollection, EmbeddingOptions,
    Inference, InferenceOptions, InferenceTable, Kjt, Mlp, Optimizer, OptimizerType,
    ServingStorage,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod common;
use common::{batch, plan_for, DIMS, LOCAL_BATCH, ROWS, TABLES};

const REQUEST_STEP: usize = 9; // the batches looked up: batch(9, rank, 1)
const DENSE: [f32; 4] = [0.5, -1.25, 3.0, 7.75];

struct Fixture {
    root: std::path::PathBuf, // removed when the fixture drops
    dir1: String,
    dir2: String,
    forward1: Vec<Vec<f32>>, // per rank, the third step's forward (on dir1's weights)
    weights1: Vec<Vec<f32>>, // every table, full, at dir1
}

fn kjt<'a>(lengths: &'a [i32], values: &'a [i64]) -> Kjt<'a> {
    Kjt {
        batch_size: LOCAL_BATCH as i64,
        num_features: 3,
        lengths,
        values,
        weights: None,
    }
}

/// Trains at world 2, saving after 2 steps and again after a third.
fn train(name: &str) -> Fixture {
    let root = std::env::temp_dir().join(format!(
        "shardrec_inference_rust_{name}_{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let dir1 = root.join("v1").to_str().unwrap().to_string();
    let dir2 = root.join("v2").to_str().unwrap().to_string();
    let plan = plan_for(2, OptimizerType::Sgd);
    let comms = Comm::local_group(2, &CommOptions::default()).unwrap();
    let per_rank: Vec<(Vec<f32>, Vec<Vec<f32>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let (plan, dir1, dir2) = (&plan, &dir1, &dir2);
                s.spawn(move || {
                    let options = EmbeddingOptions {
                        seed: 11,
                        ..Default::default()
                    };
                    let sgd = Optimizer::new(OptimizerType::Sgd, 0.5);
                    let mut coll =
                        EmbeddingCollection::new(plan, &mut comm, &sgd, &options).unwrap();
                    for step in 0..2 {
                        let (l, v) = batch(step, rank, 1);
                        let out = coll.forward_vec(&kjt(&l, &v)).unwrap();
                        let grad: Vec<f32> = out.iter().map(|x| x / LOCAL_BATCH as f32).collect();
                        coll.backward(&grad).unwrap();
                    }
                    let dense = [DenseTensor {
                        name: "dense.w",
                        data: &DENSE,
                    }];
                    coll.save_checkpoint_with_dense(dir1, &dense).unwrap();
                    let weights: Vec<Vec<f32>> =
                        TABLES.iter().map(|t| coll.weights(t).unwrap()).collect();
                    let (l, v) = batch(REQUEST_STEP, rank, 1);
                    let out = coll.forward_vec(&kjt(&l, &v)).unwrap();
                    coll.backward(&out).unwrap();
                    coll.save_checkpoint(dir2).unwrap();
                    (out, weights)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let weights1 = per_rank[0].1.clone();
    let forward1 = per_rank.into_iter().map(|(out, _)| out).collect();
    Fixture {
        root,
        dir1,
        dir2,
        forward1,
        weights1,
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// An fp32 lookup against rank's training forward: bit for bit on t0 (table-wise) and t2
/// (column-wise); t1 is row-wise, whose partial sums training added in another order
/// (inference.h), so there a bag of n ids may differ by a few roundings.
fn assert_served_equals_forward(got: &[f32], fx: &Fixture, rank: usize) {
    let want = &fx.forward1[rank];
    assert_eq!(got.len(), want.len());
    for b in 0..LOCAL_BATCH {
        let ids = ((REQUEST_STEP * 7 + rank * 5 + 3 + b * 11) % 4) as f32;
        for c in 0..18 {
            let i = b * 18 + c;
            if !(8..12).contains(&c) {
                assert_eq!(got[i].to_bits(), want[i].to_bits(), "element {i}");
            } else {
                let tolerance = ids * 1e-6 * (1.0 + want[i].abs());
                assert!(
                    (got[i] - want[i]).abs() <= tolerance,
                    "element {i}: {} vs {}",
                    got[i],
                    want[i]
                );
            }
        }
    }
}

fn lookup(inf: &Inference, rank: usize) -> (Vec<f32>, u64) {
    let (l, v) = batch(REQUEST_STEP, rank, 1);
    let k = kjt(&l, &v);
    // A batch no output can hold sizes to 0 (it was usize::MAX when the product overflowed),
    // which the lookup refuses.
    for bs in [-5, 1i64 << 62] {
        let bad = Kjt {
            batch_size: bs,
            ..k
        };
        assert_eq!(inf.output_size(&bad), 0, "batch_size {bs}");
        assert!(inf.lookup(&bad, &mut []).is_err(), "batch_size {bs}");
    }
    inf.lookup_vec(&k).unwrap()
}

#[test]
fn fp32_lookup_equals_the_training_forward() {
    let fx = train("fp32");
    let mut inf = Inference::open(&fx.dir1, &InferenceOptions::default()).unwrap();
    assert_eq!(inf.version().unwrap(), 1);
    assert_eq!(inf.num_tables().unwrap(), 3);
    assert_eq!(inf.num_features().unwrap(), 3);
    assert_eq!(inf.output_dim().unwrap(), 18);
    assert!(!inf.is_sequence().unwrap());
    for t in 0..3 {
        let want = InferenceTable {
            name: TABLES[t].to_string(),
            rows: ROWS[t],
            dim: DIMS[t],
            storage: ServingStorage::Fp32,
        };
        assert_eq!(inf.table(t).unwrap(), want);
    }
    for rank in 0..2 {
        let (got, version) = lookup(&inf, rank);
        assert_eq!(version, 1);
        assert_served_equals_forward(&got, &fx, rank);
    }
    let (dense, version) = inf.dense_tensor("dense.w").unwrap();
    assert_eq!((dense, version), (&DENSE[..], 1));
    let snap = inf.pin().unwrap();
    assert_eq!(snap.dense_tensor("dense.w").unwrap(), &DENSE[..]);
    assert_eq!(
        snap.dense_tensor("missing").unwrap_err().code(),
        Code::NotFound
    );
    let (l, v) = batch(REQUEST_STEP, 1, 1);
    assert_eq!(snap.lookup_vec(&kjt(&l, &v)).unwrap(), lookup(&inf, 1).0);
}

#[test]
fn int8_and_int4_stay_within_their_row_wise_bound() {
    let fx = train("quantized");
    let per_table = [("t1", ServingStorage::Int4)];
    let options = InferenceOptions {
        default_storage: ServingStorage::Int8,
        table_storage: &per_table,
        ..Default::default()
    };
    let inf = Inference::open(&fx.dir1, &options).unwrap();
    let want = [
        ServingStorage::Int8,
        ServingStorage::Int4,
        ServingStorage::Int8,
    ];
    let levels = [255.0, 15.0, 255.0];
    let mut half_scale = [0.0f64; 3]; // per table, the widest row's scale / 2
    for t in 0..3 {
        assert_eq!(inf.table(t).unwrap().storage, want[t]);
        for row in fx.weights1[t].chunks(DIMS[t] as usize) {
            let lo = row.iter().cloned().fold(f32::INFINITY, f32::min) as f64;
            let hi = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            half_scale[t] = half_scale[t].max((hi - lo) / levels[t] / 2.0);
        }
    }
    for rank in 0..2 {
        let (got, _) = lookup(&inf, rank);
        let mut differs = false;
        for b in 0..LOCAL_BATCH {
            let mut offset = 0;
            for f in 0..3 {
                let ids = ((REQUEST_STEP * 7 + rank * 5 + f * 3 + b * 11) % 4) as f64;
                for d in 0..DIMS[f] as usize {
                    let i = b * 18 + offset + d;
                    let err = (got[i] - fx.forward1[rank][i]).abs() as f64;
                    assert!(
                        err <= ids * half_scale[f] * (1.0 + 1e-5) + 1e-6,
                        "rank {rank} sample {b} feature {f}: error {err}"
                    );
                    differs |= err > 0.0;
                }
                offset += DIMS[f] as usize;
            }
        }
        assert!(differs, "quantized lookups read exactly the fp32 values");
    }
}

/// FP8 storage: every table reads back as it, and each row's scale (bias 0) is the power of two
/// the encoder picks: the row's largest magnitude over it lies in [fit / 2, fit] (fit = 464 for
/// E4M3, 61440 for E5M2: the largest magnitude that rounds to the largest finite value).
#[test]
fn fp8_rows_carry_the_encoders_power_of_two_scale() {
    let fx = train("fp8");
    for (storage, fit) in [
        (ServingStorage::Fp8E4M3, 464.0f64),
        (ServingStorage::Fp8E5M2, 61440.0),
    ] {
        let options = InferenceOptions {
            default_storage: storage,
            ..Default::default()
        };
        let inf = Inference::open(&fx.dir1, &options).unwrap();
        assert_eq!(ServingStorage::from_code(storage as i32), Some(storage));
        for t in 0..3 {
            assert_eq!(inf.table(t).unwrap().storage, storage);
            let ids: Vec<i64> = (0..ROWS[t]).collect();
            let (scales, biases, _) = inf.row_scales(TABLES[t], &ids).unwrap();
            for (i, row) in fx.weights1[t].chunks(DIMS[t] as usize).enumerate() {
                let amax = row.iter().fold(0.0f64, |m, v| m.max((*v as f64).abs()));
                let s = scales[i] as f64;
                assert_eq!(biases[i], 0.0);
                assert_eq!(
                    scales[i].to_bits() & 0x807f_ffff,
                    0,
                    "{} row {i}: scale {s}",
                    TABLES[t]
                );
                assert!(
                    amax == 0.0 || (amax / s <= fit && amax / s >= fit / 2.0),
                    "{} row {i}",
                    TABLES[t]
                );
            }
        }
    }
}

/// `Inference::row_scales`: an int8/int4 table's per-row scale and bias are the row-wise
/// quantization of the trained rows; an fp32 table, a row out of range and an unknown table are
/// refused.
#[test]
fn row_scales_are_the_row_wise_quantization_of_the_trained_rows() {
    let fx = train("row_scales");
    let per_table = [("t1", ServingStorage::Int4), ("t2", ServingStorage::Fp32)];
    let options = InferenceOptions {
        default_storage: ServingStorage::Int8,
        table_storage: &per_table,
        ..Default::default()
    };
    let inf = Inference::open(&fx.dir1, &options).unwrap();
    let levels = [255.0f32, 15.0];
    for t in 0..2 {
        let ids: Vec<i64> = (0..ROWS[t]).collect();
        let (scales, biases, version) = inf.row_scales(TABLES[t], &ids).unwrap();
        assert_eq!(version, 1);
        for (i, row) in fx.weights1[t].chunks(DIMS[t] as usize).enumerate() {
            let lo = row.iter().cloned().fold(f32::INFINITY, f32::min);
            let hi = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(
                (scales[i], biases[i]),
                ((hi - lo) / levels[t], lo),
                "{} row {i}",
                TABLES[t]
            );
        }
    }
    assert_eq!(
        inf.row_scales(TABLES[2], &[0]).unwrap_err().code(),
        Code::Invalid
    );
    assert_eq!(
        inf.row_scales(TABLES[0], &[ROWS[0]]).unwrap_err().code(),
        Code::Invalid
    );
    assert_eq!(
        inf.row_scales("nope", &[0]).unwrap_err().code(),
        Code::NotFound
    );
}

#[test]
fn lookups_across_a_reload_see_one_whole_version() {
    let fx = train("reload");
    let forward2: Vec<Vec<f32>> = {
        let v2 = Inference::open(&fx.dir2, &InferenceOptions::default()).unwrap();
        (0..2).map(|rank| lookup(&v2, rank).0).collect()
    };
    let inf = Inference::open(&fx.dir1, &InferenceOptions::default()).unwrap();
    let served1: Vec<Vec<f32>> = (0..2).map(|rank| lookup(&inf, rank).0).collect();
    assert_ne!(forward2[0], served1[0]);
    let before = inf.pin().unwrap();
    let reloaded = AtomicBool::new(false);
    let newer = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (inf, reloaded, newer, served1, forward2) =
                (&inf, &reloaded, &newer, &served1, &forward2);
            s.spawn(move || {
                let rank = t % 2;
                let (l, v) = batch(REQUEST_STEP, rank, 1);
                let k = kjt(&l, &v);
                let mut out = vec![0.0; inf.output_size(&k)];
                // Until the reload is done, then 20 more requests on the new version.
                let mut after = 0;
                while after < 20 {
                    let done = reloaded.load(Ordering::Acquire);
                    let version = inf.lookup(&k, &mut out).unwrap();
                    let want = if version == 2 {
                        &forward2[rank]
                    } else {
                        &served1[rank]
                    };
                    assert_eq!(&out, want, "version {version}");
                    if version == 2 {
                        newer.fetch_add(1, Ordering::Relaxed);
                    }
                    if done {
                        after += 1;
                    }
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let result = inf.reload(&fx.dir2);
        reloaded.store(true, Ordering::Release); // the readers stop even when it failed
        result.unwrap();
    });
    assert_eq!(inf.version().unwrap(), 2);
    assert!(newer.load(Ordering::Relaxed) >= 80);
    assert_eq!(before.version().unwrap(), 1);
    let (l, v) = batch(REQUEST_STEP, 0, 1);
    assert_eq!(before.lookup_vec(&kjt(&l, &v)).unwrap(), served1[0]);
    drop(inf); // the snapshot outlives its handle
    assert_eq!(before.lookup_vec(&kjt(&l, &v)).unwrap(), served1[0]);
}

#[test]
fn serving_file_and_bad_requests() {
    let fx = train("errors");
    let inf = Inference::open(&fx.dir1, &InferenceOptions::default()).unwrap();
    let file = format!("{}.srv", fx.dir1);
    inf.save(&file).unwrap();
    let mapped = Inference::open(&file, &InferenceOptions::default()).unwrap();
    assert_eq!(lookup(&mapped, 1).0, lookup(&inf, 1).0);
    let bad = Kjt {
        batch_size: 1,
        num_features: 3,
        lengths: &[1, 0, 0],
        values: &[1000],
        weights: None,
    };
    let err = inf.lookup(&bad, &mut [0.0; 18]).unwrap_err();
    assert_eq!(err.code(), Code::Invalid);
    assert!(err.message().contains("1000"), "{err}");
    assert_eq!(
        inf.reload(&format!("{}/nope", fx.dir1)).unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(inf.version().unwrap(), 1);
    let cuda = InferenceOptions {
        device_type: DeviceType::Cuda,
        ..Default::default()
    };
    assert_eq!(
        Inference::open(&fx.dir1, &cuda).err().unwrap().code(),
        Code::Unsupported
    );
}

#[test]
fn frozen_mlp_and_dcn_infer_as_forward_from_threads() {
    let batch = 5;
    let mut mlp = Mlp::new(6, &[8, 3], None, 21, "top").unwrap();
    let x: Vec<f32> = (0..batch * 6).map(|i| (i as f32 * 0.7).sin()).collect();
    let mut want = vec![0.0; batch * 3];
    mlp.forward(&x, batch as i64, &mut want).unwrap();
    let mut single = vec![0.0; batch * 3];
    mlp.infer(&x, batch as i64, &mut single).unwrap();
    assert_eq!(single, want);
    let frozen = mlp.freeze();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut y = vec![0.0; batch * 3];
                for _ in 0..50 {
                    frozen.infer(&x, batch as i64, &mut y).unwrap();
                }
                assert_eq!(y, want);
            });
        }
    });
    let _mlp: Mlp = frozen.into_inner();
    let mut dcn = Dcn::new(4, 2, 2, 3, "cross").unwrap();
    let x0 = [1.0, -2.0, 0.5, 3.0, 0.25, 4.0, -1.0, 2.0];
    let (mut fwd, mut inf) = ([0.0; 8], [0.0; 8]);
    dcn.forward(&x0, 2, &mut fwd).unwrap();
    dcn.infer(&x0, 2, &mut inf).unwrap();
    assert_eq!(fwd, inf);
    let frozen = dcn.freeze();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut y = [0.0; 8];
            frozen.infer(&x0, 2, &mut y).unwrap();
            assert_eq!(y, fwd);
        });
    });
    assert_eq!(frozen.width(), 4);
}
