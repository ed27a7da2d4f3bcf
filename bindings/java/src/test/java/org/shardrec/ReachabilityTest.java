// Every function the C headers declare is reachable from Java: called by org.shardrec through
// the generated Native class, or by a hand-written JNI helper or callback it uses, or one of
// the few that docs/bindings.md names as C-only. A new C call without a Java binding fails here.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

class ReachabilityTest {
  /**
   * Deliberately C-only (docs/bindings.md; the *_init functions fill option structs inside the
   * Java types): the error text travels with each exception (copied by
   * shardrec_last_error_copy), a dense tensor pointer that a concurrent reload may free is
   * read through a pinned snapshot instead, and the delta export without flags is superseded by
   * shardrec_embedding_dynamic_delta_ext (the same delta and its flags), which DynamicDelta calls.
   */
  private static final Set<String> C_ONLY =
      Set.of("shardrec_last_error", "shardrec_inference_dense_tensor",
             "shardrec_embedding_dynamic_delta");

  private static String readAll(Path dir, String suffix) throws IOException {
    StringBuilder b = new StringBuilder();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path f : (Iterable<Path>) files.sorted()::iterator) {
        if (f.toString().endsWith(suffix)) b.append(Files.readString(f)).append('\n');
      }
    }
    return b.toString();
  }

  @Test
  void everyCFunctionIsReachable() throws IOException {
    String root = System.getenv("SHARDREC_SOURCE_DIR");
    assertNotNull(root, "SHARDREC_SOURCE_DIR must name the source tree (ctest sets it)");
    Path src = Path.of(root);
    String headers = readAll(src.resolve("capi/include/shardrec"), ".h");
    String idiomatic = readAll(src.resolve("bindings/java/src/main/java/org/shardrec"), ".java");
    // %ignore lines name functions without calling them.
    String helpers = (readAll(src.resolve("bindings/java"), ".i")
                      + readAll(src.resolve("bindings/swig"), ".i"))
                         .replaceAll("(?m)^%ignore.*$", "");
    Matcher m = Pattern.compile("SHARDREC_API[^;{]*?\\b(shardrec_\\w+)\\s*\\(").matcher(headers);
    int declared = 0;
    List<String> missing = new ArrayList<>();
    while (m.find()) {
      String name = m.group(1);
      ++declared;
      if (C_ONLY.contains(name) || name.endsWith("_init")) continue;
      String shortName = name.substring("shardrec_".length());
      boolean direct = Pattern.compile("\\bNative(\\.|::)" + shortName + "\\b").matcher(idiomatic)
                           .find();
      boolean helper = Pattern.compile("\\b" + name + "\\s*\\(").matcher(helpers).find();
      if (!direct && !helper) missing.add(name);
    }
    assertTrue(declared >= 100, "found only " + declared + " declarations in the headers");
    assertEquals(List.of(), missing, "not reachable from Java");
  }
}
