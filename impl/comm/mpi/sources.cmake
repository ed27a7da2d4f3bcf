# The MPI backend's libshardrec side: plugin loader and the communicator over its table. No MPI
# header or library is used here (the plugin, plugin.cmake, is the only MPI consumer).
list(APPEND SHARDREC_COMM_SOURCES
  mpi/mpi_plugin_loader.cc
  mpi/message_tags.cc
  mpi/launcher_world.cc
  mpi/mpi_communicator.cc
  mpi/mpi_collectives.cc
  mpi/mpi_direct.cc)
