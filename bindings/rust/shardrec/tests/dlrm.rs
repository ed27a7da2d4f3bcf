//! A small DLRM trained through the Rust binding (bottom MLP, sharded embedding collection, dot
//! interaction or DCN-v2 cross network, top MLP, BCE, Adam, gradient bucketer) at world 2 with
//! ranks as threads,
//! compared bit for bit with the same run in C (bindings/dlrm_ref/dlrm_ref.c, through
//! examples/dlrm's model), whose losses and final dense parameters the file $SHARDREC_DLRM_REF
//! holds. Also: the dense calls' errors, FSDP at world 1 and the dot interaction's definition.
use shardrec::{
    bce_with_logits, dot_interaction_backward, dot_interaction_forward, dot_interaction_width,
    Bucketer, BucketerOptions, Code, Comm, CommOptions, Dcn, DenseLayer, DenseOptimizer,
    EmbeddingCollection, EmbeddingOptions, Feature, Fsdp, Kjt, Mesh, MeshOptions, Mlp, Optimizer,
    OptimizerType, Plan, Table, Topology,
};
use std::collections::BTreeMap;

// The contract with dlrm_ref.c: shapes, seeds, optimizers and batch formulas.
const WORLD: usize = 2;
const STEPS: usize = 4;
const B: usize = 8;
const ND: usize = 4;
const F: usize = 3;
const D: usize = 4;
const ROWS: [i64; F] = [40, 30, 20];
const SEED: u64 = 7;

fn dense(step: usize, g: usize, j: usize) -> f32 {
    ((step * 7 + g * 5 + j * 3) % 17) as f32 / 8.0 - 1.0
}

fn id(step: usize, g: usize, f: usize) -> i64 {
    (step * 13 + g * 11 + f * 7) as i64 % ROWS[f]
}

fn label(step: usize, g: usize) -> f32 {
    if (step * 3 + g * 5) % 3 == 0 {
        1.0
    } else {
        0.0
    }
}

/// One rank's model, step for step as examples/dlrm/dlrm_model.c.
struct Rank {
    _plan: Plan,
    mesh: Mesh,
    coll: EmbeddingCollection,
    bottom: Mlp,
    cross: Option<Dcn>,
    top: Mlp,
    ddp: Bucketer,
    opt: DenseOptimizer,
    nb: usize,
    nc: usize,
    width: usize,
}

impl Rank {
    fn new(world: &mut Comm, dcn: bool) -> shardrec::Result<Rank> {
        let tables: Vec<Table> = (0..F)
            .map(|f| Table::new(&format!("t{f}"), ROWS[f], D as i32, &[f as i32]))
            .collect();
        let features: Vec<Feature> = (0..F)
            .map(|f| Feature {
                name: format!("c{f}"),
                pooling_factor: 1.0,
            })
            .collect();
        let mut topo = Topology::new(WORLD as i32);
        topo.batch_size = B as i32;
        topo.optimizer = OptimizerType::RowwiseAdagrad;
        let plan = Plan::new(&tables, &features, &topo, &[])?;
        let mut mesh = Mesh::new(
            world,
            &MeshOptions {
                sharding_group_size: WORLD as i32,
                ..Default::default()
            },
        )?;
        let sparse = Optimizer::new(OptimizerType::RowwiseAdagrad, 0.05);
        let coll = mesh.embedding_collection(
            &plan,
            &sparse,
            &EmbeddingOptions {
                seed: SEED,
                ..Default::default()
            },
        )?;
        let bottom = Mlp::new(ND as i64, &[8, D as i64], None, SEED, "bottom")?;
        let width = if dcn {
            ((F + 1) * D) as i64
        } else {
            dot_interaction_width(F as i64, D as i64)?
        };
        let cross = if dcn {
            Some(Dcn::new(width, 2, 4, SEED, "cross")?)
        } else {
            None
        };
        let top = Mlp::new(width, &[8, 1], None, SEED, "top")?;
        let mut counts = Vec::new();
        let mut layers: Vec<&dyn DenseLayer> = vec![&bottom];
        if let Some(c) = &cross {
            layers.push(c);
        }
        layers.push(&top);
        for l in layers {
            for i in 0..l.num_tensors()? {
                counts.push(l.param(i)?.len() as i64);
            }
        }
        let ddp = Bucketer::new(
            world,
            &counts,
            &BucketerOptions {
                first_bucket_bytes: 256,
                bucket_cap_bytes: 512,
                ..Default::default()
            },
        )?;
        let opt = DenseOptimizer::new(&Optimizer::new(OptimizerType::Adam, 0.01))?;
        let nb = bottom.num_tensors()?;
        let nc = match &cross {
            Some(c) => c.num_tensors()?,
            None => 0,
        };
        Ok(Rank {
            _plan: plan,
            mesh,
            coll,
            bottom,
            cross,
            top,
            ddp,
            opt,
            nb,
            nc,
            width: width as usize,
        })
    }

