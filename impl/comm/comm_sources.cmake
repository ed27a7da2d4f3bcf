# CPU side of comm: rendezvous stores, unique id, the Gloo backend and the factory.
list(APPEND SHARDREC_COMM_SOURCES
  reduce.cc
  agree.cc
  call_checks.cc
  failure_domain.cc
  encoded.cc
  staged_comm.cc
  stores.cc
  socket_util.cc
  store_tcp.cc
  store_tcp_server.cc
  unique_id.cc
  env_rendezvous.cc
  tcp_launch.cc
  host_identity.cc
  host_bandwidth.cc
  rank_arrival.cc
  peer_probe.cc
  gloo_mesh.cc
  gloo_communicator.cc
  gloo_interrupt.cc
  gloo_collectives.cc
  factory.cc
  work.cc
  gather_bytes.cc)
