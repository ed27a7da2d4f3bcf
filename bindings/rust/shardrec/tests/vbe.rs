//! VBE batches through the Rust binding (`VbeKjt`): a serving lookup with inverse indices equals,
//! bit for bit, the lookup of the expanded plain batch (fp32 and int8, weighted, on the handle and
//! on a pinned snapshot), without them each feature's bags come feature-major, an inverse index
//! out of range is refused naming the feature and sample; a training forward of the VBE batch
//! equals the expanded batch's, and the backward that follows updates the tables as the expanded
//! batch's does (within fp32 rounding of the gradient sums).
use shardrec::{
    Code, Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Inference, InferenceOptions,
    Kjt, Optimizer, OptimizerType, ServingStorage, VbeKjt,
};

mod common;
use common::{plan_for, DIMS, ROWS, TABLES};

/// Feature f has f + 1 bags (f0 one bag, as a user's feature) and 5 output samples.
const SIZES: [i64; 3] = [1, 2, 3];
const SAMPLES: usize = 5;

fn bag_len(f: usize, k: usize) -> usize {
    (f + k) % 3 + 1
}

fn bag_id(f: usize, k: usize, i: usize) -> i64 {
    ((f * 7 + k * 11 + i * 5) as i64) % ROWS[f]
}

fn inverse(f: usize, b: usize) -> i64 {
    ((b + f) as i64) % SIZES[f]
}

fn weight(i: usize) -> f32 {
    ((i % 5) as f32 - 2.0) * 0.375
}

/// The VBE batch's lengths, ids, weights and inverse indices.
fn vbe_parts() -> (Vec<i32>, Vec<i64>, Vec<f32>, Vec<i64>) {
    let (mut lengths, mut ids) = (vec![], vec![]);
    for f in 0..3 {
        for k in 0..SIZES[f] as usize {
            lengths.push(bag_len(f, k) as i32);
            ids.extend((0..bag_len(f, k)).map(|i| bag_id(f, k, i)));
        }
    }
    let weights = (0..ids.len()).map(weight).collect();
    let inv = (0..3)
        .flat_map(|f| (0..SAMPLES).map(move |b| inverse(f, b)))
        .collect();
    (lengths, ids, weights, inv)
}

/// The plain batch whose bag (f, b) is bag inverse(f, b) of feature f.
fn expanded() -> (Vec<i32>, Vec<i64>, Vec<f32>) {
    let (mut lengths, mut ids, mut weights) = (vec![], vec![], vec![]);
    let mut first = 0;
    for f in 0..3 {
        for b in 0..SAMPLES {
            let k = inverse(f, b) as usize;
            let at = first + (0..k).map(|j| bag_len(f, j)).sum::<usize>();
            lengths.push(bag_len(f, k) as i32);
            for i in 0..bag_len(f, k) {
                ids.push(bag_id(f, k, i));
                weights.push(weight(at + i));
            }
        }
        first += (0..SIZES[f] as usize).map(|k| bag_len(f, k)).sum::<usize>();
    }
    (lengths, ids, weights)
}

