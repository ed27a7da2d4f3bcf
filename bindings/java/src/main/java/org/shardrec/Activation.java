// Activation of a linear layer (SHARDREC_ACTIVATION_*, shardrec/dense.h).
package org.shardrec;

/** Activation of a linear layer (SHARDREC_ACTIVATION_*, shardrec/dense.h). */
public enum Activation {
  /** y = x W^T + b. */
  NONE(0),
  /** y = max(0, x W^T + b). */
  RELU(1),
  /** y = 1 / (1 + exp(-(x W^T + b))). */
  SIGMOID(2);

  private final int code;

  Activation(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }
}
