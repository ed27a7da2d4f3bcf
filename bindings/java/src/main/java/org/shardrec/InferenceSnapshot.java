// One pinned version of an inference handle (shardrec_inference_pin): its embeddings and dense
// tensors stay unchanged until close(), whatever reloads happen meanwhile.
package org.shardrec;

import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import org.shardrec.swig.Native;

/**
 * A pinned snapshot of one version of an {@link Inference} handle. A request that runs the
 * embedding lookup and the dense layers pins once and reads both through the snapshot, so it
 * sees one version. It stays valid after reloads and after the handle is closed, and holds its
 * version's memory until closed: close it (try-with-resources) when the request is done.
 *
 * <p>Every method may be called from any number of threads at once; close() waits for the calls
 * running on other threads.
 */
public final class InferenceSnapshot extends NativeHandle {
  private final long outputDim;
  private final boolean sequence;

  /** Cannot fail once the handle is registered: a failing constructor would free it twice. */
  private InferenceSnapshot(long handle, long outputDim, boolean sequence) {
    super(handle, Native::inference_unpin);
    this.outputDim = outputDim;
    this.sequence = sequence;
  }

  static InferenceSnapshot wrap(long handle, long outputDim, boolean sequence) {
    InferenceSnapshot s = new InferenceSnapshot(handle, outputDim, sequence);
    s.describeAs("InferenceSnapshot (version " + s.version() + ")");
    return s;
  }

  /** The number of the pinned version. */
  public long version() {
    long[] out = new long[1];
    use(h -> Native.inference_snapshot_version(h, out));
    return out[0];
  }

  /** Floats of the lookup output of {@code batch}. */
  public long outputSize(Kjt batch) {
    return Inference.outputSize(batch, outputDim, sequence);
  }

  /** {@link Inference#lookup(Kjt, FloatBuffer)} on this version (zero-copy). */
  public void lookup(Kjt batch, FloatBuffer out) {
    FloatBuffer o = Buffers.out(out, outputSize(batch), "out");
    use(h -> Native.bind_inference_snapshot_lookup(h, batch.batchSize, batch.numFeatures,
                                                   batch.lengths, batch.values,
                                                   batch.weights, o));
  }

  /** {@link Inference#lookup(Kjt, float[])} on this version (the array is written in place). */
  public void lookup(Kjt batch, float[] out) {
    Inference.checkArray(out, outputSize(batch));
    long[] unused = new long[1];
    use(h -> Native.bind_inference_lookup_array(0, h, batch.batchSize, batch.numFeatures,
                                                batch.lengths, batch.values, batch.weights,
                                                out, unused));
  }

  /**
   * {@link Inference#lookupVbe(VbeKjt, FloatBuffer)} on this version; {@code out} holds exactly the
   * output (size it with the handle's {@link Inference#outputSizeVbe(VbeKjt)}; zero-copy).
   */
  public void lookupVbe(VbeKjt batch, FloatBuffer out) {
    if (batch == null) throw ShardrecException.invalid("batch must not be null");
    FloatBuffer o = Buffers.out(out, out == null ? 0 : out.remaining(), "out");
    use(h -> Native.bind_inference_snapshot_lookup_vbe(h, batch.batchSize, batch.numFeatures,
                                                       batch.lengths, batch.values,
                                                       batch.weights, batch.featureBatchSizes,
                                                       batch.inverseIndices, o));
  }

  /** The lookup output of {@code batch} on this version, in a new array. */
  public float[] lookup(Kjt batch) {
    float[] out = new float[Inference.checkedSize(outputSize(batch))];
    lookup(batch, out);
    return out;
  }

  /**
   * Dense tensor {@code name} of this version, zero-copy: a read-only native-order buffer over
   * the snapshot's memory. It is valid only while this snapshot is open: do not read it after
   * close() (the memory may be freed; the JVM cannot check this), and keep the snapshot
   * reachable while you use it. Throws ShardrecException ENOTFOUND for an unknown name.
   */
  public FloatBuffer denseTensor(String name) {
    long[] address = new long[1];
    long[] count = new long[1];
    use(h -> Native.inference_snapshot_dense_tensor(h, name, address, count));
    if (count[0] == 0) return FloatBuffer.allocate(0).asReadOnlyBuffer();
    return Native.bind_java_direct_floats(address[0], count[0])
        .order(ByteOrder.nativeOrder())
        .asFloatBuffer()
        .asReadOnlyBuffer();
  }

  /** A copy of dense tensor {@code name} of this version, usable after close(). */
  public float[] denseTensorCopy(String name) {
    return use(h -> {
      long[] address = new long[1];
      long[] count = new long[1];
      Native.inference_snapshot_dense_tensor(h, name, address, count);
      float[] out = new float[Inference.checkedSize(count[0])];
      if (count[0] > 0) {
        Native.bind_java_direct_floats(address[0], count[0])
            .order(ByteOrder.nativeOrder())
            .asFloatBuffer()
            .get(out);
      }
      return out;
    });
  }
}
