// The low-rank DCN-v2 cross network (shardrec_dcn_*).
package org.shardrec;

import java.nio.FloatBuffer;
import org.shardrec.swig.Native;

/**
 * A low-rank DCN-v2 cross network over inputs of {@code width}: x_{l+1} = x0 * (W_l (V_l x_l) +
 * b_l) + x_l. Tensors per layer: "name.l.V.weight", "name.l.W.weight", "name.l.W.bias". One
 * thread at a time, except {@link #infer} and close() (which waits for the calls in flight).
 */
public final class Dcn extends DenseLayer {
  private final long width;
  private long lastBatch = -1;

  private Dcn(long handle, long width) {
    super(handle, Native::dcn_destroy);
    this.width = width;
  }

  /** Creates a cross network; {@code name} null or "" means "cross". */
  public static Dcn create(long width, int numLayers, long rank, long seed, String name) {
    long[] out = new long[1];
    Native.dcn_create(out, width, numLayers, rank, seed, name);
    return new Dcn(out[0], width);
  }

  public long width() {
    return width;
  }

  /** y[batch, width] from x0[batch, width]; x0 is kept for the backward. */
  public void forward(FloatBuffer x0, long batch, FloatBuffer y) {
    if (batch < 0) throw ShardrecException.invalid("batch must be >= 0, got " + batch);
    FloatBuffer xs = Buffers.in(x0, batch * width, "x0");
    FloatBuffer ys = Buffers.out(y, batch * width, "y");
    use(h -> Native.dcn_forward(h, xs, batch, ys, batch * width));
    lastInput = xs;
    lastBatch = batch;
  }

  /**
   * y[batch, width] from x0[batch, width] for serving (shardrec_dcn_infer): {@link #forward}'s
   * values bit for bit, from any number of threads at once, with {@link Mlp#infer}'s rules.
   */
  public void infer(FloatBuffer x0, long batch, FloatBuffer y) {
    if (batch < 0) throw ShardrecException.invalid("batch must be >= 0, got " + batch);
    FloatBuffer xs = Buffers.in(x0, batch * width, "x0");
    FloatBuffer ys = Buffers.out(y, batch * width, "y");
    use(h -> Native.dcn_infer(h, xs, batch, ys, batch * width));
  }

  /** Backward of the last forward (dx0 required); ddp as in {@link Mlp#backward}. */
  public void backward(FloatBuffer dy, FloatBuffer dx0, Bucketer ddp, long firstTensor) {
    long n = Math.max(lastBatch, 0) * width;
    FloatBuffer dys = Buffers.in(dy, n, "dy");
    FloatBuffer dxs = Buffers.out(dx0, n, "dx0");
    use(h -> useOrNull(ddp, d -> Native.bind_dcn_backward(h, dys, dxs, d, firstTensor)));
  }

  public void backward(FloatBuffer dy, FloatBuffer dx0) {
    backward(dy, dx0, null, 0);
  }

  @Override
  public long numTensors() {
    long[] n = new long[1];
    use(h -> Native.dcn_num_tensors(h, n));
    return n[0];
  }

  @Override
  public void zeroGrad() {
    use(h -> Native.dcn_zero_grad(h));
  }

  @Override
  public void useBucketerGrads(Bucketer ddp, long firstTensor) {
    checkBucketer(ddp, firstTensor);
    use(h -> ddp.use(d -> Native.bind_dcn_use_ddp_grads(h, d, firstTensor)));
  }

  @Override
  void nativeTensorInfo(long index, String[] name, long[] count) {
    use(h -> Native.bind_dcn_tensor_info(h, index, name, count));
  }

  @Override
  void nativeCopy(long index, int which, FloatBuffer buf, boolean toTensor) {
    use(h -> Native.bind_dcn_copy_tensor(h, index, which, buf, toTensor ? 1 : 0));
  }

  @Override
  void nativeAddTo(long list) {
    use(h -> Native.bind_param_list_add_dcn(list, h));
  }

  @Override
  void nativeBindStorage(long index, FloatBuffer param, FloatBuffer grad) {
    use(h -> Native.bind_dcn_bind_storage(h, index, param, grad));
  }
}
