// Loads the JNI library, in this order: the file named by -Dshardrec.jni.library; the
// installation the jar belongs to (next to the jar in the build tree, <prefix>/lib for a jar in
// <prefix>/share/java), so an installed jar uses the installed libshardrec and its CUDA plugin;
// the copy embedded in the jar for this platform (extracted with libshardrec into a private
// temporary folder), so a jar on its own works; java.library.path. A failure lists every place
// tried and why, and how to point at the library.
package org.shardrec;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** Finds and loads libshardrec_jni once per class loader. */
public final class NativeLoader {
  private static final String NAME = System.mapLibraryName("shardrec_jni");
  private static boolean loaded;
  private static String loadedFrom;

  private NativeLoader() {}

  /** Loads the JNI library; called by the generated JNI class before its first native call. */
  public static synchronized void load() {
    if (loaded) return;
    List<String> tried = new ArrayList<>();
    String explicit = System.getProperty("shardrec.jni.library");
    if (explicit != null && !explicit.isEmpty()) {
      if (tryLoad(new File(explicit).getAbsolutePath(), "-Dshardrec.jni.library", tried)) return;
    } else {
      for (File candidate : candidates()) {
        if (!candidate.isFile()) {
          tried.add(candidate + " (not found)");
        } else if (tryLoad(candidate.getAbsolutePath(), "installed beside the jar", tried)) {
          return;
        }
      }
      String embedded = extractEmbedded(tried);
      if (embedded != null && tryLoad(embedded, "embedded in the jar", tried)) {
        // A loaded library stays mapped after its file is removed, so the copies go now: a JVM
        // that is killed (as Spark kills executors) never runs deleteOnExit, and each left
        // folder held several MB in the temporary folder. The plugins libshardrec may load
        // later (CUDA, MPI) are not embedded, so nothing else is read from the folder.
        removeExtracted(new File(embedded).getParentFile());
        return;
      }
      try {
        System.loadLibrary("shardrec_jni");
        loaded = true;
        loadedFrom = "java.library.path";
        return;
      } catch (UnsatisfiedLinkError e) {
        tried.add("java.library.path=" + System.getProperty("java.library.path") + " ("
            + e.getMessage() + ")");
      }
    }
    StringBuilder message = new StringBuilder("libshardrec: cannot load the JNI library ")
        .append(NAME).append(" for ").append(platform()).append(". Tried:");
    for (String t : tried) message.append("\n  - ").append(t);
    message.append("\nPoint at it with -Dshardrec.jni.library=/path/to/").append(NAME)
        .append(" or -Djava.library.path=<folder>, or use the jar installed with libshardrec")
        .append(" (<prefix>/share/java), which finds <prefix>/lib.");
    throw new UnsatisfiedLinkError(message.toString());
  }

  /** Where the JNI library was loaded from (for diagnostics); null before the first load. */
  public static synchronized String loadedFrom() {
    return loadedFrom;
  }

  private static boolean tryLoad(String path, String how, List<String> tried) {
    try {
      System.load(path);
      loaded = true;
      loadedFrom = path;
      return true;
    } catch (UnsatisfiedLinkError e) {
      tried.add(path + " (" + how + ": " + e.getMessage() + ")");
      return false;
    }
  }

  /** "linux-x86_64" style name of this platform, the folder of the embedded libraries. */
  static String platform() {
    String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    if (os.startsWith("linux")) os = "linux";
    if (arch.equals("amd64") || arch.equals("x86_64")) arch = "x86_64";
    if (arch.equals("aarch64") || arch.equals("arm64")) arch = "aarch64";
    return os + "-" + arch;
  }

  /**
   * Copies the libraries embedded for this platform (listed in native/PLATFORM/index: the JNI
   * library and libshardrec under its SONAME, which the JNI library finds through its $ORIGIN
   * RUNPATH) into a new private temporary folder, removed once they are loaded; returns the JNI library's
   * path, or null when the jar has none for this platform.
   */
  private static String extractEmbedded(List<String> tried) {
    String base = "/org/shardrec/native/" + platform() + "/";
    List<String> names = new ArrayList<>();
    try (InputStream index = NativeLoader.class.getResourceAsStream(base + "index")) {
      if (index == null) {
        tried.add("embedded " + base + " (the jar has no libraries for this platform)");
        return null;
      }
      BufferedReader reader =
          new BufferedReader(new InputStreamReader(index, StandardCharsets.UTF_8));
      for (String line; (line = reader.readLine()) != null;) {
        if (!line.trim().isEmpty()) names.add(line.trim());
      }
    } catch (IOException e) {
      tried.add("embedded " + base + "index (" + e.getMessage() + ")");
      return null;
    }
    Path dir = null;
    try {
      String parent = System.getProperty("shardrec.jni.tmpdir");
      dir = parent == null || parent.isEmpty()
          ? Files.createTempDirectory("shardrec-jni-")
          : Files.createTempDirectory(new File(parent).toPath(), "shardrec-jni-");
      dir.toFile().deleteOnExit();
      String jni = null;
      for (String name : names) {
        Path target = dir.resolve(name);
        try (InputStream in = NativeLoader.class.getResourceAsStream(base + name)) {
          if (in == null) throw new IOException("missing resource " + base + name);
          Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
        }
        target.toFile().deleteOnExit();
        if (name.equals(NAME)) jni = target.toString();
      }
      if (jni == null) tried.add("embedded " + base + " (the index does not list " + NAME + ")");
      return jni;
    } catch (IOException | SecurityException e) {
      String where = dir == null ? "a temporary folder" : dir.toString();
      tried.add("embedded " + base + " (extracting to " + where + " failed: " + e.getMessage()
          + "; -Dshardrec.jni.tmpdir picks another folder)");
      return null;
    }
  }

  /** Removes the folder extractEmbedded made and its files; what cannot go waits for exit. */
  private static void removeExtracted(File dir) {
    if (dir == null) return;
    File[] files = dir.listFiles();
    if (files != null) {
      for (File f : files) f.delete();
    }
    dir.delete();
  }

  private static List<File> candidates() {
    List<File> out = new ArrayList<>();
    try {
      File jar = new File(
          NativeLoader.class.getProtectionDomain().getCodeSource().getLocation().toURI());
      File dir = jar.isDirectory() ? jar : jar.getParentFile();
      if (dir == null) return out;
      out.add(new File(dir, NAME));
      File prefix = dir.getParentFile() == null ? null : dir.getParentFile().getParentFile();
      if (prefix != null) {
        for (String lib : new String[] {"lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"}) {
          out.add(new File(new File(prefix, lib), NAME));
        }
      }
    } catch (java.net.URISyntaxException | SecurityException | NullPointerException
        | IllegalArgumentException e) {
      // No code source (unusual class loaders): fall back to java.library.path.
    }
    return out;
  }
}
