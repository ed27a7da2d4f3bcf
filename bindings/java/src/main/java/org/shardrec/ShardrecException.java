// A refused or failed libshardrec call: the C status code and the library's message, read in the
// same JNI call; also every argument check the binding makes in Java before the C call.
package org.shardrec;

/**
 * Every refusal or failure of the library: a C call that returned a negative status, and every
 * argument the binding refuses in Java before calling C (a wrong buffer size or kind, a null
 * argument, an unknown enum code), which has {@link #code()} {@link #EINVAL} as the C call would.
 * So one {@code catch (ShardrecException e)} sees them all and {@code e.code()} tells them apart.
 * {@link #getMessage()} is the library's message alone (the code is {@link #code()} and
 * {@link #codeName()}); {@link #toString()} shows both, the code once:
 * {@code org.shardrec.ShardrecException: SHARDREC_EINVAL: table 'x' is not dynamic}.
 * (Until 0.1 the binding's own checks threw {@code IllegalArgumentException}, and the message
 * began with the code's name.)
 */
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

  /**
   * Called from the JNI layer with the status and the message of libshardrec, and by the
   * binding's own checks; a {@link Store} may throw one to report a status.
   */
  public ShardrecException(int code, String message) {
    super(message);
    this.code = code;
  }

  /** As {@link #ShardrecException(int, String)}, with the exception that caused it. */
  public ShardrecException(int code, String message, Throwable cause) {
    super(message, cause);
    this.code = code;
  }

  /** An argument the binding refuses before the C call: code {@link #EINVAL}. */
  static ShardrecException invalid(String message) {
    return new ShardrecException(EINVAL, message);
  }

  /**
   * {@code value}, a required argument of the binding: null throws ShardrecException {@link
   * #EINVAL} "{@code name} must not be null" (never a NullPointerException, so that every
   * refusal is a ShardrecException).
   */
  static <T> T nonNull(T value, String name) {
    if (value == null) throw invalid(name + " must not be null");
    return value;
  }

  /** As {@link #invalid(String)}, with its cause. */
  static ShardrecException invalid(String message, Throwable cause) {
    return new ShardrecException(EINVAL, message, cause);
  }

  /** The status code, one of the constants of this class. */
  public int code() {
    return code;
  }

  /** The status name, e.g. "SHARDREC_EINVAL". */
  public String codeName() {
    return org.shardrec.swig.Native.status_string(code);
  }

  /** The class, the code's name and the message: the code once. */
  @Override
  public String toString() {
    return getClass().getName() + ": " + codeName() + ": " + getMessage();
  }
}
