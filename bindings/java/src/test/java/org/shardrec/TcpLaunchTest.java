// Comm.fromTcp reaches shardrec_comm_create_tcp: two ranks on threads meet at rank 0's address
// handed in code (rank 0 saying localhost) and sum over the new communicator; bad arguments are
// refused naming them.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class TcpLaunchTest {
  @Test
  void ranksMeetAtTheAddressGivenInCode() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    final int p = port;
    String[] addrs = {"localhost", "127.0.0.1"};
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      @SuppressWarnings("unchecked")
      Future<float[]>[] ranks = new Future[2];
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        ranks[r] = pool.submit(() -> {
          Comm.Options o = new Comm.Options().timeoutMs(20000);
          o.storeGraceMs = 2000;
          Comm comm = Comm.fromTcp(addrs[rank], p, rank, 2, o);
          try {
            FloatBuffer v = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder())
                .asFloatBuffer();
            v.put(0, rank + 1.0f);
            comm.allreduceSum(v);
            return new float[] {comm.rank(), comm.size(), comm.localSize(), v.get(0)};
          } finally {
            // Rank 0 hosts the store: it leaves last.
            if (rank == 0) Thread.sleep(200);
            comm.close();
          }
        });
      }
      for (int r = 0; r < 2; ++r) {
        float[] got = ranks[r].get();
        assertEquals(r, (int) got[0]);
        assertEquals(2, (int) got[1]);
        assertEquals(2, (int) got[2]);
        assertEquals(3.0f, got[3]);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void badArgumentsAreRefusedNamingThem() {
    Comm.Options o = new Comm.Options().timeoutMs(1000);
    Object[][] cases = {{"", 29500, 0, 1, "addr"}, {null, 29500, 0, 1, "addr"},
        {"127.0.0.1", 0, 0, 1, "port"}, {"127.0.0.1", 29500, 2, 2, "rank"},
        {"127.0.0.1", 29500, 0, 0, "world_size"}};
    for (Object[] c : cases) {
      ShardrecException e = assertThrows(ShardrecException.class,
          () -> Comm.fromTcp((String) c[0], (int) c[1], (int) c[2], (int) c[3], o));
      assertTrue(e.getMessage().contains((String) c[4]), e.toString());
    }
    IllegalArgumentException nul = assertThrows(IllegalArgumentException.class,
        () -> Comm.fromTcp("a\0b", 29500, 0, 1, o));
    assertTrue(nul.getMessage().contains("addr"), nul.toString());
  }
}
