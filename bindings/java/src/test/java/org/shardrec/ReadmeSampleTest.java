// Runs the Java sample of docs/bindings.md (the marked region of examples/java/TrainSharded.java).
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.shardrec.examples.TrainSharded;

class ReadmeSampleTest {
  @Test
  void readmeSampleTrainsAndReportsAFiniteLoss() {
    double loss = TrainSharded.readmeSample();
    assertTrue(Double.isFinite(loss) && loss > 0, "loss " + loss);
  }
}
