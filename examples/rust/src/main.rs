//! Example: two ranks (threads) train a sharded embedding collection on synthetic data with
//! the Rust binding and print the loss of every step.
use shardrec::{
    Comm, CommOptions, Constraints, EmbeddingCollection, EmbeddingOptions, Feature, Kjt, Optimizer,
    OptimizerType, Plan, ShardingType, Table, Topology,
};

/// The Rust sample of docs/bindings.md: plan, create, one forward/backward step at world size 1.
fn readme_sample() -> shardrec::Result<f64> {
    // readme:rust:begin
    let features = [Feature::new("user")];
    let tables = [Table::new("users", 1000, 16, &[0])];
    let plan = Plan::new(&tables, &features, &Topology::new(1), &[])?;
    let mut comm = Comm::local_group(1, &CommOptions::default())?.remove(0);
    let mut coll =
        EmbeddingCollection::new(&plan, &mut comm, &Optimizer::default(), &Default::default())?;
    let batch = Kjt::new(2, 1, &[2, 1], &[3, 7, 999]); // batch size, features, lengths, ids
    let out = coll.forward_vec(&batch)?; // [2, 16]; errors are shardrec::Error
    coll.backward(&out)?; // gradient of 0.5 * |out|^2
                          // readme:rust:end
    Ok(out
        .iter()
        .map(|v| 0.5 * f64::from(*v) * f64::from(*v))
        .sum())
}

/// A small deterministic generator (no crates): xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn train_rank(plan: &Plan, mut comm: Comm, rank: usize, steps: usize) -> shardrec::Result<f64> {
    let mut coll = EmbeddingCollection::new(
        plan,
        &mut comm,
        &Optimizer::new(OptimizerType::Adagrad, 0.05),
        &EmbeddingOptions {
            seed: 42,
            ..Default::default()
        },
    )?;
    let mut rng = Rng(1234 + rank as u64);
    let batch_size = 64usize;
    let mut loss = 0.0;
    for step in 0..steps {
        let (mut lengths, mut values) = (Vec::new(), Vec::new());
        for rows in [5000u64, 300] {
            for _ in 0..batch_size {
                let n = 1 + rng.next(3);
                lengths.push(n as i32);
                for _ in 0..n {
                    values.push(rng.next(rows) as i64);
                }
            }
        }
        let batch = Kjt {
            batch_size: batch_size as i64,
            num_features: 2,
            lengths: &lengths,
            values: &values,
            weights: None,
        };
        let out = coll.forward_vec(&batch)?;
        loss = out
            .iter()
            .map(|v| 0.5 * f64::from(*v) * f64::from(*v))
            .sum::<f64>()
            / batch_size as f64;
        let grad: Vec<f32> = out.iter().map(|v| v / batch_size as f32).collect();
        coll.backward(&grad)?;
        if rank == 0 {
            println!("step {step} loss {loss:.6}");
        }
    }
    // Step time and samples/s of this rank, from the collection's own timings.
    let t = coll.step_timings()?;
    if rank == 0 && t.forwards > 0 {
        let ms = |s: f64| 1e3 * s / t.forwards as f64;
        println!(
            "rank 0: {:.2} ms per step (input dist {:.2}, lookup {:.2}, output dist {:.2}, \
             backward {:.2}), {:.0} samples/s",
            ms(t.total_seconds),
            ms(t.input_dist_seconds),
            ms(t.lookup_seconds),
            ms(t.output_dist_seconds),
            ms(t.backward_seconds),
            t.samples_per_second()
        );
    }
    Ok(loss)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let features = [Feature::new("item"), Feature::new("shop")];
    let tables = [
        Table::new("items", 5000, 32, &[0]),
        Table::new("shops", 300, 16, &[1]),
    ];
    let constraints = [
        Constraints::new("items", &[ShardingType::RowWise], &[]),
        Constraints::new("shops", &[ShardingType::TableWise], &[1]),
    ];
    // The plan is made for the optimizer the collections train with (Adagrad).
    let topology = Topology {
        batch_size: 64,
        optimizer: OptimizerType::Adagrad,
        ..Topology::new(2)
    };
    let plan = Plan::new(&tables, &features, &topology, &constraints)?;
    let comms = Comm::local_group(2, &CommOptions::default())?;
    let losses = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, comm)| {
                let plan = &plan;
                s.spawn(move || train_rank(plan, comm, rank, 5))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    println!(
        "final loss {:.6} (rank 0), {:.6} (rank 1)",
        losses[0], losses[1]
    );
    println!("readme sample loss {:.6}", readme_sample()?);
    Ok(())
}
