//! Checkpoints through the Rust binding: a 2-rank Adagrad collection saved and loaded into a
//! 1-rank collection of another seed bit for bit (resharding), a table exported and imported,
//! and a missing checkpoint reported as `Code::NotFound`.
use shardrec::{
    Code, Comm, CommOptions, EmbeddingCollection, EmbeddingOptions, Kjt, LoadOptions, Optimizer,
    OptimizerType,
};

mod common;
use common::{batch, plan_for, LOCAL_BATCH, TABLES};

fn plan(world: i32) -> shardrec::Plan {
    plan_for(world, OptimizerType::Adagrad)
}

fn adagrad() -> Optimizer {
    Optimizer::new(OptimizerType::Adagrad, 0.1)
}

fn everything(coll: &mut EmbeddingCollection) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for t in TABLES {
        out.push(coll.weights(t).expect("weights"));
        out.push(coll.state(t, "momentum1").expect("state"));
    }
    out
}

fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter()
        .map(|t| t.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
fn save_on_two_ranks_load_on_one_is_bit_exact() {
    let dir = std::env::temp_dir().join(format!("shardrec_ckpt_rust_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir_s = dir.to_str().unwrap().to_string();
    let export = dir.join("t1.safetensors").to_str().unwrap().to_string();
    let plan2 = plan(2);
    let comms = Comm::local_group(2, &CommOptions::default()).unwrap();
    let saved: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                let (plan2, dir_s, export) = (&plan2, &dir_s, &export);
                s.spawn(move || {
                    let options = EmbeddingOptions {
                        seed: 7,
                        ..Default::default()
                    };
                    let mut coll =
                        EmbeddingCollection::new(plan2, &mut comm, &adagrad(), &options).unwrap();
                    for step in 0..2 {
                        let (lengths, values) = batch(step, rank, 1);
                        let b = LOCAL_BATCH as i64;
                        let kjt = Kjt {
                            batch_size: b,
                            num_features: 3,
                            lengths: &lengths,
                            values: &values,
                            weights: None,
                        };
                        let out = coll.forward_vec(&kjt).unwrap();
                        let grad: Vec<f32> = out.iter().map(|v| v / b as f32).collect();
                        coll.backward(&grad).unwrap();
                    }
                    coll.save_checkpoint(dir_s).unwrap();
                    coll.export_table("t1", export, true).unwrap();
                    everything(&mut coll)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let plan1 = plan(1);
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut coll = EmbeddingCollection::new(
        &plan1,
        &mut comm,
        &adagrad(),
        &EmbeddingOptions {
            seed: 99,
            ..Default::default()
        },
    )
    .unwrap();
    coll.load_checkpoint(&dir_s, &LoadOptions::default())
        .unwrap();
    assert_eq!(bits(&everything(&mut coll)), bits(&saved[0]));
    assert_eq!(coll.num_steps().unwrap(), 2);
    let mut fresh = EmbeddingCollection::new(
        &plan1,
        &mut comm,
        &adagrad(),
        &EmbeddingOptions {
            seed: 5,
            ..Default::default()
        },
    )
    .unwrap();
    fresh.import_table("t1", &export, true).unwrap();
    let imported = everything(&mut fresh);
    assert_eq!(bits(&imported[2..4]), bits(&saved[0][2..4]));
    let missing = dir.join("missing");
    let err = fresh
        .load_checkpoint(
            missing.to_str().unwrap(),
            &LoadOptions {
                allow_partial_load: true,
                ..LoadOptions::default()
            },
        )
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