    fn step(&mut self, step: usize, rank: usize) -> shardrec::Result<f64> {
        let mut x = vec![0f32; B * ND];
        let mut labels = vec![0f32; B];
        let lengths = vec![1i32; F * B];
        let mut ids = vec![0i64; F * B];
        for b in 0..B {
            let g = rank * B + b;
            for j in 0..ND {
                x[b * ND + j] = dense(step, g, j);
            }
            for f in 0..F {
                ids[f * B + b] = id(step, g, f);
            }
            labels[b] = label(step, g);
        }
        let (bi, fi, di) = (B as i64, F as i64, D as i64);
        let mut bot_out = vec![0f32; B * D];
        let mut emb_out = vec![0f32; B * F * D];
        let mut inter = vec![0f32; B * self.width];
        let mut logits = vec![0f32; B];
        let mut dlogits = vec![0f32; B];
        let mut d_inter = vec![0f32; B * self.width];
        let mut d_bot = vec![0f32; B * D];
        let mut d_emb = vec![0f32; B * F * D];
        self.bottom.use_bucketer_grads(&self.ddp, 0)?;
        self.top.use_bucketer_grads(&self.ddp, self.nb + self.nc)?;
        if let Some(c) = &mut self.cross {
            c.use_bucketer_grads(&self.ddp, self.nb)?;
        }
        const ROW: usize = (F + 1) * D;
        let mut x0 = vec![0f32; B * ROW];
        let mut d_x0 = vec![0f32; B * ROW];
        self.ddp.zero_grad()?;
        self.bottom.forward(&x, bi, &mut bot_out)?;
        let kjt = Kjt {
            batch_size: bi,
            num_features: F,
            lengths: &lengths,
            values: &ids,
            weights: None,
        };
        self.coll.forward(&kjt, &mut emb_out)?;
        match &mut self.cross {
            None => dot_interaction_forward(&bot_out, &emb_out, bi, fi, di, &mut inter)?,
            Some(c) => {
                for b in 0..B {
                    x0[b * ROW..b * ROW + D].copy_from_slice(&bot_out[b * D..(b + 1) * D]);
                    x0[b * ROW + D..(b + 1) * ROW]
                        .copy_from_slice(&emb_out[b * F * D..(b + 1) * F * D]);
                }
                c.forward(&x0, bi, &mut inter)?;
            }
        }
        self.top.forward(&inter, bi, &mut logits)?;
        let loss = bce_with_logits(&logits, &labels, B as f64, Some(&mut dlogits))?;
        self.top.backward(
            &dlogits,
            Some(&mut d_inter),
            Some((&mut self.ddp, self.nb + self.nc)),
        )?;
        match &mut self.cross {
            None => dot_interaction_backward(
                &bot_out, &emb_out, &d_inter, bi, fi, di, &mut d_bot, &mut d_emb,
            )?,
            Some(c) => {
                c.backward(&d_inter, &mut d_x0, Some((&mut self.ddp, self.nb)))?;
                for b in 0..B {
                    d_bot[b * D..(b + 1) * D].copy_from_slice(&d_x0[b * ROW..b * ROW + D]);
                    d_emb[b * F * D..(b + 1) * F * D]
                        .copy_from_slice(&d_x0[b * ROW + D..(b + 1) * ROW]);
                }
            }
        }
        self.coll.backward(&d_emb)?;
        self.bottom
            .backward(&d_bot, None, Some((&mut self.ddp, 0)))?;
        self.ddp.finish()?;
        match &mut self.cross {
            None => self.opt.step(&mut [&mut self.bottom, &mut self.top])?,
            Some(c) => self.opt.step(&mut [&mut self.bottom, c, &mut self.top])?,
        }
        self.mesh.step(&mut self.coll)?;
        Ok(loss)
    }
}

struct Reference {
    losses: [[f64; WORLD]; STEPS],
    tensors: BTreeMap<String, Vec<f32>>,
}

