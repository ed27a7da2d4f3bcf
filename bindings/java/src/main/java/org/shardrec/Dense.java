// Stateless dense functions: OpenBLAS threads, DLRM's dot interaction, sigmoid + BCE.
package org.shardrec;

import java.nio.FloatBuffer;
import org.shardrec.swig.Native;

/** Stateless dense-side calls of shardrec/dense.h. Thread-safe unless said otherwise. */
public final class Dense {
  private Dense() {}

  /**
   * Sets OpenBLAS's thread count, PROCESS-WIDE. With several ranks as threads of one process
   * use 1. Call it while no dense layer runs.
   */
  public static void setBlasThreads(int threads) {
    Native.dense_set_blas_threads(threads);
  }

  public static int blasThreads() {
    int[] out = new int[1];
    Native.bind_dense_blas_threads(out);
    return out[0];
  }

  /** Width of the dot interaction's output: dim + F (F + 1) / 2 with F = numSparse. */
  public static long dotInteractionWidth(long numSparse, long dim) {
    long[] out = new long[1];
    Native.dot_interaction_width(numSparse, dim, out);
    return out[0];
  }

  /**
   * out[batch, width] from dense[batch, dim] and emb[batch, numSparse * dim]: the dense vector,
   * then the pairwise dot products of the strictly lower triangle.
   */
  public static void dotInteractionForward(FloatBuffer dense, FloatBuffer emb, long batch,
                                           long numSparse, long dim, FloatBuffer out) {
    long width = dotInteractionWidth(numSparse, dim);
    checkBatch(batch, Math.max(width, numSparse * dim));
    Native.bind_dot_interaction_forward(
        Buffers.in(dense, batch * dim, "dense"), Buffers.in(emb, batch * numSparse * dim, "emb"),
        batch, numSparse, dim, Buffers.out(out, batch * width, "out"), batch * width);
  }

  /** Overwrites dDense[batch, dim] and dEmb[batch, numSparse * dim] from dout[batch, width]. */
  public static void dotInteractionBackward(FloatBuffer dense, FloatBuffer emb, FloatBuffer dout,
                                            long batch, long numSparse, long dim,
                                            FloatBuffer dDense, FloatBuffer dEmb) {
    long width = dotInteractionWidth(numSparse, dim);
    checkBatch(batch, Math.max(width, numSparse * dim));
    Native.dot_interaction_backward(
        Buffers.in(dense, batch * dim, "dense"), Buffers.in(emb, batch * numSparse * dim, "emb"),
        Buffers.in(dout, batch * width, "dout"), batch, numSparse, dim,
        Buffers.out(dDense, batch * dim, "dDense"),
        Buffers.out(dEmb, batch * numSparse * dim, "dEmb"));
  }

  /**
   * Sigmoid + binary cross-entropy on logits (labels 0 or 1): returns the summed loss divided by
   * {@code normalizer} and, when {@code dlogits} is not null, writes (sigmoid(z) - y) /
   * normalizer into it. In data-parallel training the normalizer is the LOCAL batch size.
   */
  public static double bceWithLogits(FloatBuffer logits, FloatBuffer labels, double normalizer,
                                     FloatBuffer dlogits) {
    if (logits == null) throw ShardrecException.invalid("logits must not be null");
    long n = logits.remaining();
    double[] loss = new double[1];
    Native.bce_with_logits(Buffers.in(logits, n, "logits"), Buffers.in(labels, n, "labels"), n,
                           normalizer, loss,
                           dlogits == null ? null : Buffers.out(dlogits, n, "dlogits"));
    return loss[0];
  }

  private static void checkBatch(long batch) {
    if (batch < 0) throw ShardrecException.invalid("batch must be >= 0, got " + batch);
  }

  // Also that batch x perSample floats are addressable, so the size checks do not wrap around
  // (a wrapped size let empty buffers through to a backward that takes no lengths).
  private static void checkBatch(long batch, long perSample) {
    checkBatch(batch);
    if (perSample > 0 && batch > Long.MAX_VALUE / 4 / perSample) {
      throw ShardrecException.invalid(
          "batch " + batch + " x " + perSample + " floats per sample overflows");
    }
  }
}
