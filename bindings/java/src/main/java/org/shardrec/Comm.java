// Communicator: local groups (ranks as threads), unique-id rendezvous, splits and the dense
// collectives, over direct NIO buffers.
package org.shardrec;

import java.nio.Buffer;
import java.nio.FloatBuffer;
import org.shardrec.swig.Native;
import org.shardrec.swig.comm_options;

/**
 * A libshardrec communicator. One thread at a time; {@link #abort()} and {@link #close()} from
 * any thread. close() waits for a call running on another thread, and a collective blocked on a
 * peer runs until the timeout: to end it at once, abort() first (close() then waits only for the
 * aborted call to throw EABORTED).
 */
public final class Comm extends NativeHandle {
  // Deprecated aliases of the earlier docs' constants (see the top of Config).
  /** @deprecated Use {@link ReduceOp#SUM}. */
  @Deprecated
  public static final ReduceOp REDUCE_SUM = ReduceOp.SUM;

  /** @deprecated Use {@link ReduceOp#AVG}. */
  @Deprecated
  public static final ReduceOp REDUCE_AVG = ReduceOp.AVG;

  /** @deprecated Use {@link ReduceOp#MAX}. */
  @Deprecated
  public static final ReduceOp REDUCE_MAX = ReduceOp.MAX;

  /** @deprecated Use {@link ReduceOp#MIN}. */
  @Deprecated
  public static final ReduceOp REDUCE_MIN = ReduceOp.MIN;
  Comm(long handle) {
    super(handle, Native::comm_destroy);
    // Computed now: the leak warning must need neither the wrapper nor a live handle.
    try {
      describeAs("Comm (rank " + rank() + " of " + size() + ")");
    } catch (RuntimeException e) {
      describeAs("Comm");
    }
  }

  /** Options of a communicator; zero fields mean the library defaults. */
  public static final class Options {
    public long timeoutMs;
    public Backend backend = Backend.AUTO;
    public DeviceType deviceType = DeviceType.HOST;
    public int deviceIndex;
    public String bindAddress;
    /** How long closing rank 0 waits for the others to leave its store, ms (0: 2000). */
    public long storeGraceMs;

    public Options timeoutMs(long v) {
      timeoutMs = v;
      return this;
    }

    comm_options toNative() {
      ShardrecException.nonNull(backend, "backend");
      ShardrecException.nonNull(deviceType, "deviceType");
      comm_options o = new comm_options();
      Native.comm_options_init(o, NativeConstants.COMM_OPTIONS_VERSION);
      o.setTimeout_ms(timeoutMs);
      o.setBackend(backend.code());
      o.setDevice_type(deviceType.code());
      o.setDevice_index(deviceIndex);
      o.setStore_grace_ms(storeGraceMs);
      if (bindAddress != null) {
        // C would read the address up to the NUL (and use it): refused like every other String.
        int nul = bindAddress.indexOf('\0');
        if (nul >= 0) {
          o.delete();
          throw ShardrecException.invalid("bindAddress " + bindAddress.replace("\0", "\\0")
              + ": a NUL character at char " + nul + " would cut the string short in C");
        }
        o.setBind_address(bindAddress);
      }
      return o;
    }
  }

  /** The largest group {@link #localGroup} makes (C's SHARDREC_LOCAL_GROUP_MAX). */
  public static final int LOCAL_GROUP_MAX = NativeConstants.LOCAL_GROUP_MAX;

  /**
   * The n communicators of one in-process group, n in [1, {@link #LOCAL_GROUP_MAX}], as a
   * {@link LocalGroup} that closes them all (try-with-resources); rank i is {@code get(i)} (drive
   * each from a thread).
   */
  public static LocalGroup localGroup(int n, Options options) {
    // Outside the range, refused here with the size given and before n pointers are allocated
    // (Integer.MAX_VALUE would have thrown OutOfMemoryError).
    if (n < 1 || n > LOCAL_GROUP_MAX) {
      throw new ShardrecException(ShardrecException.EINVAL,
          "local group size " + n + " must be in [1, " + LOCAL_GROUP_MAX + "]");
    }
    long[] raw = new long[n];
    comm_options o = (options == null ? new Options() : options).toNative();
    try {
      Native.comm_create_local_group(raw, o);
    } finally {
      o.delete();
    }
    Comm[] out = new Comm[raw.length];
    for (int i = 0; i < raw.length; ++i) out[i] = new Comm(raw[i]);
    return new LocalGroup(out);
  }

  /** {@link #localGroup(int, Options)} with default options. */
  public static LocalGroup localGroup(int n) {
    return localGroup(n, null);
  }

