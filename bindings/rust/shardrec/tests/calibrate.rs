//! `Topology::calibrate` through the Rust binding: plausible figures written into the topology,
//! a plan made with it prints them, and a bad argument errors without writing.
use shardrec::{CalibrateOptions, Feature, Plan, Table, Topology};

#[test]
fn calibrate_fills_the_topology() {
    let mut topo = Topology::new(2);
    let c = topo
        .calibrate(&CalibrateOptions {
            ranks_share_memory: true,
            ..Default::default()
        })
        .expect("calibrate");
    assert!(
        c.gather_bandwidth > 1e8 && c.gather_bandwidth < 1e12,
        "{c:?}"
    );
    assert!(c.elapsed > 0.0 && c.elapsed < 60.0, "{c:?}");
    assert_eq!(topo.memory_bandwidth, c.gather_bandwidth);
    // One host's ranks exchange on shared memory where the process can use it (else loopback
    // TCP), and rank threads wait on each other's hand-off.
    let (bw, latency) = if c.shm_used {
        (c.shm_bandwidth, c.shm_latency)
    } else {
        (c.loopback_bandwidth, c.loopback_latency)
    };
    assert_eq!(topo.intra_node_bandwidth, bw);
    assert!((topo.collective_latency - (latency + c.handoff_latency)).abs() < 1e-15);
    assert!(topo.per_id_cost > 0.0);
    let plan = Plan::new(
        &[Table::new("t", 100, 8, &[0])],
        &[Feature::new("f")],
        &topo,
        &[],
    )
    .expect("plan");
    assert!(plan.stats().expect("stats").contains("GiB/s"));

    let mut bad = Topology::new(1);
    let err = bad
        .calibrate(&CalibrateOptions {
            threads_per_rank: -1,
            ..Default::default()
        })
        .expect_err("bad threads_per_rank");
    assert!(err.to_string().contains("threads_per_rank"), "{err}");
    assert_eq!(bad.memory_bandwidth, 0.0);
}

/// `Topology::fill_from_comm`: a local group of 4 (one host) gives world 4 and 4 ranks per
/// node on every rank, leaving the other fields alone.
#[test]
fn fill_from_comm_takes_world_and_local_size() {
    let comms = shardrec::Comm::local_group(4, &shardrec::CommOptions::default()).expect("group");
    let handles: Vec<_> = comms
        .into_iter()
        .map(|mut comm| {
            std::thread::spawn(move || {
                let mut topo = Topology::new(1);
                topo.batch_size = 256;
                topo.fill_from_comm(&mut comm).expect("fill_from_comm");
                (topo.world_size, topo.ranks_per_node, topo.batch_size)
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("rank thread"), (4, 4, 256));
    }
}

#[test]
fn calibrate_network_on_one_host_measures_nothing() {
    let comms = shardrec::Comm::local_group(2, &shardrec::CommOptions::default()).expect("group");
    let ranks: Vec<_> = comms
        .into_iter()
        .map(|mut comm| {
            std::thread::spawn(move || {
                let mut topo = Topology::new(2);
                topo.inter_node_bandwidth = 123.0;
                let got = topo
                    .calibrate_network(&mut comm, 0.2)
                    .expect("calibrate_network");
                let bad = topo
                    .calibrate_network(&mut comm, -1.0)
                    .err()
                    .expect("refused");
                (got, topo.inter_node_bandwidth, bad.to_string())
            })
        })
        .collect();
    for h in ranks {
        let (got, written, bad) = h.join().expect("rank thread");
        assert_eq!((got, written), (0.0, 123.0));
        assert!(bad.contains("time_budget"), "{bad}");
    }
}
