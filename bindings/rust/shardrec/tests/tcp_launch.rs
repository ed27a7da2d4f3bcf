//! `Comm::from_tcp`: rank 0's address handed in code (as Ray Train does). Two ranks on threads
//! meet, rank 0 saying `localhost`, and sum over the new communicator; bad arguments are refused
//! naming them.
use shardrec::{Code, Comm, CommOptions};
use std::thread;

#[test]
fn ranks_meet_at_the_address_given_in_code() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("address").port() as i32
    };
    let ranks: Vec<_> = ["localhost", "127.0.0.1"]
        .iter()
        .enumerate()
        .map(|(rank, addr)| {
            let addr = addr.to_string();
            thread::spawn(move || {
                let opts = CommOptions {
                    timeout_ms: 20000,
                    store_grace_ms: 2000,
                    ..Default::default()
                };
                let mut comm = Comm::from_tcp(&addr, port, rank as i32, 2, &opts).expect("create");
                let mut v = [rank as f32 + 1.0];
                comm.allreduce_sum(&mut v).expect("allreduce");
                (
                    comm.rank().unwrap(),
                    comm.size().unwrap(),
                    comm.local_size().unwrap(),
                    v[0],
                    comm,
                )
            })
        })
        .collect();
    let mut results: Vec<_> = ranks
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect();
    for (r, (rank, size, local, sum, _)) in results.iter().enumerate() {
        assert_eq!((*rank, *size, *local, *sum), (r as i32, 2, 2, 3.0));
    }
    // Rank 0 hosts the store: dropped last.
    drop(results.pop());
    drop(results);
}

#[test]
fn bad_arguments_are_refused_naming_them() {
    let opts = CommOptions::default();
    for (addr, port, rank, world, named) in [
        ("", 29500, 0, 1, "addr"),
        ("a\0b", 29500, 0, 1, "addr"),
        ("127.0.0.1", 0, 0, 1, "port"),
        ("127.0.0.1", 29500, 2, 2, "rank"),
        ("127.0.0.1", 29500, 0, 0, "world_size"),
    ] {
        let err = Comm::from_tcp(addr, port, rank, world, &opts)
            .err()
            .expect("refused");
        assert_eq!(err.code(), Code::Invalid, "{named}");
        assert!(err.to_string().contains(named), "{named}: {err}");
    }
}
