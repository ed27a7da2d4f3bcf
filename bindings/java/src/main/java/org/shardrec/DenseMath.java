// Arithmetic of a dense layer on a GPU (SHARDREC_DENSE_MATH_*, shardrec/dense.h).
package org.shardrec;

/** Arithmetic of a dense layer on a GPU (SHARDREC_DENSE_MATH_*); the host is always FP32. */
public enum DenseMath {
  /** fp32 inputs, products and accumulation (the default). */
  FP32(0),
  /** fp32 storage; GEMM inputs rounded to tf32 by the tensor cores, fp32 accumulation. */
  TF32(1),
  /** GEMM inputs rounded to bf16, fp32 accumulation; parameters and gradients stay fp32. */
  BF16(2);

  private final int code;

  DenseMath(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static DenseMath of(int code) {
    for (DenseMath v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no DenseMath has code " + code);
  }
}
