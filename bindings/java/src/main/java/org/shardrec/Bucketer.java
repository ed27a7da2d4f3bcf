// DDP-style gradient bucketing over a communicator (shardrec_ddp_*).
package org.shardrec;

import org.shardrec.swig.Native;

/**
 * A gradient bucketer (shardrec/ddp.h): the registered gradients are grouped into buckets
 * (reverse registration order, first bucket ~1 MiB, then ~25 MiB); each bucket's average over
 * the group starts on a communication thread as soon as all its gradients are marked ready, and
 * {@link #finish()} waits for all of them. Create, markReady, finish and close are collective:
 * every rank registers the same counts and marks the same gradients each step. Gradients live
 * in bucket storage: bind the layers to it with {@link DenseLayer#useBucketerGrads} before every
 * step. One thread at a time; close() from any thread waits for the call in flight.
 */
public final class Bucketer extends NativeHandle {
  /** Gradient compression (SHARDREC_DDP_COMPRESSION_*). */
  public enum Compression {
    /** fp32 averages: the exact rank-ordered mean. */
    NONE(0),
    /** bfloat16 on the wire: half the bytes, error bounded as documented in ddp.h. */
    BF16(1);

    private final int code;

    Compression(int code) {
      this.code = code;
    }

    public int code() {
      return code;
    }
  }

  /** Options; zero fields take the C defaults (1 MiB first bucket, 25 MiB others). */
  public static final class Options {
    public long firstBucketBytes;
    public long bucketCapBytes;
    public Compression compression = Compression.NONE;

    public Options firstBucketBytes(long v) {
      firstBucketBytes = v;
      return this;
    }

    public Options bucketCapBytes(long v) {
      bucketCapBytes = v;
      return this;
    }

    public Options compression(Compression v) {
      compression = ShardrecException.nonNull(v, "compression");
      return this;
    }
  }

  /** Counters of a bucketer. */
  public static final class Stats {
    /** Synced steps finished. */
    public final long steps;
    /** Current number of buckets. */
    public final long buckets;
    /** Seconds the communication thread spent averaging, all steps. */
    public final double commSeconds;
    /** Seconds finish() waited for communication, all steps. */
    public final double exposedSeconds;
    /** Gradient bytes exchanged per synced step. */
    public final long bytesReduced;

    Stats(long steps, long buckets, double commSeconds, double exposedSeconds, long bytesReduced) {
      this.steps = steps;
      this.buckets = buckets;
      this.commSeconds = commSeconds;
      this.exposedSeconds = exposedSeconds;
      this.bytesReduced = bytesReduced;
    }
  }

  private final long[] counts;
  /** External gradient buffers, referenced so they outlive the native bucketer's use. */
  private final java.nio.FloatBuffer[] external;

  private Bucketer(long handle, long[] counts) {
    super(handle, Native::ddp_destroy);
    this.counts = counts;
    this.external = new java.nio.FloatBuffer[counts.length];
  }

  /** Number of registered gradients. */
  public int numTensors() {
    return counts.length;
  }

  /** Element count of gradient {@code index}. */
  public long count(long index) {
    if (index < 0 || index >= counts.length) {
      throw ShardrecException.invalid(
          "gradient " + index + " out of range (" + counts.length + " registered)");
    }
    return counts[(int) index];
  }

  /** Collective over {@code comm}; {@code counts} are the gradients' element counts. */
  public static Bucketer create(Comm comm, long[] counts, Options options) {
    Options o = options == null ? new Options() : options;
    long[] out = new long[1];
    if (counts == null || o.compression == null) {
      // Creation is collective: this rank still meets its peers' agreement, with a compression
      // code C refuses on every rank together (else the peers wait out their timeout).
      try {
        use(comm, "comm", c -> Native.bind_ddp_create(out, c, null, o.firstBucketBytes,
                                                      o.bucketCapBytes, -1));
      } catch (ShardrecException expected) {
        // C's refusal; this rank's reason is the one to report.
      }
      throw ShardrecException.invalid(
          (counts == null ? "counts" : "compression") + " must not be null");
    }
    use(comm, "comm", c -> Native.bind_ddp_create(out, c, counts, o.firstBucketBytes,
                                                  o.bucketCapBytes, o.compression.code()));
    return new Bucketer(out[0], counts.clone());
  }

  /**
   * Gradient {@code index} lives in {@code grad} (a direct FloatBuffer of exactly count(index)
   * floats at position 0) instead of bucket storage: the bucket copies it in and out around
   * each exchange, so after {@link #finish()} it holds the group average. Use when the caller
   * owns its gradients. The bucketer keeps a reference to the buffer until it is closed.
   */
  public void setExternal(long index, java.nio.FloatBuffer grad) {
    long n = count(index);
    Buffers.checkKind(grad, grad == null ? null : grad.order(), "grad", true);
    if (grad.position() != 0 || grad.capacity() != n) {
      throw ShardrecException.invalid("grad must be a direct FloatBuffer of exactly " + n
                                         + " floats at position 0 (gradient " + index + ")");
    }
    use(h -> Native.bind_ddp_set_external(h, index, grad));
    external[(int) index] = grad;
  }

  /** Zeroes every gradient. */
  public void zeroGrad() {
    use(h -> Native.ddp_zero_grad(h));
  }

  /** Gradient {@code index} is final for this step; launches every bucket now complete. */
  public void markReady(long index) {
    use(h -> Native.ddp_mark_ready(h, index));
  }

  /**
   * Waits for every bucket: the gradients then hold the group average. A gradient some rank
   * never marked ready (with sync on) fails the step on every rank with code SHARDREC_EUSAGE;
   * that step's gradients must not be applied on any rank.
   */
  public void finish() {
    use(h -> Native.ddp_finish(h));
  }

  /** no_sync: with false, the following steps only accumulate locally (same step on every rank). */
  public void setSync(boolean enabled) {
    use(h -> Native.ddp_set_sync(h, enabled ? 1 : 0));
  }

  public Stats stats() {
    long[] steps = new long[1];
    long[] buckets = new long[1];
    double[] comm = new double[1];
    double[] exposed = new double[1];
    long[] bytes = new long[1];
    use(h -> Native.bind_ddp_stats(h, steps, buckets, comm, exposed, bytes));
    return new Stats(steps[0], buckets[0], comm[0], exposed[0], bytes[0]);
  }

  /** Tensor indices of bucket {@code bucket}, in launch order. */
  public long[] bucket(long bucket) {
    return use(h -> {
      long[] size = new long[1];
      Native.bind_ddp_bucket_size(h, bucket, size);
      long[] out = new long[(int) size[0]];
      long[] one = new long[1];
      for (int i = 0; i < out.length; ++i) {
        Native.bind_ddp_bucket_tensor(h, bucket, i, one);
        out[i] = one[0];
      }
      return out;
    });
  }
}
