//! A dynamic table's delta export replayed into a serving handle opened from the checkpoint
//! taken at the mark: the served rows are the trained ones, the evicted id reads zeros; after a
//! checkpoint load the delta is full and replaces the rows of a copy opened elsewhere.
use shardrec::{
    Code, Comm, CommOptions, DynamicTable, EmbeddingCollection, Eviction, Feature, Inference, Kjt,
    Optimizer, OptimizerType, Plan, Table, Topology,
};

const DIM: usize = 4;
const WIDTH: usize = DIM + 2; // the fixed table's 2 columns follow

/// One sample per id, each a bag of that id (the fixed feature reads row 0): lengths, values.
fn request(ids: &[i64]) -> (Vec<i32>, Vec<i64>) {
    let mut values = ids.to_vec();
    values.resize(2 * ids.len(), 0);
    (vec![1; 2 * ids.len()], values)
}

fn kjt<'a>(r: &'a (Vec<i32>, Vec<i64>)) -> Kjt<'a> {
    Kjt {
        batch_size: (r.0.len() / 2) as i64,
        num_features: 2,
        lengths: &r.0,
        values: &r.1,
        weights: None,
    }
}

fn dynamic_columns(out: &[f32], sample: usize) -> &[f32] {
    &out[sample * WIDTH..sample * WIDTH + DIM]
}

#[test]
fn inference_applies_a_dynamic_delta() {
    let tables = [
        Table::new("dyn", 4, DIM as i32, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 0)),
        Table::new("fixed", 3, 2, &[1]),
    ];
    let features = [Feature::new("raw"), Feature::new("small")];
    let plan = Plan::new(&tables, &features, &Topology::new(1), &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let mut coll =
        EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default()).expect("collection");
    let train = |coll: &mut EmbeddingCollection, ids: &[i64]| {
        let out = coll.forward_vec(&kjt(&request(ids))).expect("forward");
        coll.backward(&out).expect("backward");
    };
    train(&mut coll, &[10, 20, 30]);
    coll.dynamic_mark("dyn").expect("mark");
    let dir = std::env::temp_dir().join(format!("shardrec-rs-infdelta-{}", std::process::id()));
    let dir_s = dir.to_str().expect("utf-8 path");
    coll.save_checkpoint(dir_s).expect("save");
    // 20 trains again, 40 and 50 arrive and 10 is evicted (LRU).
    train(&mut coll, &[20]);
    train(&mut coll, &[40, 50]);
    let d = coll.dynamic_delta("dyn").expect("delta");
    assert_eq!(d.tombstones, [10]);
    let asked = request(&[20, 30, 40, 50]);
    let want = coll.forward_vec(&kjt(&asked)).expect("forward"); // known ids: no weight changes

    let inf = Inference::open(dir_s, &Default::default()).expect("open");
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(inf.apply_dynamic_delta("dyn", &d).expect("apply"), 2);
    let (got, version) = inf.lookup_vec(&kjt(&asked)).expect("lookup");
    assert_eq!(version, 2);
    // The dynamic columns (the fixed table trained on since the checkpoint).
    for i in 0..4 {
        assert_eq!(
            dynamic_columns(&got, i),
            dynamic_columns(&want, i),
            "sample {i}"
        );
    }
    let (gone, _) = inf.lookup_vec(&kjt(&request(&[10]))).expect("lookup");
    assert_eq!(dynamic_columns(&gone, 0), [0.0; DIM]);
    // Bad deltas change nothing.
    let code = |r: shardrec::Result<u64>| r.expect_err("refused").code();
    assert_eq!(
        code(inf.apply_delta("dyn", &[7], &[0.0; DIM - 1], &[])),
        Code::Invalid
    );
    assert_eq!(
        code(inf.apply_delta("fixed", &[], &[], &[1])),
        Code::Invalid
    );
    assert_eq!(
        code(inf.apply_delta("fixed", &[3], &[0.0; 2], &[])),
        Code::Invalid
    );
    assert_eq!(code(inf.apply_delta("nope", &[], &[], &[])), Code::NotFound);
    assert_eq!(inf.version().expect("version"), 2);
    // A fixed table takes row updates.
    assert_eq!(
        inf.apply_delta("fixed", &[0], &[1.5, -2.0], &[])
            .expect("fixed update"),
        3
    );
    let (fixed, _) = inf.lookup_vec(&kjt(&request(&[20]))).expect("lookup");
    assert_eq!(&fixed[DIM..WIDTH], [1.5, -2.0]);
}

/// After a checkpoint load the delta is `full`, and `apply_dynamic_delta` makes its rows the
/// served table's only rows: a copy opened from an older checkpoint (not the table at the mark)
/// loses the id training no longer holds, which no tombstone names.
#[test]
fn inference_applies_a_full_delta() {
    let tables =
        [Table::new("dyn", 4, DIM as i32, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 0))];
    let plan = Plan::new(&tables, &[Feature::new("raw")], &Topology::new(1), &[]).expect("plan");
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .expect("comm")
        .remove(0);
    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
    let mut coll =
        EmbeddingCollection::new(&plan, &mut comm, &sgd, &Default::default()).expect("collection");
    // One sample per id of the single feature, each a bag of that id.
    let bags = |ids: &[i64]| (vec![1; ids.len()], ids.to_vec());
    let train = |coll: &mut EmbeddingCollection, ids: &[i64]| {
        let r = bags(ids);
        let out = coll.forward_vec(&kjt1(&r)).expect("forward");
        coll.backward(&out).expect("backward");
    };
    let root = std::env::temp_dir().join(format!("shardrec-rs-fulldelta-{}", std::process::id()));
    let (older, newer) = (root.join("older"), root.join("newer"));
    let (older, newer) = (
        older.to_str().expect("utf-8"),
        newer.to_str().expect("utf-8"),
    );
    std::fs::create_dir_all(&root).expect("temp dir");
    train(&mut coll, &[10, 20, 30]);
    coll.save_checkpoint(older).expect("save");
    train(&mut coll, &[40, 50]); // 10 is evicted (LRU)
    coll.save_checkpoint(newer).expect("save");
    coll.dynamic_mark("dyn").expect("mark");
    coll.load_checkpoint(newer, &Default::default())
        .expect("load");
    let d = coll.dynamic_delta("dyn").expect("delta");
    assert!(d.full);
    assert_eq!(d.ids, [20, 30, 40, 50]);
    assert!(d.tombstones.is_empty());

    let inf = Inference::open(older, &Default::default()).expect("open");
    std::fs::remove_dir_all(&root).ok();
    assert_eq!(inf.apply_dynamic_delta("dyn", &d).expect("apply"), 2);
    assert_eq!(inf.table(0).expect("table").rows, 4);
    let asked = bags(&[10, 20, 30, 40, 50]);
    coll.set_training(false).expect("evaluation");
    let want = coll.forward_vec(&kjt1(&asked)).expect("forward");
    let (got, _) = inf.lookup_vec(&kjt1(&asked)).expect("lookup");
    assert_eq!(got, want);
    assert_eq!(&got[..DIM], [0.0; DIM]);
    // A mark starts an ordinary period again.
    coll.dynamic_mark("dyn").expect("mark");
    let next = coll.dynamic_delta("dyn").expect("delta");
    assert!(!next.full && next.ids.is_empty());
}

/// The batch of `bags`' lengths and values, one feature.
fn kjt1(r: &(Vec<i32>, Vec<i64>)) -> Kjt<'_> {
    Kjt::new(r.0.len() as i64, 1, &r.0, &r.1)
}
