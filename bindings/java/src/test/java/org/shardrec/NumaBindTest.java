// Comm.bindLocalNuma reaches shardrec_comm_bind_local_numa: a one-rank local group gets node 0
// (node r * nodes / n with r = 0) on any host.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class NumaBindTest {
  @Test
  void firstLocalRankBindsToNodeZero() {
    Comm[] group = Comm.createLocalGroup(1, new Comm.Options().timeoutMs(10000));
    try {
      assertEquals(0, group[0].bindLocalNuma());
    } finally {
      group[0].close();
    }
  }
}
