# CPU side of comm: the shared collective helpers, the factory, rendezvous/ (stores, unique id,
# launcher environment), gloo/ (the Gloo backend) and shm/ (the shared-memory transport between
# ranks of one host, wrapped around the backend).
list(APPEND SHARDREC_COMM_SOURCES
  reduce.cc
  agree.cc
  call_checks.cc
  checked_communicator.cc
  failure_domain.cc
  encoded.cc
  encoded_fp8.cc
  staged_comm.cc
  rendezvous/stores.cc
  rendezvous/socket_util.cc
  rendezvous/store_tcp.cc
  rendezvous/store_tcp_server.cc
  rendezvous/unique_id.cc
  rendezvous/env_rendezvous.cc
  rendezvous/tcp_launch.cc
  rendezvous/host_identity.cc
  rendezvous/rank_arrival.cc
  host_bandwidth.cc
  peer_probe.cc
  gloo/gloo_mesh.cc
  gloo/gloo_communicator.cc
  gloo/gloo_interrupt.cc
  gloo/gloo_collectives.cc
  shm/segment.cc
  shm/doorbell.cc
  shm/exchange.cc
  shm/host_setup.cc
  shm/liveness.cc
  shm/shm_communicator.cc
  shm/shm_reductions.cc
  factory.cc
  work.cc
  gather_bytes.cc)