  /**
   * n communicators of one in-process group; element i is rank i.
   *
   * @deprecated An array cannot be closed by try-with-resources: use {@link #localGroup(int,
   *     Options)}, whose {@link LocalGroup} closes every communicator ({@code toArray()} gives
   *     this array). Kept for one minor release.
   */
  @Deprecated
  public static Comm[] createLocalGroup(int n, Options options) {
    return localGroup(n, options).toArray();
  }

  /**
   * n communicators of one in-process group with default options.
   *
   * @deprecated Use {@link #localGroup(int)}.
   */
  @Deprecated
  public static Comm[] createLocalGroup(int n) {
    return localGroup(n, null).toArray();
  }

  /** A new rendezvous id (rank 0); ship its 128 bytes to every rank. */
  public static byte[] createUniqueId() {
    byte[] id = new byte[NativeConstants.UNIQUE_ID_BYTES];
    Native.comm_unique_id_create(id);
    return id;
  }

  /**
   * Joins the group its launcher (torchrun, mpirun, srun) placed this process in, from the
   * launcher's environment variables (collective; see shardrec_comm_create_from_env).
   */
  public static Comm fromEnv(Options options) {
    long[] out = new long[1];
    comm_options o = (options == null ? new Options() : options).toNative();
    try {
      Native.comm_create_from_env(out, o);
    } finally {
      o.delete();
    }
    return new Comm(out[0]);
  }

  /**
   * Joins the group whose rank 0 hosts the rendezvous store at {@code addr}:{@code port}, as
   * {@code rank} of {@code worldSize}, for hosts that hand rank 0's address in code such as Ray
   * Train (collective; see shardrec_comm_create_tcp). Only SHARDREC_RENDEZVOUS_TOKEN is read from
   * the environment. An {@code addr} holding a NUL character is refused with
   * IllegalArgumentException; a null or empty one, or a bad port, rank or size, by C
   * (ShardrecException, SHARDREC_EINVAL, naming the argument).
   */
  public static Comm fromTcp(String addr, int port, int rank, int worldSize, Options options) {
    if (addr != null && addr.indexOf('\0') >= 0) {
      throw new IllegalArgumentException("addr " + addr.replace("\0", "\\0")
          + ": a NUL character at char " + addr.indexOf('\0') + " would cut the string short in C");
    }
    long[] out = new long[1];
    comm_options o = (options == null ? new Options() : options).toNative();
    try {
      Native.comm_create_tcp(out, addr, port, rank, worldSize, o);
    } finally {
      o.delete();
    }
    return new Comm(out[0]);
  }

  /** Joins the group named by {@code id} as {@code rank} of {@code worldSize} (collective). */
  public static Comm create(byte[] id, int worldSize, int rank, Options options) {
    long[] out = new long[1];
    comm_options o = (options == null ? new Options() : options).toNative();
    try {
      Native.comm_create(out, id, worldSize, rank, o);
    } finally {
      o.delete();
    }
    return new Comm(out[0]);
  }

  /**
   * A communicator over an MPI communicator (collective over its members): {@code
   * mpiCommFortran} is its Fortran handle ({@code MPI_Comm_c2f}), or 0 for MPI_COMM_WORLD. MPI is
   * initialised by the library when the program has not; see shardrec_comm_create_mpi in
   * shardrec/comm.h for the thread level, timeouts and finalisation. Throws with code
   * EUNSUPPORTED when the MPI plugin (libshardrec_mpi.so) is not available.
   */
  public static Comm createMpi(long mpiCommFortran, Options options) {
    long[] out = new long[1];
    comm_options o = (options == null ? new Options() : options).toNative();
    try {
      Native.comm_create_mpi(out, mpiCommFortran, o);
    } finally {
      o.delete();
    }
    return new Comm(out[0]);
  }

  /**
   * Joins a group of {@code worldSize} ranks as {@code rank} through {@code store} (collective,
   * blocking): every rank passes a store that reaches the same keys.
   */
  public static Comm create(Store store, int worldSize, int rank, Options options) {
    if (store == null) throw ShardrecException.invalid("store must not be null");
    CheckedStore checked = new CheckedStore(store);
    long[] out = new long[1];
    comm_options o = (options == null ? new Options() : options).toNative();
    try {
      Native.bind_comm_create_with_java_store(out, checked, worldSize, rank, o);
    } catch (ShardrecException e) {
      throw checked.explain(e);
    } finally {
      o.delete();
    }
    return new Comm(out[0]);
  }

  /**
   * The store the library calls: the caller's, except that a get returning null well before its
   * timeout (a store that does not wait, or an interrupted thread) throws, naming the key and the
   * time waited, instead of passing for a timeout; the library then reports the store's code.
   */
  private static final class CheckedStore implements Store {
    private final Store store;
    /** The first early null, to explain the failure of the create it broke. */
    private volatile ShardrecException early;

