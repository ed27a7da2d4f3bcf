// Library-level queries (common.h, device.h): version, element sizes, devices.
package org.shardrec;

import org.shardrec.swig.Native;

/**
 * Library-level queries. Having no GPU is not an error for {@link #deviceCount()} (it returns
 * 0); {@link #deviceCheck} and {@link #devicePluginPath()} throw a {@link ShardrecException}
 * whose message says why a device is missing.
 */
public final class Shardrec {
  private Shardrec() {}

  /** Runtime version of the loaded library, "major.minor.patch". */
  public static String version() {
    return Native.version_string();
  }

  /** Runtime version as major * 10000 + minor * 100 + patch. */
  public static int versionCode() {
    return Native.version();
  }

  /** Number of CUDA devices libshardrec can use; 0 without a GPU, CUDA build or plugin. */
  public static int deviceCount() {
    int[] out = new int[1];
    Native.device_count(out);
    return out[0];
  }

  /**
   * Returns when the device is usable; throws ShardrecException with ENODEVICE (no device,
   * plugin or CUDA runtime), EUNSUPPORTED (built without CUDA) or EINVAL (negative index).
   */
  public static void deviceCheck(DeviceType type, int index) {
    if (type == null) throw ShardrecException.invalid("type must not be null");
    Native.device_check(type.code(), index);
  }

  /** Absolute path of the loaded CUDA plugin; throws ENODEVICE/EUNSUPPORTED without one. */
  public static String devicePluginPath() {
    String[] out = new String[1];
    Native.bind_device_plugin_path(out);
    return out[0] == null ? "" : out[0];
  }
}
