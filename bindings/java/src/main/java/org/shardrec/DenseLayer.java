// Shared part of the dense layers (Mlp, Dcn): flat parameter tensors and gradient binding.
package org.shardrec;

import java.nio.FloatBuffer;

/**
 * A dense layer with flat parameter tensors (shardrec_dense_param_t): tensor i has a name, an
 * element count, parameters and gradients. Backward ACCUMULATES into the gradients; clear them
 * with {@link #zeroGrad()} or {@link Bucketer#zeroGrad()}. One thread at a time; close() from any
 * thread waits for the call in flight.
 */
public abstract class DenseLayer extends NativeHandle {
  /** The input of the last forward: the backward reads it again, so it stays reachable. */
  FloatBuffer lastInput;

  DenseLayer(long handle, java.util.function.LongConsumer destroy) {
    super(handle, destroy);
  }

  abstract void nativeTensorInfo(long index, String[] name, long[] count);

  abstract void nativeCopy(long index, int which, FloatBuffer buf, boolean toTensor);

  abstract void nativeAddTo(long list);

  abstract void nativeBindStorage(long index, FloatBuffer param, FloatBuffer grad);

  /** Caller storage bound with bindTensor, referenced so it outlives the native layer's use. */
  private final java.util.Map<Long, FloatBuffer[]> storage = new java.util.HashMap<>();

  /**
   * Points tensor {@code index} at caller storage: {@code param} (its current values are used
   * as they are, nothing is copied) and/or {@code grad} (null keeps that side). Each is a
   * direct, writable FloatBuffer in native order of exactly tensorCount(index) floats at
   * position 0. The layer keeps a reference until it is closed or the side is rebound; a later
   * {@link #useBucketerGrads} takes over the gradients. Use it to keep several layers'
   * parameters in one flat buffer (slices), or to read gradients without copies.
   */
  public void bindTensor(long index, FloatBuffer param, FloatBuffer grad) {
    long n = tensorCount(index);
    for (FloatBuffer b : new FloatBuffer[] {param, grad}) {
      if (b == null) continue;
      String what = b == param ? "param" : "grad";
      Buffers.checkKind(b, b.order(), what, true);
      if (b.position() != 0 || b.capacity() != n) {
        throw ShardrecException.invalid(what + " must hold exactly " + n
                                           + " floats at position 0 (tensor " + index + ")");
      }
    }
    nativeBindStorage(index, param, grad);
    FloatBuffer[] kept = storage.computeIfAbsent(index, k -> new FloatBuffer[2]);
    if (param != null) kept[0] = param;
    if (grad != null) kept[1] = grad;
  }

  /** Number of parameter tensors. */
  public abstract long numTensors();

  /** Sets every gradient to zero. */
  public abstract void zeroGrad();

  /**
   * Points every tensor i's gradient at the bucketer's tensor {@code firstTensor + i}, so the
   * backward writes into the bucket that averages it (no copies). The bucket storage moves once,
   * after the first synced step: call this before every step.
   */
  public abstract void useBucketerGrads(Bucketer ddp, long firstTensor);

  /** Checks that tensor i has the element count of the bucketer's gradient first + i. */
  void checkBucketer(Bucketer ddp, long firstTensor) {
    if (ddp == null) throw ShardrecException.invalid("ddp must not be null");
    for (long i = 0; i < numTensors(); ++i) {
      long want = tensorCount(i);
      long have = ddp.count(firstTensor + i);
      if (have != want) {
        throw ShardrecException.invalid("tensor " + i + " (" + tensorName(i) + ") has " + want
                                           + " elements, bucketer gradient " + (firstTensor + i)
                                           + " has " + have);
      }
    }
  }

  /** Name of tensor {@code index}, e.g. "bottom.0.weight". */
  public String tensorName(long index) {
    String[] name = new String[1];
    nativeTensorInfo(index, name, new long[1]);
    return name[0];
  }

  /** Element count of tensor {@code index}. */
  public long tensorCount(long index) {
    long[] count = new long[1];
    nativeTensorInfo(index, new String[1], count);
    return count[0];
  }

  /** A copy of tensor {@code index}'s parameters. */
  public float[] getParam(long index) {
    return read(index, 0);
  }

  /** A copy of tensor {@code index}'s gradients. */
  public float[] getGrad(long index) {
    return read(index, 1);
  }

  /** Overwrites tensor {@code index}'s parameters (exactly its element count). */
  public void setParam(long index, float[] values) {
    long n = tensorCount(index);
    if (values == null || values.length != n) {
      throw ShardrecException.invalid(
          "tensor " + index + " has " + n + " elements, got "
          + (values == null ? "null" : String.valueOf(values.length)));
    }
    nativeCopy(index, 0, Buffers.of(values), true);
  }

  private float[] read(long index, int which) {
    FloatBuffer buf = Buffers.floats(tensorCount(index));
    nativeCopy(index, which, buf, false);
    float[] out = new float[buf.capacity()];
    buf.get(out);
    return out;
  }
}