/// The section of `variant` ("dot" or "dcn").
fn read_reference(variant: &str) -> Reference {
    let path = std::env::var("SHARDREC_DLRM_REF")
        .expect("SHARDREC_DLRM_REF must name the output of dlrm_ref (ctest sets it)");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut r = Reference {
        losses: [[0.0; WORLD]; STEPS],
        tensors: BTreeMap::new(),
    };
    let mut section = "";
    for line in text.lines() {
        let p: Vec<&str> = line.split_whitespace().collect();
        if p[0] == "variant" {
            section = p[1];
            continue;
        }
        if p[0] != "world" && p[0] != "steps" && section != variant {
            continue;
        }
        match p[0] {
            "world" => assert_eq!(p[1].parse::<usize>().unwrap(), WORLD),
            "steps" => assert_eq!(p[1].parse::<usize>().unwrap(), STEPS),
            "loss" => {
                let (s, k): (usize, usize) = (p[1].parse().unwrap(), p[2].parse().unwrap());
                r.losses[s][k] = p[3].parse().unwrap();
            }
            "tensor" => {
                let n: usize = p[2].parse().unwrap();
                assert_eq!(p.len(), n + 3, "tensor line {}", p[1]);
                let v = p[3..]
                    .iter()
                    .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
                    .collect();
                r.tensors.insert(p[1].to_string(), v);
            }
            other => panic!("unexpected reference line kind {other}"),
        }
    }
    r
}

#[test]
fn dlrm_trains_like_the_c_model_with_dot() {
    dlrm_trains_like_the_c_model("dot", 8);
}

#[test]
fn dlrm_trains_like_the_c_model_with_dcn() {
    dlrm_trains_like_the_c_model("dcn", 14);
}

