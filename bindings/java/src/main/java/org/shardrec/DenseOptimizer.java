// Dense optimizers (SGD, Adagrad, Adam/AdamW) over the tensors of dense layers.
package org.shardrec;

import java.nio.FloatBuffer;
import org.shardrec.swig.Native;
import org.shardrec.swig.optimizer_config;

/**
 * A dense optimizer with the embedding optimizers' per-element rules: SGD, Adagrad, Adam (AdamW
 * with {@link WeightDecayMode#DECOUPLED}); row-wise types and LAMB are refused. State is kept
 * per tensor position: step over the same layers in the same order every time. One thread at
 * a time; close() from any thread waits for the call in flight.
 */
public final class DenseOptimizer extends NativeHandle {
  private DenseOptimizer(long handle) {
    super(handle, Native::dense_optimizer_destroy);
  }

  public static DenseOptimizer create(Config.Optimizer config) {
    if (config == null) throw ShardrecException.invalid("config must not be null");
    optimizer_config o = config.toNative();
    try {
      long[] out = new long[1];
      Native.dense_optimizer_create(out, o);
      return new DenseOptimizer(out[0]);
    } finally {
      o.delete();
    }
  }

  /** One step over every tensor of {@code layers}, in order (params updated from grads). */
  public void step(DenseLayer... layers) {
    if (layers == null) throw ShardrecException.invalid("layers must not be null");
    for (DenseLayer l : layers) {
      if (l == null) throw ShardrecException.invalid("layers must not contain null");
    }
    // The layers stay held (none closed) from their listing to the step that reads the list.
    use(h -> useAll(layers, () -> {
      long list = Native.bind_param_list_new();
      if (list == 0) throw new OutOfMemoryError("dense optimizer tensor list");
      try {
        for (DenseLayer l : layers) l.nativeAddTo(list);
        return Native.bind_dense_optimizer_step(h, list);
      } finally {
        Native.bind_param_list_free(list);
      }
    }));
  }

  public void setLearningRate(float learningRate) {
    use(h -> Native.dense_optimizer_set_learning_rate(h, learningRate));
  }

  /** Steps taken so far. */
  public long steps() {
    long[] out = new long[1];
    use(h -> Native.dense_optimizer_steps(h, out));
    return out[0];
  }

  public void setSteps(long steps) {
    use(h -> Native.dense_optimizer_set_steps(h, steps));
  }

  /** Which optimizer state of a tensor: momentum1 (Adagrad's sum, Adam's m) or momentum2. */
  public enum State {
    MOMENTUM1(0),
    MOMENTUM2(1);

    private final int code;

    State(int code) {
      this.code = code;
    }

    public int code() {
      return code;
    }
  }

  /**
   * Element count of {@code state} of tensor position {@code tensor} (the order of the tensors
   * that {@link #step} walks): 0 before the first step or when the type has no such state.
   */
  public long stateCount(long tensor, State state) {
    if (state == null) throw ShardrecException.invalid("state must not be null");
    long[] out = new long[1];
    use(h -> Native.bind_dense_optimizer_state_count(h, tensor, state.code(), out));
    return out[0];
  }

  /** A copy of {@code state} of tensor position {@code tensor} (empty when there is none). */
  public float[] state(long tensor, State state) {
    long n = stateCount(tensor, state);
    FloatBuffer buf = Buffers.floats(n);
    use(h -> Native.bind_dense_optimizer_state_copy(h, tensor, state.code(), buf, n, 0));
    float[] out = new float[(int) n];
    buf.get(out);
    return out;
  }

  /**
   * Overwrites {@code state} of tensor position {@code tensor} (restoring a checkpoint); the
   * state must exist (after the first step) and {@code values} must have its element count.
   */
  public void setState(long tensor, State state, float[] values) {
    long n = stateCount(tensor, state);
    if (values == null || values.length != n) {
      throw ShardrecException.invalid("values must have " + n + " elements (state "
                                         + state + " of tensor " + tensor + "), got "
                                         + (values == null ? "null" : values.length));
    }
    FloatBuffer v = Buffers.of(values);
    use(h -> Native.bind_dense_optimizer_state_copy(h, tensor, state.code(), v, n, 1));
  }
}
