// Loads the JNI library: next to the jar (build tree), under the install prefix's library
// folder (jar in <prefix>/share/java), from -Dshardrec.jni.library, or java.library.path.
package org.shardrec;

import java.io.File;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.List;

/** Finds and loads libshardrec_jni once per class loader. */
public final class NativeLoader {
  private static final String NAME = System.mapLibraryName("shardrec_jni");
  private static boolean loaded;

  private NativeLoader() {}

  /** Loads the JNI library; called by the generated JNI class before its first native call. */
  public static synchronized void load() {
    if (loaded) return;
    String explicit = System.getProperty("shardrec.jni.library");
    if (explicit != null && !explicit.isEmpty()) {
      System.load(new File(explicit).getAbsolutePath());
      loaded = true;
      return;
    }
    for (File candidate : candidates()) {
      if (candidate.isFile()) {
        System.load(candidate.getAbsolutePath());
        loaded = true;
        return;
      }
    }
    System.loadLibrary("shardrec_jni");
    loaded = true;
  }

  private static List<File> candidates() {
    List<File> out = new ArrayList<>();
    try {
      File jar = new File(NativeLoader.class.getProtectionDomain().getCodeSource().getLocation().toURI());
      File dir = jar.isDirectory() ? jar : jar.getParentFile();
      if (dir == null) return out;
      out.add(new File(dir, NAME));
      File prefix = dir.getParentFile() == null ? null : dir.getParentFile().getParentFile();
      if (prefix != null) {
        for (String lib : new String[] {"lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"}) {
          out.add(new File(new File(prefix, lib), NAME));
        }
      }
    } catch (URISyntaxException | SecurityException | NullPointerException e) {
      // No code source (unusual class loaders): fall back to java.library.path.
    }
    return out;
  }
}
