// A failed libshardrec call: the C status code and the C message, read in the same JNI call.
package org.shardrec;

/** Thrown when a libshardrec call returns a negative status. */
public class ShardrecException extends RuntimeException {
  public static final int ERROR = -1;
  public static final int EINVAL = -2;
  public static final int EUSAGE = -3;
  public static final int ENOMEM = -4;
  public static final int ECUDA = -5;
  public static final int EREMOTE = -6;
  public static final int ETIMEOUT = -7;
  public static final int EIO = -8;
  public static final int ECORRUPT = -9;
  public static final int EUNSUPPORTED = -10;
  public static final int ENOTFOUND = -11;
  public static final int EINTERNAL = -12;
  public static final int ENODEVICE = -13;
  /** {@link Comm#abort()} was called on this communicator's failure domain. */
  public static final int EABORTED = -14;

  private static final long serialVersionUID = 1L;
  private final int code;

  /** Called from the JNI layer with the status and the message of libshardrec. */
  public ShardrecException(int code, String message) {
    super(org.shardrec.swig.Native.status_string(code) + ": " + message);
    this.code = code;
  }

  /** The status code, one of the constants of this class. */
  public int code() {
    return code;
  }

  /** The status name, e.g. "SHARDREC_EINVAL". */
  public String codeName() {
    return org.shardrec.swig.Native.status_string(code);
  }
}
