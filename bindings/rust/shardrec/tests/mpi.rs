//! `Comm::from_mpi` reaches `shardrec_comm_create_mpi`: its option checks and error codes,
//! without initialising MPI in the test process (the MPI runs themselves are tests/capi/mpi,
//! under mpirun).
use shardrec::{Code, Comm, CommOptions, DeviceType, UniqueId};
use shardrec_sys as sys;

#[test]
fn from_mpi_checks_its_options() {
    let nccl = CommOptions {
        backend: sys::SHARDREC_BACKEND_NCCL as i32,
        ..Default::default()
    };
    let err = Comm::from_mpi(0, &nccl)
        .err()
        .expect("NCCL backend must be refused");
    assert_eq!(err.code(), Code::Invalid, "{err}");
    assert!(err.message().contains("SHARDREC_BACKEND_MPI"), "{err}");

    let cuda = CommOptions {
        backend: sys::SHARDREC_BACKEND_MPI as i32,
        device_type: DeviceType::Cuda as i32,
        ..Default::default()
    };
    let err = Comm::from_mpi(0, &cuda)
        .err()
        .expect("a CUDA device must be refused");
    assert_eq!(err.code(), Code::Unsupported, "{err}");
    assert!(err.message().contains("host memory only"), "{err}");

    let id = UniqueId::new().unwrap();
    let mpi = CommOptions {
        backend: sys::SHARDREC_BACKEND_MPI as i32,
        ..Default::default()
    };
    let err = Comm::new(&id, 1, 0, &mpi)
        .err()
        .expect("MPI through a unique id must be refused");
    assert_eq!(err.code(), Code::Invalid, "{err}");
    assert!(err.message().contains("shardrec_comm_create_mpi"), "{err}");
}
