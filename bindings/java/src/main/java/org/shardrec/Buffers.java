// Buffer checks done before any native call, and copies for the array convenience overloads.
package org.shardrec;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;

/** Direct, native-order NIO buffers: allocation and validation. */
public final class Buffers {
  private Buffers() {}

  /** A direct native-order float buffer of n elements (zero-filled). */
  public static FloatBuffer floats(long n) {
    return bytes(n, 4).asFloatBuffer();
  }

  /** A direct native-order int buffer of n elements. */
  public static IntBuffer ints(long n) {
    return bytes(n, 4).asIntBuffer();
  }

  /** A direct native-order long buffer of n elements. */
  public static LongBuffer longs(long n) {
    return bytes(n, 8).asLongBuffer();
  }

  /** A direct copy of {@code values} (ShardrecException for null). */
  public static FloatBuffer of(float[] values) {
    requireValues(values);
    FloatBuffer b = floats(values.length);
    b.put(values).flip();
    return b;
  }

  /** A direct copy of {@code values} (ShardrecException for null). */
  public static IntBuffer of(int[] values) {
    requireValues(values);
    IntBuffer b = ints(values.length);
    b.put(values).flip();
    return b;
  }

  /** A direct copy of {@code values} (ShardrecException for null). */
  public static LongBuffer of(long[] values) {
    requireValues(values);
    LongBuffer b = longs(values.length);
    b.put(values).flip();
    return b;
  }

  private static void requireValues(Object values) {
    if (values == null) throw ShardrecException.invalid("values must not be null");
  }

  // Copies for the array overloads of calls that check their buffer argument: null stays null,
  // so that the check refuses it naming the argument (on every rank, for a collective call).
  static FloatBuffer copyOrNull(float[] values) {
    return values == null ? null : of(values);
  }

  static IntBuffer copyOrNull(int[] values) {
    return values == null ? null : of(values);
  }

  static LongBuffer copyOrNull(long[] values) {
    return values == null ? null : of(values);
  }

  /** The floats of {@code out} from index 0 to its capacity, copied into an array. */
  static float[] toArray(FloatBuffer out) {
    float[] result = new float[out.capacity()];
    FloatBuffer all = out.duplicate();
    all.rewind();
    all.get(result);
    return result;
  }

  /** Element count of a tensor shape; ShardrecException for a bad one. */
  static long elements(long[] shape) {
    if (shape == null) throw ShardrecException.invalid("shape must not be null");
    long n = 1;
    for (long d : shape) {
      if (d < 0 || (d != 0 && n > Long.MAX_VALUE / d)) {
        throw ShardrecException.invalid("bad tensor shape " + java.util.Arrays.toString(shape));
      }
      n *= d;
    }
    return n;
  }

  private static ByteBuffer bytes(long n, int elem) {
    if (n < 0 || n > Integer.MAX_VALUE / elem) {
      throw ShardrecException.invalid("buffer of " + n + " elements is not allocatable");
    }
    return ByteBuffer.allocateDirect((int) (n * elem)).order(ByteOrder.nativeOrder());
  }

  static void checkKind(Buffer b, ByteOrder order, String what, boolean writable) {
    if (b == null) throw ShardrecException.invalid(what + " must not be null");
    if (!b.isDirect()) throw ShardrecException.invalid(what + " must be a direct NIO buffer");
    if (order != ByteOrder.nativeOrder()) {
      throw ShardrecException.invalid(what + " must be in native byte order");
    }
    if (writable && b.isReadOnly()) throw ShardrecException.invalid(what + " is read-only");
  }

  static void checkSize(Buffer b, long expected, String what) {
    if (b.remaining() != expected) {
      throw ShardrecException.invalid(
          what + " has " + b.remaining() + " elements remaining, expected " + expected);
    }
  }

  /** Checked view starting at the buffer's position (what the JNI layer addresses). */
  static FloatBuffer in(FloatBuffer b, long expected, String what) {
    checkKind(b, b == null ? null : b.order(), what, false);
    checkSize(b, expected, what);
    return b.slice();
  }

  static FloatBuffer out(FloatBuffer b, long expected, String what) {
    checkKind(b, b == null ? null : b.order(), what, true);
    checkSize(b, expected, what);
    return b.slice();
  }

  static IntBuffer in(IntBuffer b, long expected, String what) {
    checkKind(b, b == null ? null : b.order(), what, false);
    checkSize(b, expected, what);
    return b.slice();
  }

  static LongBuffer in(LongBuffer b, String what) {
    checkKind(b, b == null ? null : b.order(), what, false);
    return b.slice();
  }
}
