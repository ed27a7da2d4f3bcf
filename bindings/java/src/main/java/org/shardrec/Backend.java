// Collective engines of a communicator (SHARDREC_BACKEND_*, shardrec/comm.h).
package org.shardrec;

/** Collective engines of a communicator (SHARDREC_BACKEND_*, shardrec/comm.h). */
public enum Backend {
  /** Gloo for host devices, NCCL for CUDA devices. */
  AUTO(0),
  /** CPU engine. */
  GLOO(1),
  /** NCCL; needs a CUDA device and the CUDA plugin. */
  NCCL(2),
  /** MPI (host memory), through the MPI plugin; only with {@link Comm#createMpi}. */
  MPI(3);

  private final int code;

  Backend(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static Backend of(int code) {
    for (Backend v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no Backend has code " + code);
  }
}
