// How a table is split over ranks (SHARDREC_SHARDING_*, shardrec/config.h).
package org.shardrec;

/** How a table is split over ranks (SHARDREC_SHARDING_*, shardrec/config.h). */
public enum ShardingType {
  /** Whole table on every rank; gradients all-reduced. */
  DATA_PARALLEL(0),
  /** Whole table on one rank. */
  TABLE_WISE(1),
  /** Row blocks on ranks 0..W-1. */
  ROW_WISE(2),
  /** Full-height column blocks on any ranks. */
  COLUMN_WISE(3),
  /** Row blocks over the ranks of one node. */
  TABLE_ROW_WISE(4),
  /** Column blocks on ranks of one node. */
  TABLE_COLUMN_WISE(5),
  /** Column blocks, each row-split over one node. */
  GRID(6);

  private final int code;

  ShardingType(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static ShardingType of(int code) {
    for (ShardingType v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no ShardingType has code " + code);
  }
}
