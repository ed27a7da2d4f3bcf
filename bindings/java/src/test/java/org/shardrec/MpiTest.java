// Comm.createMpi reaches shardrec_comm_create_mpi: its option checks and error codes, without
// initialising MPI in the JVM (the MPI runs themselves are tests/capi/mpi, under mpirun).
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class MpiTest {
  @Test
  void createMpiChecksItsOptions() {
    Comm.Options nccl = new Comm.Options();
    nccl.backend = Backend.NCCL;
    ShardrecException e = assertThrows(ShardrecException.class, () -> Comm.createMpi(0, nccl));
    assertEquals(ShardrecException.EINVAL, e.code());
    assertTrue(e.getMessage().contains("SHARDREC_BACKEND_MPI"), e.getMessage());

    Comm.Options cuda = new Comm.Options();
    cuda.backend = Backend.MPI;
    cuda.deviceType = DeviceType.CUDA;
    e = assertThrows(ShardrecException.class, () -> Comm.createMpi(0, cuda));
    assertEquals(ShardrecException.EUNSUPPORTED, e.code());
    assertTrue(e.getMessage().contains("host memory only"), e.getMessage());

    Comm.Options mpi = new Comm.Options();
    mpi.backend = Backend.MPI;
    byte[] id = Comm.createUniqueId();
    e = assertThrows(ShardrecException.class, () -> Comm.create(id, 1, 0, mpi));
    assertEquals(ShardrecException.EINVAL, e.code());
    assertTrue(e.getMessage().contains("shardrec_comm_create_mpi"), e.getMessage());
    assertEquals(Backend.MPI, Backend.of(3));
  }
}