fn dlrm_trains_like_the_c_model(variant: &str, num_tensors: usize) {
    let reference = read_reference(variant);
    assert_eq!(
        reference.tensors.len(),
        num_tensors,
        "{variant}: tensors in the reference"
    );
    shardrec::set_blas_threads(1).unwrap();
    assert_eq!(shardrec::blas_threads().unwrap(), 1);
    let comms = Comm::local_group(WORLD, &CommOptions::default()).unwrap();
    let results: Vec<(Vec<f64>, BTreeMap<String, Vec<f32>>, i64)> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, mut comm)| {
                s.spawn(move || {
                    let mut m = Rank::new(&mut comm, variant == "dcn").expect("model");
                    let losses: Vec<f64> = (0..STEPS)
                        .map(|st| m.step(st, rank).expect("step"))
                        .collect();
                    let mut tensors = BTreeMap::new();
                    let mut layers: Vec<&dyn DenseLayer> = vec![&m.bottom];
                    if let Some(c) = &m.cross {
                        layers.push(c);
                    }
                    layers.push(&m.top);
                    for l in layers {
                        for i in 0..l.num_tensors().unwrap() {
                            tensors.insert(l.tensor_name(i).unwrap(), l.param(i).unwrap().to_vec());
                        }
                    }
                    let stats = m.ddp.stats().unwrap();
                    assert_eq!(stats.steps, STEPS as i64);
                    (losses, tensors, stats.buckets)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        results[0].2 > 1,
        "small caps give several buckets, got {}",
        results[0].2
    );
    for st in 0..STEPS {
        for (rank, res) in results.iter().enumerate() {
            assert_eq!(
                res.0[st].to_bits(),
                reference.losses[st][rank].to_bits(),
                "{variant} loss of step {st} rank {rank}: C {}, Rust {}",
                reference.losses[st][rank],
                res.0[st]
            );
        }
    }
    assert_eq!(
        results[0].1.keys().collect::<Vec<_>>(),
        reference.tensors.keys().collect::<Vec<_>>()
    );
    for (name, want) in &reference.tensors {
        let got = &results[0].1[name];
        let same = got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{variant} tensor {name}: C {want:?}, Rust {got:?}");
    }
}

#[test]
fn dense_misuse_carries_status_and_message() {
    let e = Mlp::new(4, &[0], None, 1, "m").err().expect("zero width");
    assert_eq!(e.code(), Code::Invalid);
    assert!(!e.message().is_empty());
    assert_eq!(
        Mlp::new(4, &[2], Some(&[]), 1, "m").err().unwrap().code(),
        Code::Invalid
    );
    let mut m = Mlp::new(2, &[3, 1], None, 1, "").unwrap();
    assert_eq!(m.tensor_name(0).unwrap(), "mlp.0.weight");
    assert_eq!(
        m.forward(&[0.0; 3], 2, &mut [0.0; 2]).err().unwrap().code(),
        Code::Invalid
    );
    assert_eq!(
        m.backward(&[], None, None).err().unwrap().code(),
        Code::Usage
    );
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut ddp = Bucketer::new(&mut comm, &[3, 2], &BucketerOptions::default()).unwrap();
    ddp.mark_ready(1).unwrap();
    assert_eq!(ddp.mark_ready(1).err().unwrap().code(), Code::Usage);
    assert_eq!(ddp.finish().err().unwrap().code(), Code::Usage);
    assert_eq!(ddp.bucket(0).unwrap(), vec![1, 0]);
    assert_eq!(ddp.grad(0).unwrap().len(), 3);
    let mut small = Mlp::new(1, &[2], None, 1, "s").unwrap();
    assert_eq!(
        small.use_bucketer_grads(&ddp, 0).err().unwrap().code(),
        Code::Invalid
    );
}

#[test]
fn fsdp_step_at_world_one_is_sgd() {
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut f = Fsdp::new(
        &mut comm,
        &[&[1.0, 2.0, 3.0], &[4.0, 5.0]],
        &Optimizer::new(OptimizerType::Sgd, 0.5),
    )
    .unwrap();
    assert_eq!(f.gather(0, Some(1)).unwrap(), &[1.0, 2.0, 3.0]);
    f.release(0).unwrap();
    assert_eq!(f.gather(1, None).unwrap(), &[4.0, 5.0]);
    f.release(1).unwrap();
    f.grad(0).unwrap().copy_from_slice(&[2.0, 0.0, -2.0]);
    f.grad(1).unwrap().copy_from_slice(&[1.0, 1.0]);
    f.reduce_grad(0).unwrap();
    f.reduce_grad(1).unwrap();
    f.step().unwrap();
    assert_eq!(f.shard(0).unwrap(), (&[0.0f32, 2.0, 4.0][..], 0));
    assert_eq!(f.shard(1).unwrap(), (&[3.5f32, 4.5][..], 0));
    let (current, peak) = f.memory().unwrap();
    assert!(peak >= current && peak > 0, "memory {current} / {peak}");
}

#[test]
fn dot_interaction_and_bce_match_their_definitions() {
    let mut out = vec![0f32; dot_interaction_width(2, 2).unwrap() as usize];
    dot_interaction_forward(&[1.0, 2.0], &[3.0, 4.0, 5.0, 6.0], 1, 2, 2, &mut out).unwrap();
    assert_eq!(out, vec![1.0, 2.0, 11.0, 17.0, 39.0]);
    let mut dl = [0f32; 2];
    let loss = bce_with_logits(&[0.0, 0.0], &[1.0, 0.0], 2.0, Some(&mut dl)).unwrap();
    assert!((loss - 2f64.ln()).abs() < 1e-12);
    assert_eq!(dl, [-0.25, 0.25]);
    assert_eq!(
        bce_with_logits(&[0.0], &[0.5], 1.0, None)
            .err()
            .unwrap()
            .code(),
        Code::Invalid
    );
}

#[test]
fn no_sync_steps_only_accumulate() {
    let mut comm = Comm::local_group(1, &CommOptions::default())
        .unwrap()
        .remove(0);
    let mut ddp = Bucketer::new(&mut comm, &[2, 2], &BucketerOptions::default()).unwrap();
    let mut m = Mlp::new(1, &[2], Some(&[shardrec::Activation::None]), 3, "m").unwrap();
    m.use_bucketer_grads(&ddp, 0).unwrap();
    ddp.zero_grad().unwrap();
    ddp.set_sync(false).unwrap();
    for _ in 0..2 {
        m.forward(&[1.0], 1, &mut [0.0; 2]).unwrap();
        m.backward(&[1.0, 2.0], None, Some((&mut ddp, 0))).unwrap();
        ddp.finish().unwrap();
    }
    assert_eq!(
        ddp.stats().unwrap().steps,
        0,
        "no_sync steps are not synced steps"
    );
    assert_eq!(m.grad(1).unwrap(), &[2.0, 4.0], "bias gradients accumulate");
    ddp.set_sync(true).unwrap();
    ddp.mark_ready(0).unwrap();
    ddp.mark_ready(1).unwrap();
    ddp.finish().unwrap();
    assert_eq!(ddp.stats().unwrap().steps, 1);
    assert_eq!(
        m.grad(1).unwrap(),
        &[2.0, 4.0],
        "world 1: the average is the sum"
    );
    assert_eq!(ddp.grad(1).unwrap(), vec![2.0, 4.0]);
    drop(ddp);
    // The layer keeps the bucket storage alive after the bucketer is dropped.
    assert_eq!(m.grad(1).unwrap(), &[2.0, 4.0]);
}

#[test]
fn dense_handles_are_send() {
    fn send<T: Send>() {}
    send::<Mlp>();
    send::<Dcn>();
    send::<DenseOptimizer>();
    send::<Bucketer>();
    send::<Fsdp>();
}
