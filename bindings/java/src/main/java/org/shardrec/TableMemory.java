// Page size of a collection's table storage (shardrec/embedding_options.h).
package org.shardrec;

/** Page size of a collection's table storage (shardrec_table_memory_t). */
public enum TableMemory {
  /** 2 MiB aligned and advised for transparent huge pages (the default). */
  HUGE_PAGES(0),
  /** Ordinary pages (for hosts that reserve huge pages for other uses). */
  SMALL_PAGES(1);

  private final int code;

  TableMemory(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static TableMemory of(int code) {
    for (TableMemory v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no TableMemory has code " + code);
  }
}
