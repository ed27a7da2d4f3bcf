//! The delta export of a dynamic table through the Rust binding: mark, train, and the delta's
//! rows equal what a forward reads, with a tombstone for the id LRU eviction removed.
use shardrec::{
    Code, Comm, CommOptions, Constraints, DynamicDelta, DynamicTable, EmbeddingCollection,
    Eviction, Feature, Kjt, Optimizer, OptimizerType, Plan, ShardingType, Table, Topology,
};
use std::thread;

/// Byte range of tensor `name` in a safetensors header (from its data_offsets).
fn range(header: &str, name: &str) -> (usize, usize) {
    let entry = &header[header.find(&format!("\"{name}\":{{")).expect("tensor")..];
    let offsets = &entry[entry.find("\"data_offsets\":[").expect("offsets") + 16..];
    let offsets = &offsets[..offsets.find(']').expect("]")];
    let (a, b) = offsets.split_once(',').expect(",");
    (
        a.trim().parse().expect("start"),
        b.trim().parse().expect("end"),
    )
}

const DIM: usize = 4;
const WIDTH: usize = DIM + 2; // the fixed table's 2 columns follow

/// One sample per id, each a bag of that id (the fixed feature reads row 0).
fn forward(coll: &mut EmbeddingCollection, ids: &[i64], train: bool) -> Vec<f32> {
    let n = ids.len();
    let lengths = vec![1i32; 2 * n];
    let mut values = ids.to_vec();
    values.resize(2 * n, 0);
    let batch = Kjt {
        batch_size: n as i64,
        num_features: 2,
        lengths: &lengths,
        values: &values,
        weights: None,
    };
    let out = coll.forward_vec(&batch).expect("forward");
    if train {
        coll.backward(&out).expect("backward");
    }
    out
}

#[test]
fn delta_after_mark_holds_the_forwards_rows_and_a_tombstone() {
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

    assert_eq!(
        coll.dynamic_delta("dyn").expect_err("not marked").code(),
        Code::Usage
    );
    forward(&mut coll, &[10, 20, 30], true);
    coll.dynamic_mark("dyn").expect("mark");
    let d = coll.dynamic_delta("dyn").expect("empty delta");
    assert!(d.ids.is_empty() && d.rows.is_empty() && d.tombstones.is_empty());
    assert_eq!(d.dim, DIM);

    // 20 trains again; 40 takes the free slot and 50 evicts the row seen longest ago, 10 (10
    // and 30 tie on last sight: the smaller id leaves).
    forward(&mut coll, &[20], true);
    forward(&mut coll, &[40, 50], true);
    let d = coll.dynamic_delta("dyn").expect("delta");
    assert_eq!(d.ids, [20, 40, 50]);
    assert_eq!(d.tombstones, [10]);
    assert_eq!(d.rows.len(), 3 * DIM);
    // The rows are the table's current rows: what a forward of those ids reads.
    let out = forward(&mut coll, &d.ids, false);
    for i in 0..d.ids.len() {
        assert_eq!(
            d.row(i),
            &out[i * WIDTH..i * WIDTH + DIM],
            "row of id {}",
            d.ids[i]
        );
    }
    // The table's export keyed by id (no new call): ids 20, 30, 40, 50 (10 left), and the
    // delta's rows are its rows of those ids.
    let dir = std::env::temp_dir().join(format!("shardrec-rs-delta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("dyn.safetensors");
    let path = path.to_str().expect("utf-8 path");
    // With the optimizer state too (keyed by the same ids), and imported back: a table import
    // of its own rows changes nothing.
    coll.export_table("dyn", path, true)
        .expect("export with optimizer state");
    coll.import_table("dyn", path, true)
        .expect("import of the table's own export");
    coll.export_table("dyn", path, false).expect("export");
    let file = std::fs::read(path).expect("read");
    std::fs::remove_dir_all(&dir).ok();
    let n = u64::from_le_bytes(file[..8].try_into().expect("8 bytes")) as usize;
    let header = std::str::from_utf8(&file[8..8 + n]).expect("utf-8 header");
    assert!(header.contains("shardrec-dynamic-table"), "{header}");
    let data = &file[8 + n..];
    let (ids, weights) = (range(header, "ids"), range(header, "weights"));
    let exported: Vec<i64> = data[ids.0..ids.1]
        .chunks(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect();
    assert_eq!(exported, [20, 30, 40, 50]);
    let rows: Vec<f32> = data[weights.0..weights.1]
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    for (i, id) in d.ids.iter().enumerate() {
        let e = exported.binary_search(id).expect("exported id");
        assert_eq!(
            &rows[e * DIM..(e + 1) * DIM],
            d.row(i),
            "exported row of id {id}"
        );
    }
    assert_eq!(
        coll.dynamic_mark("fixed").expect_err("fixed table").code(),
        Code::Invalid
    );
    assert_eq!(
        coll.dynamic_delta("fixed").expect_err("fixed table").code(),
        Code::Invalid
    );
    assert_eq!(
        coll.dynamic_delta("nope")
            .expect_err("unknown table")
            .code(),
        Code::NotFound
    );
}

/// At world 2 the delta is collective: a row-wise table's changes on both ranks' shards, the
/// same on both, whose rows equal what each rank's forward reads.
#[test]
fn delta_gathers_both_ranks() {
    let tables =
        [Table::new("dyn", 64, DIM as i32, &[0]).dynamic(DynamicTable::new(Eviction::Lru, 0))];
    let features = [Feature::new("raw")];
    let row_wise = [Constraints::new("dyn", &[ShardingType::RowWise], &[])];
    let plan = Plan::new(&tables, &features, &Topology::new(2), &row_wise).expect("plan");
    let comms = Comm::local_group(2, &CommOptions::default()).expect("group");
    let deltas: Vec<DynamicDelta> = thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let plan = &plan;
                s.spawn(move || {
                    let sgd = Optimizer::new(OptimizerType::Sgd, 0.1);
                    let mut coll =
                        EmbeddingCollection::new(plan, &mut comm, &sgd, &Default::default())
                            .expect("collection");
                    let first: [&[i64]; 2] = [&[1, 2, 3], &[101, 102, 103]];
                    let second: [&[i64]; 2] = [&[7, 1 << 60], &[-5, 2]];
                    forward_one(&mut coll, first[rank], true);
                    coll.dynamic_mark("dyn").expect("mark");
                    forward_one(&mut coll, second[rank], true);
                    let d = coll.dynamic_delta("dyn").expect("delta");
                    assert_eq!(forward_one(&mut coll, &d.ids, false), d.rows, "rank {rank}");
                    d
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    assert_eq!(deltas[0].ids, [-5, 2, 7, 1 << 60]);
    assert!(deltas[0].tombstones.is_empty());
    assert_eq!(deltas[0], deltas[1]);
}

/// One sample per id of a one-feature collection.
fn forward_one(coll: &mut EmbeddingCollection, ids: &[i64], train: bool) -> Vec<f32> {
    let lengths = vec![1i32; ids.len()];
    let batch = Kjt {
        batch_size: ids.len() as i64,
        num_features: 1,
        lengths: &lengths,
        values: ids,
        weights: None,
    };
    let out = coll.forward_vec(&batch).expect("forward");
    if train {
        coll.backward(&out).expect("backward");
    }
    out
}
