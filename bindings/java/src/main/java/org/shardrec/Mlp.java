// A stack of linear layers with bias and activation on OpenBLAS (shardrec_mlp_*).
package org.shardrec;

import java.nio.FloatBuffer;
import org.shardrec.swig.Native;

/**
 * An MLP. Its tensors are, per layer l, "name.l.weight" [out, in] (row-major) then
 * "name.l.bias" [out]: tensors 2l and 2l+1. Initial values are identical on every rank that
 * creates it with the same widths, seed and name. One thread at a time, except {@link #infer}
 * and close() (from any thread, it waits for the calls in flight).
 */
public final class Mlp extends DenseLayer {
  private final long inFeatures;
  private final long outFeatures;
  private final DeviceType device;
  private long lastBatch = -1;

  /** Cannot fail once the handle is registered: a failing constructor would free it twice. */
  private Mlp(long handle, long inFeatures, long outFeatures, DeviceType device) {
    super(handle, Native::mlp_destroy);
    this.inFeatures = inFeatures;
    this.outFeatures = outFeatures;
    this.device = device;
  }

  /** Wraps a new handle, reading its dimensions first; frees it when that fails. */
  private static Mlp wrap(long handle) {
    long[] in = new long[1];
    long[] out = new long[1];
    int[] type = new int[1];
    int[] index = new int[1];
    try {
      Native.bind_mlp_dims(handle, in, out);
      Native.bind_mlp_device(handle, type, index);
    } catch (RuntimeException ex) {
      Native.mlp_destroy(handle);
      throw ex;
    }
    return new Mlp(handle, in[0], out[0], DeviceType.of(type[0]));
  }

  /**
   * Creates an MLP from {@code inFeatures} through {@code widths}. {@code activations} null means
   * ReLU on every layer but the last, which has none; otherwise one per layer. {@code name} null
   * or "" means "mlp".
   */
  public static Mlp create(long inFeatures, long[] widths, Activation[] activations, long seed,
                           String name) {
    return create(inFeatures, widths, activations, seed, name, DeviceType.HOST, 0, DenseMath.FP32);
  }

  /**
   * As {@link #create(long, long[], Activation[], long, String)} on {@code device} (CUDA:
   * ordinal {@code deviceIndex}, the default stream) with {@code math}. A CUDA MLP keeps its
   * tensors in device memory and runs through cuBLASLt; this binding passes host buffers only,
   * so {@link #forward} and {@link #backward} refuse it (use the C API with device pointers).
   * Without the CUDA plugin or a GPU, creating one throws ShardrecException ENODEVICE; TF32 and
   * BF16 on the host throw EINVAL.
   */
  public static Mlp create(long inFeatures, long[] widths, Activation[] activations, long seed,
                           String name, DeviceType device, int deviceIndex, DenseMath math) {
    int[] acts = null;
    if (activations != null) {
      if (widths == null || activations.length != widths.length) {
        throw ShardrecException.invalid("activations must have one entry per layer ("
                                           + (widths == null ? 0 : widths.length) + ")");
      }
      acts = new int[activations.length];
      for (int i = 0; i < acts.length; ++i) {
        acts[i] = ShardrecException.nonNull(activations[i], "activations[" + i + "]").code();
      }
    }
    long[] out = new long[1];
    Native.bind_mlp_create_on(out, inFeatures, widths, acts, seed, name,
                              ShardrecException.nonNull(device, "device").code(), deviceIndex,
                              ShardrecException.nonNull(math, "math").code());
    return wrap(out[0]);
  }

  public long inFeatures() {
    return inFeatures;
  }

  public long outFeatures() {
    return outFeatures;
  }

  /** Where the MLP's tensors live. */
  public DeviceType device() {
    return device;
  }

  private void requireHost(String what) {
    if (device != DeviceType.HOST) {
      throw new ShardrecException(ShardrecException.EUNSUPPORTED, what
          + " of a CUDA MLP needs device pointers, which the Java binding does not pass; use the "
          + "C API");
    }
  }

