// Rank placement of a 2D mesh (SHARDREC_MESH_LAYOUT_*, shardrec/replica.h).
package org.shardrec;

/** Rank placement of a 2D mesh (SHARDREC_MESH_LAYOUT_*, shardrec/replica.h). */
public enum MeshLayout {
  /** Replica groups on consecutive ranks. */
  DEFAULT(0),
  /** Sharding groups on consecutive ranks. */
  INTER_HOST(1);

  private final int code;

  MeshLayout(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static MeshLayout of(int code) {
    for (MeshLayout v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no MeshLayout has code " + code);
  }
}
