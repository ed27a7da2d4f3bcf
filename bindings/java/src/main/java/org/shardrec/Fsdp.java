// Fully sharded dense parameters (FSDP / ZeRO-3, shardrec_fsdp_*).
package org.shardrec;

import java.nio.FloatBuffer;
import org.shardrec.swig.Native;
import org.shardrec.swig.optimizer_config;

/**
 * Parameters grouped into flat units, each rank keeping 1/W of every unit's parameters,
 * gradients and optimizer state. Per step: {@link #gather} a unit's full parameters (collective,
 * optionally prefetching the next), compute, {@link #release}; accumulate its full gradient
 * with {@link #addGrad}, {@link #reduceGrad} it, and {@link #step()} applies the optimizer to
 * the local shards. The Java layer copies between the library's buffers and Java's. One thread
 * at a time; close() from any thread waits for the call in flight.
 */
public final class Fsdp extends NativeHandle {
  private final long[] unitCounts;

  private Fsdp(long handle, long[] unitCounts) {
    super(handle, Native::fsdp_destroy);
    this.unitCounts = unitCounts;
  }

  /**
   * Collective over {@code comm}: {@code initial} holds every unit's full initial values, units
   * one after another (identical on every rank).
   */
  public static Fsdp create(Comm comm, long[] unitCounts, float[] initial,
                            Config.Optimizer optimizer) {
    String refused = null;
    if (unitCounts == null || initial == null || optimizer == null) {
      refused = "unitCounts, initial and optimizer must not be null";
    } else if (optimizer.nullField() != null) {
      refused = optimizer.nullField();
    } else {
      long total = 0;
      for (long c : unitCounts) total += Math.max(c, 0);
      if (initial.length != total) {
        refused = "initial has " + initial.length + " values, the units hold " + total;
      }
    }
    if (refused != null) {
      // Creation is collective: this rank still meets its peers' agreement, with a NULL
      // optimizer that C refuses on every rank together (else the peers wait out their timeout).
      try {
        use(comm, "comm", c -> Native.bind_fsdp_create(new long[1], c, null, null, null));
      } catch (ShardrecException expected) {
        // C's refusal; this rank's reason is the one to report.
      }
      throw ShardrecException.invalid(refused);
    }
    optimizer_config o = optimizer.toNative();
    try {
      long[] out = new long[1];
      FloatBuffer init = Buffers.of(initial);
      use(comm, "comm", c -> Native.bind_fsdp_create(out, c, unitCounts, init, o));
      return new Fsdp(out[0], unitCounts.clone());
    } finally {
      o.delete();
    }
  }

  public int numUnits() {
    return unitCounts.length;
  }

  /** A copy of unit {@code unit}'s full parameters; prefetch >= 0 starts gathering that unit. */
  public float[] gather(int unit, long prefetch) {
    FloatBuffer buf = Buffers.floats(count(unit));
    use(h -> Native.bind_fsdp_gather(h, unit, prefetch, buf, unitCounts[unit]));
    float[] out = new float[buf.capacity()];
    buf.get(out);
    return out;
  }

  /** Frees unit {@code unit}'s full parameters. */
  public void release(int unit) {
    use(h -> Native.fsdp_release(h, unit));
  }

  /** Adds {@code grad} (the unit's element count) into the unit's full gradient of this step. */
  public void addGrad(int unit, float[] grad) {
    long n = count(unit);
    if (grad == null || grad.length != n) {
      throw ShardrecException.invalid("unit " + unit + " has " + n + " elements");
    }
    use(h -> Native.bind_fsdp_add_grad(h, unit, Buffers.of(grad), n));
  }

  /** Starts averaging the unit's gradient into this rank's shard (collective). */
  public void reduceGrad(int unit) {
    use(h -> Native.fsdp_reduce_grad(h, unit));
  }

  /** Waits for every reduction and applies the optimizer to the local shards. */
  public void step() {
    use(h -> Native.fsdp_step(h));
  }

  /** Offset of this rank's slice in unit {@code unit}. */
  public long shardOffset(int unit) {
    long[] offset = new long[1];
    use(h -> Native.bind_fsdp_shard_range(h, unit, offset, new long[1]));
    return offset[0];
  }

  /** A copy of this rank's slice of unit {@code unit}. */
  public float[] shard(int unit) {
    long[] offset = new long[1];
    long[] count = new long[1];
    use(h -> Native.bind_fsdp_shard_range(h, unit, offset, count));
    FloatBuffer buf = Buffers.floats(Math.max(count[0], 1));
    use(h -> Native.bind_fsdp_read_shard(h, unit, buf));
    float[] out = new float[(int) count[0]];
    buf.get(out);
    return out;
  }

  /** {current, peak} host bytes this rank holds. */
  public long[] memory() {
    long[] current = new long[1];
    long[] peak = new long[1];
    use(h -> Native.bind_fsdp_memory(h, current, peak));
    return new long[] {current[0], peak[0]};
  }

  private long count(int unit) {
    if (unit < 0 || unit >= unitCounts.length) {
      throw ShardrecException.invalid(
          "unit " + unit + " out of range (" + unitCounts.length + " units)");
    }
    return unitCounts[unit];
  }
}
