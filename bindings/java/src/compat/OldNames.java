// A program written against the binding's earlier docs, compiled with `javac -Werror` by the
// test java_deprecated_names_werror: deprecated names must keep such a build working (a note,
// not a warning), as docs/compatibility.md promises, until the minor release that removes them.
import org.shardrec.Comm;
import org.shardrec.Config;
import org.shardrec.Mesh;

class OldNames {
  public static void main(String[] args) {
    Object[] old = {Config.ROW_WISE, Config.POOLING_SUM, Config.INIT_UNIFORM, Config.DTYPE_FLOAT32,
                    Config.Optimizer.ADAGRAD, Comm.REDUCE_SUM, Mesh.SYNC_WEIGHTS_ONLY};
    System.out.println(old.length);
  }
}
