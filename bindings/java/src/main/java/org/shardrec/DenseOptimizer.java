// Dense optimizers (SGD, Adagrad, Adam/AdamW) over the tensors of dense layers.
package org.shardrec;

import org.shardrec.swig.Native;
import org.shardrec.swig.optimizer_config;

/**
 * A dense optimizer with the embedding optimizers' per-element rules: SGD, Adagrad, Adam (AdamW
 * with {@link WeightDecayMode#DECOUPLED}); row-wise types and LAMB are refused. State is kept
 * per tensor position: step over the same layers in the same order every time. One thread at
 * a time.
 */
public final class DenseOptimizer extends NativeHandle {
  private DenseOptimizer(long handle) {
    super(handle);
  }

  @Override
  void destroy(long handle) {
    Native.dense_optimizer_destroy(handle);
  }

  public static DenseOptimizer create(Config.Optimizer config) {
    if (config == null) throw new IllegalArgumentException("config must not be null");
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
    long list = Native.bind_param_list_new();
    if (list == 0) throw new OutOfMemoryError("dense optimizer tensor list");
    try {
      for (DenseLayer l : layers) {
        if (l == null) throw new IllegalArgumentException("layers must not contain null");
        l.nativeAddTo(list);
      }
      Native.bind_dense_optimizer_step(handle(), list);
    } finally {
      Native.bind_param_list_free(list);
    }
  }

  public void setLearningRate(float learningRate) {
    Native.dense_optimizer_set_learning_rate(handle(), learningRate);
  }

  /** Steps taken so far. */
  public long steps() {
    long[] out = new long[1];
    Native.dense_optimizer_steps(handle(), out);
    return out[0];
  }

  public void setSteps(long steps) {
    Native.dense_optimizer_set_steps(handle(), steps);
  }
}
