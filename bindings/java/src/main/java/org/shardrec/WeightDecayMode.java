// How weight decay enters the update (SHARDREC_WEIGHT_DECAY_*, shardrec/config.h).
package org.shardrec;

/** How weight decay enters the update (SHARDREC_WEIGHT_DECAY_*, shardrec/config.h). */
public enum WeightDecayMode {
  /** No weight decay. */
  NONE(0),
  /** g += weight_decay * w before the update rule. */
  L2(1),
  /** AdamW-style, apart from the rule. */
  DECOUPLED(2);

  private final int code;

  WeightDecayMode(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static WeightDecayMode of(int code) {
    for (WeightDecayMode v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no WeightDecayMode has code " + code);
  }
}
