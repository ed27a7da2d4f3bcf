// Runs a Spark barrier stage from plain Java: JavaRDD has no barrier(), and RDDBarrier wants a
// serializable Scala function with a ClassTag; this wraps both behind one Java interface.
package org.shardrec.examples.spark;

import java.io.Serializable;
import java.util.Iterator;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.rdd.RDD;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/** Barrier-stage helpers for Java users of Spark (this example's; the shardrec jar has none). */
public final class BarrierStage {
  private BarrierStage() {}

  /** The work of one task: its barrier context and its partition's rows. */
  @FunctionalInterface
  public interface TaskFunction<T, R> extends Serializable {
    Iterator<R> call(BarrierTaskContext context, Iterator<T> rows) throws Exception;
  }

  /**
   * {@code rdd.barrier().mapPartitions(f)}: every partition's task starts at once (or none does)
   * and a failure of one fails and retries them all. Spark retries a barrier stage only when a
   * shuffle follows it (for example {@code repartition(1)} before {@code collect()}), at most
   * {@code spark.stage.maxConsecutiveAttempts} times.
   */
  public static <T, R> JavaRDD<R> mapPartitions(JavaRDD<T> rdd, TaskFunction<T, R> f) {
    @SuppressWarnings("unchecked")
    ClassTag<R> tag = (ClassTag<R>) (ClassTag<?>) ClassTag$.MODULE$.AnyRef();
    RDD<R> out = rdd.rdd().barrier().mapPartitions(new ScalaFunction<>(f), false, tag);
    return new JavaRDD<>(out, tag);
  }

  private static final class ScalaFunction<T, R>
      extends AbstractFunction1<scala.collection.Iterator<T>, scala.collection.Iterator<R>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final TaskFunction<T, R> f;

    ScalaFunction(TaskFunction<T, R> f) {
      this.f = f;
    }

    @Override
    public scala.collection.Iterator<R> apply(scala.collection.Iterator<T> rows) {
      try {
        return CollectionConverters.asScala(
            f.call(BarrierTaskContext.get(), CollectionConverters.asJava(rows)));
      } catch (RuntimeException e) {
        throw e;
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    }
  }
}