  /**
   * y[batch, out] from x[batch, in] (direct buffers, exactly those sizes from their positions).
   * The MLP keeps x for the next backward: do not change it until then.
   */
  public void forward(FloatBuffer x, long batch, FloatBuffer y) {
    requireHost("forward");
    if (batch < 0) throw ShardrecException.invalid("batch must be >= 0, got " + batch);
    FloatBuffer xs = Buffers.in(x, batch * inFeatures, "x");
    FloatBuffer ys = Buffers.out(y, batch * outFeatures, "y");
    use(h -> Native.mlp_forward(h, xs, batch, ys, batch * outFeatures));
    lastInput = xs;
    lastBatch = batch;
  }

  /**
   * y[batch, out] from x[batch, in] for serving (shardrec_mlp_infer): the values of
   * {@link #forward} bit for bit, keeping nothing for a backward. Unlike the other methods, any
   * number of threads may call infer on one MLP at once, each with its own y (close() waits for
   * them); no training call (forward, backward, an optimizer step) may run meanwhile: one seen
   * running throws ShardrecException EUSAGE. A CUDA MLP throws EUNSUPPORTED.
   */
  public void infer(FloatBuffer x, long batch, FloatBuffer y) {
    if (batch < 0) throw ShardrecException.invalid("batch must be >= 0, got " + batch);
    FloatBuffer xs = Buffers.in(x, batch * inFeatures, "x");
    FloatBuffer ys = Buffers.out(y, batch * outFeatures, "y");
    use(h -> Native.mlp_infer(h, xs, batch, ys, batch * outFeatures));
  }

  /**
   * Backward of the last forward: accumulates the parameter gradients from dy[batch, out] and
   * writes dx[batch, in] unless dx is null. With {@code ddp} not null, tensor i is marked ready
   * in the bucketer as tensor {@code firstTensor + i} as soon as its gradient is final (last
   * layer first), so its average overlaps the rest of the backward.
   */
  public void backward(FloatBuffer dy, FloatBuffer dx, Bucketer ddp, long firstTensor) {
    requireHost("backward");
    long batch = Math.max(lastBatch, 0);
    FloatBuffer dys = Buffers.in(dy, batch * outFeatures, "dy");
    FloatBuffer dxs = dx == null ? null : Buffers.out(dx, batch * inFeatures, "dx");
    use(h -> useOrNull(ddp, d -> Native.bind_mlp_backward(h, dys, dxs, d, firstTensor)));
  }

  /** {@link #backward(FloatBuffer, FloatBuffer, Bucketer, long)} without a bucketer. */
  public void backward(FloatBuffer dy, FloatBuffer dx) {
    backward(dy, dx, null, 0);
  }

  @Override
  public long numTensors() {
    long[] n = new long[1];
    use(h -> Native.mlp_num_tensors(h, n));
    return n[0];
  }

  @Override
  public void zeroGrad() {
    use(h -> Native.mlp_zero_grad(h));
  }

  @Override
  public void useBucketerGrads(Bucketer ddp, long firstTensor) {
    checkBucketer(ddp, firstTensor);
    use(h -> ddp.use(d -> Native.bind_mlp_use_ddp_grads(h, d, firstTensor)));
  }

  @Override
  void nativeTensorInfo(long index, String[] name, long[] count) {
    use(h -> Native.bind_mlp_tensor_info(h, index, name, count));
  }

  @Override
  void nativeCopy(long index, int which, FloatBuffer buf, boolean toTensor) {
    requireHost("copying a tensor");
    use(h -> Native.bind_mlp_copy_tensor(h, index, which, buf, toTensor ? 1 : 0));
  }

  @Override
  void nativeAddTo(long list) {
    use(h -> Native.bind_param_list_add_mlp(list, h));
  }

  @Override
  void nativeBindStorage(long index, FloatBuffer param, FloatBuffer grad) {
    requireHost("binding host storage");
    use(h -> Native.bind_mlp_bind_storage(h, index, param, grad));
  }
}