    CheckedStore(Store store) {
      this.store = store;
    }

    @Override
    public void set(String key, byte[] value) {
      store.set(key, value);
    }

    @Override
    public byte[] get(String key, long timeoutMs) {
      long start = System.nanoTime();
      byte[] value = store.get(key, timeoutMs);
      long waitedMs = (System.nanoTime() - start) / 1_000_000;
      // A timeout: the library says so. The slack allows for a store that counts its own
      // deadline on another clock.
      if (value != null || waitedMs + 10 + timeoutMs / 10 >= timeoutMs) return value;
      boolean interrupted = Thread.currentThread().isInterrupted();
      ShardrecException e = new ShardrecException(
          interrupted ? ShardrecException.ERROR : ShardrecException.ENOTFOUND,
          "Store.get(\"" + key + "\", " + timeoutMs + ") returned null after " + waitedMs
              + " ms, before its timeout"
              + (interrupted ? " (the thread is interrupted)"
                             : ": get must wait up to the timeout for the key to appear"));
      if (early == null) early = e;
      throw e;
    }

    /** {@code failed} with the early null that caused it, if any, in its message. */
    ShardrecException explain(ShardrecException failed) {
      ShardrecException why = early;
      if (why == null) return failed;
      String text = failed.getMessage();
      String prefix = failed.codeName() + ": ";
      if (text.startsWith(prefix)) text = text.substring(prefix.length());
      ShardrecException e =
          new ShardrecException(failed.code(), text + " (" + why.getMessage() + ")");
      e.initCause(why);
      return e;
    }
  }

  public int rank() {
    int[] out = new int[1];
    use(h -> Native.comm_rank(out, h));
    return out[0];
  }

  public int size() {
    int[] out = new int[1];
    use(h -> Native.comm_size(out, h));
    return out[0];
  }

  /** This rank's index among the ranks on its host. */
  public int localRank() {
    int[] out = new int[1];
    use(h -> Native.comm_local_rank(out, h));
    return out[0];
  }

  /** The number of ranks on this host. */
  public int localSize() {
    int[] out = new int[1];
    use(h -> Native.comm_local_size(out, h));
    return out[0];
  }

  /**
   * Pins this process to NUMA node localRank() * nodes / localSize()'s CPUs and returns the node
   * (shardrec_comm_bind_local_numa: per process, hwloc's node order; UNSUPPORTED without hwloc).
   */
  public int bindLocalNuma() {
    int[] out = new int[1];
    use(h -> Native.comm_bind_local_numa(out, h));
    return out[0];
  }

  /** Collective split; returns null for a negative color. */
  public Comm split(int color, int key) {
    long[] out = new long[1];
    use(h -> Native.comm_split(out, h, color, key));
    return out[0] == 0 ? null : new Comm(out[0]);
  }

  public void setTimeout(long timeoutMs) {
    use(h -> Native.comm_set_timeout(h, timeoutMs));
  }

  /**
   * Tears down the connections of this communicator and of every one split from it, from any
   * thread: blocked and later calls throw EABORTED, peers EREMOTE.
   */
  public void abort() {
    // Not through use(): it must not wait behind the blocked call it ends (nor behind a close()
    // waiting for that call); a close() waits until the abort is done.
    withConcurrentUse(Native::comm_abort);
  }

  /** Throws the error that poisoned this communicator, if any. */
  public void checkAsyncError() {
    use(h -> Native.comm_async_error(h));
  }

  public void barrier() {
    use(h -> Native.comm_barrier(h));
  }

  /**
   * recv = op over ranks of send; {@code count} elements of {@code dtype}. Arguments refused here
   * (ShardrecException) still take part in C's agreement, so the other ranks fail at once
   * naming this one (as for the other raw collectives).
   */
  public void allreduce(Buffer send, Buffer recv, long count, DType dtype, ReduceOp op) {
    try {
      checkDirect(send, "send");
      checkDirect(recv, "recv");
      checkBytes(send, count, dtype, 1, "send");
      checkBytes(recv, count, dtype, 1, "recv");
      if (op == null) throw ShardrecException.invalid("op must not be null");
    } catch (ShardrecException refused) {
      throw joinRefused(refused, h -> Native.comm_allreduce(h, null, null, 1,
                                                             DType.FLOAT32.code(),
                                                             ReduceOp.SUM.code()));
    }
    use(h -> Native.comm_allreduce(h, send, recv, count, dtype.code(), op.code()));
  }

