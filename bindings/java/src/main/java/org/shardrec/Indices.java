// Index arguments passed to C's size_t parameters.
package org.shardrec;

final class Indices {
  private Indices() {}

  /**
   * {@code i} as C's size_t takes it. A negative index would reach C as a huge one and be
   * reported as such ("index 18446744073709551615 is out of range"): it is refused here as given,
   * with the code C gives an index out of range.
   */
  static long of(String what, int i) {
    if (i < 0) {
      throw new ShardrecException(ShardrecException.EINVAL, what + " index " + i + " is negative");
    }
    return i;
  }
}