fn collection(comm: &mut Comm) -> EmbeddingCollection {
    let plan = plan_for(1, OptimizerType::Sgd);
    let options = EmbeddingOptions {
        seed: 5,
        ..Default::default()
    };
    EmbeddingCollection::new(
        &plan,
        comm,
        &Optimizer::new(OptimizerType::Sgd, 0.5),
        &options,
    )
    .unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn serving_vbe_lookups_equal_the_expanded_batch() {
    let root = std::env::temp_dir().join(format!("shardrec_vbe_rust_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.to_str().unwrap().to_string();
    {
        let mut comms = Comm::local_group(1, &CommOptions::default()).unwrap();
        let mut coll = collection(&mut comms[0]);
        coll.save_checkpoint(&dir).unwrap();
    }
    let (lengths, ids, weights, inv) = vbe_parts();
    let (el, eids, ew) = expanded();
    for storage in [ServingStorage::Fp32, ServingStorage::Int8] {
        let options = InferenceOptions {
            default_storage: storage,
            ..Default::default()
        };
        let inf = Inference::open(&dir, &options).unwrap();
        for weighted in [false, true] {
            let mut plain = Kjt::new(SAMPLES as i64, 3, &el, &eids);
            let mut kjt = Kjt::new(SAMPLES as i64, 3, &lengths, &ids);
            if weighted {
                plain = plain.with_weights(&ew);
                kjt = kjt.with_weights(&weights);
            }
            let vbe = VbeKjt::new(kjt, &SIZES).with_inverse_indices(&inv);
            let (want, _) = inf.lookup_vec(&plain).unwrap();
            let (got, version) = inf.lookup_vbe_vec(&vbe).unwrap();
            assert_eq!(version, 1);
            assert_eq!(bits(&got), bits(&want), "{storage:?} weighted {weighted}");
            let snapshot = inf.pin().unwrap();
            let mut pinned = vec![0.0; inf.vbe_output_size(&vbe).unwrap()];
            snapshot.lookup_vbe(&vbe, &mut pinned).unwrap();
            assert_eq!(bits(&pinned), bits(&want));
        }
    }
    let inf = Inference::open(&dir, &InferenceOptions::default()).unwrap();
    // Feature-major without inverse indices: bag k of feature f is what sample b reads when
    // inverse(f, b) == k.
    let (all, _) = inf
        .lookup_vec(&Kjt::new(SAMPLES as i64, 3, &el, &eids))
        .unwrap();
    let major = VbeKjt::new(Kjt::new(3, 3, &lengths, &ids), &SIZES);
    let (got, _) = inf.lookup_vbe_vec(&major).unwrap();
    let width: usize = DIMS.iter().map(|&d| d as usize).sum();
    assert_eq!(got.len(), 8 + 2 * 4 + 3 * 6);
    let (mut at, mut col) = (0, 0);
    for f in 0..3 {
        for k in 0..SIZES[f] {
            let b = (0..SAMPLES)
                .find(|&b| inverse(f, b) == k)
                .expect("every bag is read");
            let dim = DIMS[f] as usize;
            assert_eq!(
                bits(&got[at..at + dim]),
                bits(&all[b * width + col..b * width + col + dim])
            );
            at += dim;
        }
        col += DIMS[f] as usize;
    }
    let mut bad_inv = inv.clone();
    bad_inv[2 * SAMPLES + 4] = 3; // feature f2 has 3 bags
    let bad = VbeKjt::new(Kjt::new(SAMPLES as i64, 3, &lengths, &ids), &SIZES)
        .with_inverse_indices(&bad_inv);
    let mut out = vec![0.0; SAMPLES * width];
    let err = inf.lookup_vbe(&bad, &mut out).unwrap_err();
    assert_eq!(err.code(), Code::Invalid);
    assert!(
        err.message().contains("f2") && err.message().contains("sample 4"),
        "{err}"
    );
    assert!(out.iter().all(|&x| x == 0.0), "nothing written on error");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn training_vbe_forward_and_backward_follow_the_expanded_batch() {
    let (lengths, ids, weights, inv) = vbe_parts();
    let (el, eids, ew) = expanded();
    let mut comms = Comm::local_group(1, &CommOptions::default()).unwrap();
    let mut vbe_coll = collection(&mut comms[0]);
    let mut comms2 = Comm::local_group(1, &CommOptions::default()).unwrap();
    let mut plain_coll = collection(&mut comms2[0]);
    let vbe = VbeKjt::new(
        Kjt::new(SAMPLES as i64, 3, &lengths, &ids).with_weights(&weights),
        &SIZES,
    )
    .with_inverse_indices(&inv);
    let plain = Kjt::new(SAMPLES as i64, 3, &el, &eids).with_weights(&ew);
    let got = vbe_coll.forward_vbe_vec(&vbe).unwrap();
    let want = plain_coll.forward_vec(&plain).unwrap();
    assert_eq!(
        bits(&got),
        bits(&want),
        "the VBE forward equals the expanded batch's"
    );
    let grad: Vec<f32> = got.iter().map(|x| x * 0.25).collect();
    vbe_coll.backward(&grad).unwrap();
    plain_coll.backward(&grad).unwrap();
    let mut moved = false;
    for t in TABLES {
        let (a, b) = (vbe_coll.weights(t).unwrap(), plain_coll.weights(t).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-6 * (1.0 + y.abs()),
                "table {t}: {x} vs {y}"
            );
        }
        moved |= a != collection_weights_before(t);
    }
    assert!(moved, "the backward updated the tables");
}

/// A table's weights in a fresh collection (the same seed): what the backward moved away from.
fn collection_weights_before(table: &str) -> Vec<f32> {
    let mut comms = Comm::local_group(1, &CommOptions::default()).unwrap();
    collection(&mut comms[0]).weights(table).unwrap()
}
