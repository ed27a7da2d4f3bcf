// Run by the java_install_prefix test (not a JUnit test): with the mode "embedded", trains the
// example and checks that the JNI library and libshardrec both came from the folder the jar
// extracted them to (the jar sits alone in its folder), that the folder is gone once they are
// loaded, and that the classes target Java 11;
// with the mode "missing" (-Dshardrec.jni.library naming no file), checks that the failure
// says what was searched and how to point at the library.
package org.shardrec;

import java.io.DataInputStream;
import java.io.File;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.shardrec.examples.TrainSharded;

public final class JarLoadCheck {
  private JarLoadCheck() {}

  private static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 1 && args[0].equals("missing")) {
      try {
        Plan.create(java.util.List.of(), java.util.List.of(), new Config.Topology(1), null);
        throw new AssertionError("loading did not fail");
      } catch (UnsatisfiedLinkError e) {
        String m = e.getMessage();
        check(m.contains("Tried:") && m.contains(System.getProperty("shardrec.jni.library"))
                && m.contains("-Dshardrec.jni.library=") && m.contains("java.library.path"),
            "unhelpful error: " + m);
        System.out.println("missing library reported: " + m);
        return;
      }
    }
    try (InputStream in = JarLoadCheck.class.getResourceAsStream("/org/shardrec/Plan.class")) {
      DataInputStream data = new DataInputStream(in);
      data.readInt();
      data.readUnsignedShort();
      int major = data.readUnsignedShort();
      check(major == 55, "org/shardrec/Plan.class has class file version " + major + ", not 55");
    }
    TrainSharded.main(new String[0]);
    String from = NativeLoader.loadedFrom();
    check(from != null, "NativeLoader.loadedFrom() is null after training");
    String dir = new File(from).getParent();
    String maps = new String(Files.readAllBytes(Paths.get("/proc/self/maps")),
        StandardCharsets.UTF_8);
    for (String lib : new String[] {"/libshardrec_jni.so", "/libshardrec.so"}) {
      boolean found = false;
      for (String line : maps.split("\n")) {
        int at = line.indexOf('/');
        if (at < 0 || !line.contains(lib)) continue;
        String path = line.substring(at);
        check(path.startsWith(dir + "/"), lib + " mapped from " + path + ", not from " + dir);
        found = true;
      }
      check(found, lib + " is not mapped");
    }
    // The extracted copies are removed once loaded (a killed JVM would leave them otherwise).
    check(!new File(dir).exists(), "the extraction folder " + dir + " is still there");
    System.out.println("libraries from " + dir + " (removed after loading)");
  }
}
