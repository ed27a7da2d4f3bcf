// Struct versions and sizes of the C headers, mirrored for the Java layer.
package org.shardrec;

final class NativeConstants {
  static final long COMM_OPTIONS_VERSION = org.shardrec.swig.NativeConstants.COMM_OPTIONS_VERSION;
  static final long TOPOLOGY_VERSION = org.shardrec.swig.NativeConstants.TOPOLOGY_VERSION;
  static final long CALIBRATE_OPTIONS_VERSION =
      org.shardrec.swig.NativeConstants.CALIBRATE_OPTIONS_VERSION;
  static final long CALIBRATION_VERSION = org.shardrec.swig.NativeConstants.CALIBRATION_VERSION;
  static final long OPTIMIZER_CONFIG_VERSION =
      org.shardrec.swig.NativeConstants.OPTIMIZER_CONFIG_VERSION;
  static final long EMBEDDING_OPTIONS_VERSION =
      org.shardrec.swig.NativeConstants.EMBEDDING_OPTIONS_VERSION;
  static final long MESH_OPTIONS_VERSION = org.shardrec.swig.NativeConstants.MESH_OPTIONS_VERSION;
  static final long CHECKPOINT_OPTIONS_VERSION =
      org.shardrec.swig.NativeConstants.CHECKPOINT_OPTIONS_VERSION;
  static final long STEP_TIMINGS_VERSION = org.shardrec.swig.NativeConstants.STEP_TIMINGS_VERSION;
  static final long DYNAMIC_TABLE_CONFIG_VERSION =
      org.shardrec.swig.NativeConstants.DYNAMIC_TABLE_CONFIG_VERSION;
  static final long DYNAMIC_TABLE_STATS_VERSION =
      org.shardrec.swig.NativeConstants.DYNAMIC_TABLE_STATS_VERSION;
  static final long TIER_STATS_VERSION = org.shardrec.swig.NativeConstants.TIER_STATS_VERSION;
  static final long SERVING_TIER_STATS_VERSION =
      org.shardrec.swig.NativeConstants.SERVING_TIER_STATS_VERSION;
  static final int UNIQUE_ID_BYTES = org.shardrec.swig.NativeConstants.UNIQUE_ID_BYTES;
  static final int LOCAL_GROUP_MAX = org.shardrec.swig.NativeConstants.LOCAL_GROUP_MAX;

  private NativeConstants() {}
}