  /** In place: {@code buf} becomes the element-wise sum over ranks (float buffer). */
  public void allreduceSum(FloatBuffer buf) {
    allreduce(buf, buf, buf == null ? 0 : buf.capacity(), DType.FLOAT32, ReduceOp.SUM);
  }

  /** {@code count} elements of {@code buf} on rank {@code root} are copied to every rank. */
  public void broadcast(Buffer buf, long count, DType dtype, int root) {
    try {
      checkDirect(buf, "buf");
      checkBytes(buf, count, dtype, 1, "buf");
    } catch (ShardrecException refused) {
      throw joinRefused(refused,
                        h -> Native.comm_broadcast(h, null, 1, DType.FLOAT32.code(), 0));
    }
    use(h -> Native.comm_broadcast(h, buf, count, dtype.code(), root));
  }

  /**
   * Every rank contributes {@code count} elements of {@code send}; {@code recv} (size() x
   * count elements) receives rank r's block at element r x count. Not in place.
   */
  public void allgather(Buffer send, Buffer recv, long count, DType dtype) {
    try {
      checkDirect(send, "send");
      checkDirect(recv, "recv");
      checkBytes(send, count, dtype, 1, "send");
      checkBytes(recv, count, dtype, size(), "recv");
    } catch (ShardrecException refused) {
      throw joinRefused(refused,
                        h -> Native.comm_allgather(h, null, null, 1, DType.FLOAT32.code()));
    }
    use(h -> Native.comm_allgather(h, send, recv, count, dtype.code()));
  }

  /**
   * A raw collective refused here still meets its peers: `refusedCall` is the same collective
   * with NULL buffers, which C refuses inside its agreement, so every other rank fails at once
   * instead of waiting out its timeout. Returns `why` (this rank's reason) to throw.
   */
  private ShardrecException joinRefused(ShardrecException why,
                                               HandleCall<?> refusedCall) {
    try {
      use(refusedCall);
    } catch (ShardrecException expected) {
      // C's refusal (or a closed communicator); this rank's reason is the one to report.
    }
    return why;
  }

  /** The buffer must hold at least {@code blocks x count} elements of {@code dtype}. */
  private static void checkBytes(Buffer b, long count, DType dtype, long blocks, String what) {
    if (count < 0) throw ShardrecException.invalid("count must be >= 0, got " + count);
    if (dtype == null) throw ShardrecException.invalid("dtype must not be null");
    long elem;
    if (b instanceof java.nio.ByteBuffer) {
      elem = 1;
    } else if (b instanceof java.nio.ShortBuffer || b instanceof java.nio.CharBuffer) {
      elem = 2;
    } else if (b instanceof java.nio.IntBuffer || b instanceof FloatBuffer) {
      elem = 4;
    } else {
      elem = 8;
    }
    long have = b.capacity() * elem;
    if (count > Long.MAX_VALUE / blocks / dtype.size()) {
      throw ShardrecException.invalid("count " + count + " is too large: " + blocks + " x "
                                         + count + " " + dtype + " elements are more than "
                                         + Long.MAX_VALUE + " bytes (" + what + " holds " + have
                                         + ")");
    }
    long need = count * blocks * dtype.size();
    if (have < need) {
      throw ShardrecException.invalid(what + " holds " + have + " bytes but " + blocks + " x "
                                         + count + " " + dtype + " elements need " + need);
    }
  }

  private static void checkDirect(Buffer b, String what) {
    if (b == null || !b.isDirect() || b.position() != 0) {
      throw ShardrecException.invalid(what + " must be a direct NIO buffer at position 0");
    }
    // C reads the elements in the machine's byte order: a big-endian view (the default of
    // ByteBuffer.allocateDirect and of its asFloatBuffer) would be summed as garbage.
    if (orderOf(b) != java.nio.ByteOrder.nativeOrder()) {
      throw ShardrecException.invalid(what + " must be in native byte order");
    }
  }

  private static java.nio.ByteOrder orderOf(Buffer b) {
    if (b instanceof java.nio.ByteBuffer) return ((java.nio.ByteBuffer) b).order();
    if (b instanceof java.nio.FloatBuffer) return ((java.nio.FloatBuffer) b).order();
    if (b instanceof java.nio.DoubleBuffer) return ((java.nio.DoubleBuffer) b).order();
    if (b instanceof java.nio.IntBuffer) return ((java.nio.IntBuffer) b).order();
    if (b instanceof java.nio.LongBuffer) return ((java.nio.LongBuffer) b).order();
    if (b instanceof java.nio.ShortBuffer) return ((java.nio.ShortBuffer) b).order();
    if (b instanceof java.nio.CharBuffer) return ((java.nio.CharBuffer) b).order();
    return java.nio.ByteOrder.nativeOrder();
  }
}
