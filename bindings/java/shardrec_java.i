/* Java typemaps of the libshardrec SWIG module: statuses throw ShardrecException (code and the
 * C message, read inside the same JNI call), handles travel as long, tensors as direct NIO
 * buffers (zero copies), small config arrays as Java arrays, out-parameters as 1-element arrays. */

%module Native

/* The generated JNI class loads the library before its first native call. */
%pragma(java) jniclasscode=%{
  static {
    org.shardrec.NativeLoader.load();
  }
%}

%{
#include <stdlib.h>
#include "shardrec/common.h"
#include <string.h>

/* Throws org.shardrec.ShardrecException(code, message) with this thread's C message. */
static void sr_java_throw_status(JNIEnv* jenv, jint code) {
  char small[512];
  char* msg = small;
  size_t len = shardrec_last_error_copy(small, sizeof(small));
  jclass cls;
  jmethodID ctor;
  jstring jmsg;
  jobject ex;
  if (len >= sizeof(small)) {
    msg = (char*)malloc(len + 1);
    if (msg == NULL) msg = small; else shardrec_last_error_copy(msg, len + 1);
  }
  if (msg[0] == '\0') {
    strncpy(small, shardrec_status_string(code), sizeof(small) - 1);
    small[sizeof(small) - 1] = '\0';
    msg = small;
  }
  cls = (*jenv)->FindClass(jenv, "org/shardrec/ShardrecException");
  if (cls == NULL) goto done; /* NoClassDefFoundError is pending. */
  ctor = (*jenv)->GetMethodID(jenv, cls, "<init>", "(ILjava/lang/String;)V");
  jmsg = (*jenv)->NewStringUTF(jenv, msg);
  if (ctor != NULL && jmsg != NULL) {
    ex = (*jenv)->NewObject(jenv, cls, ctor, code, jmsg);
    if (ex != NULL) (*jenv)->Throw(jenv, (jthrowable)ex);
  }
done:
  if (msg != small) free(msg);
}

/* Throws org.shardrec.ShardrecException(SHARDREC_EINVAL, what): an argument the JNI layer refuses
   before the C call is a refusal like the library's own (one catch clause sees both). */
static void sr_java_throw_einval(JNIEnv* jenv, const char* what) {
  jclass cls = (*jenv)->FindClass(jenv, "org/shardrec/ShardrecException");
  jmethodID ctor;
  jstring jmsg;
  jobject ex;
  if (cls == NULL) return; /* NoClassDefFoundError is pending. */
  ctor = (*jenv)->GetMethodID(jenv, cls, "<init>", "(ILjava/lang/String;)V");
  jmsg = (*jenv)->NewStringUTF(jenv, what);
  if (ctor == NULL || jmsg == NULL) return;
  ex = (*jenv)->NewObject(jenv, cls, ctor, (jint)SHARDREC_EINVAL, jmsg);
  if (ex != NULL) (*jenv)->Throw(jenv, (jthrowable)ex);
}

/* Where an empty direct buffer points when JNI gives it no address: a non-null buffer always
   reaches C as a non-NULL pointer (a zero-size VBE batch's empty inverse indices must not read
   as absent ones). Never read or written: its length is 0. */
static int64_t sr_java_empty_buffer[1];
%}

/* ---- status: throw after out/argout/freearg ran, before returning to Java ---- */
%typemap(ret) shardrec_status_t %{
  if ($1 < 0) sr_java_throw_status(jenv, (jint)$1);
%}

/* ---- opaque handles as long ---- */
%define SR_JAVA_HANDLE(TYPE)
%typemap(jni) TYPE*, const TYPE* "jlong"
%typemap(jtype) TYPE*, const TYPE* "long"
%typemap(jstype) TYPE*, const TYPE* "long"
%typemap(in) TYPE*, const TYPE* %{ $1 = ($1_ltype)(intptr_t)$input; %}
%typemap(out) TYPE*, const TYPE* %{ $result = (jlong)(intptr_t)$1; %}
%typemap(javain) TYPE*, const TYPE* "$javainput"
%typemap(javaout) TYPE*, const TYPE* { return $jnicall; }
%typemap(jni) TYPE** "jlongArray"
%typemap(jtype) TYPE** "long[]"
%typemap(jstype) TYPE** "long[]"
%typemap(javain) TYPE** "$javainput"
%typemap(in) TYPE** ($*1_ltype tmp = NULL) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    sr_java_throw_einval(jenv, "handle holder must be a long[1]");
    return $null;
  }
  $1 = &tmp;
%}
%typemap(argout) TYPE** %{
  { jlong v = (jlong)(intptr_t)tmp$argnum; (*jenv)->SetLongArrayRegion(jenv, $input, 0, 1, &v); }
%}
%enddef
SR_JAVA_HANDLE(shardrec_comm_t)
SR_JAVA_HANDLE(shardrec_plan_t)
SR_JAVA_HANDLE(shardrec_embedding_t)
SR_JAVA_HANDLE(shardrec_mesh_t)
SR_JAVA_HANDLE(shardrec_bind_plan_spec_t)
SR_JAVA_HANDLE(shardrec_bind_tiers_t)

/* N handles of a local group: a long[n]. */
%typemap(jni) (shardrec_comm_t** comms_out, int32_t n) "jlongArray"
%typemap(jtype) (shardrec_comm_t** comms_out, int32_t n) "long[]"
%typemap(jstype) (shardrec_comm_t** comms_out, int32_t n) "long[]"
%typemap(javain) (shardrec_comm_t** comms_out, int32_t n) "$javainput"
%typemap(in) (shardrec_comm_t** comms_out, int32_t n) %{
  if ($input == NULL) { sr_java_throw_einval(jenv, "comms must not be null"); return $null; }
  $2 = (int32_t)(*jenv)->GetArrayLength(jenv, $input);
  $1 = (shardrec_comm_t**)calloc($2 > 0 ? (size_t)$2 : 1, sizeof(shardrec_comm_t*));
  if ($1 == NULL) { sr_java_throw_einval(jenv, "out of memory"); return $null; }
%}
%typemap(argout) (shardrec_comm_t** comms_out, int32_t n) %{
  { int32_t i; for (i = 0; i < $2; ++i) {
      jlong v = (jlong)(intptr_t)$1[i]; (*jenv)->SetLongArrayRegion(jenv, $input, i, 1, &v); } }
%}
%typemap(freearg) (shardrec_comm_t** comms_out, int32_t n) %{ free($1); %}

/* ---- unique id as byte[128] ---- */
%typemap(jni) shardrec_unique_id_t*, const shardrec_unique_id_t* "jbyteArray"
%typemap(jtype) shardrec_unique_id_t*, const shardrec_unique_id_t* "byte[]"
%typemap(jstype) shardrec_unique_id_t*, const shardrec_unique_id_t* "byte[]"
%typemap(javain) shardrec_unique_id_t*, const shardrec_unique_id_t* "$javainput"
%typemap(in) shardrec_unique_id_t* (shardrec_unique_id_t tmp) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) != SHARDREC_UNIQUE_ID_BYTES) {
    sr_java_throw_einval(jenv, "a unique id is a byte[128]");
    return $null;
  }
  $1 = &tmp;
%}
%typemap(in) const shardrec_unique_id_t* (shardrec_unique_id_t id) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) != SHARDREC_UNIQUE_ID_BYTES) {
    sr_java_throw_einval(jenv, "a unique id is a byte[128]");
    return $null;
  }
  (*jenv)->GetByteArrayRegion(jenv, $input, 0, SHARDREC_UNIQUE_ID_BYTES, (jbyte*)id.internal);
  $1 = &id;
%}
%typemap(argout) shardrec_unique_id_t* %{
  (*jenv)->SetByteArrayRegion(jenv, $input, 0, SHARDREC_UNIQUE_ID_BYTES, (const jbyte*)tmp$argnum.internal);
%}
%typemap(argout) const shardrec_unique_id_t* ""

/* ---- direct NIO buffers: address and capacity, no copy (the Java layer checked kind and
 *      size and passes a slice, so the address starts at the caller's position) ---- */
%define SR_JAVA_NIO(CTYPE, JBUF)
%typemap(jni) (CTYPE* BUF, size_t LEN) "jobject"
%typemap(jtype) (CTYPE* BUF, size_t LEN) "JBUF"
%typemap(jstype) (CTYPE* BUF, size_t LEN) "JBUF"
%typemap(javain) (CTYPE* BUF, size_t LEN) "$javainput"
%typemap(in) (CTYPE* BUF, size_t LEN) %{
  $1 = NULL; $2 = 0;
  if ($input != NULL) {
    jlong cap = (*jenv)->GetDirectBufferCapacity(jenv, $input);
    if (cap < 0) { sr_java_throw_einval(jenv, "buffer must be a direct NIO buffer"); return $null; }
    $1 = ($1_ltype)(*jenv)->GetDirectBufferAddress(jenv, $input);
    if ($1 == NULL && cap == 0) $1 = ($1_ltype)sr_java_empty_buffer;
    $2 = (size_t)cap;
  }
%}
%enddef
SR_JAVA_NIO(float, java.nio.FloatBuffer)
SR_JAVA_NIO(const float, java.nio.FloatBuffer)
SR_JAVA_NIO(const int32_t, java.nio.IntBuffer)
SR_JAVA_NIO(const int64_t, java.nio.LongBuffer)
%apply (float* BUF, size_t LEN) { (float* out, size_t out_len), (float* out, size_t len) };
%apply (const float* BUF, size_t LEN) { (const float* grad, size_t grad_len),
                                        (const float* weights, size_t len),
                                        (const float* values, size_t len),
                                        (const float* weights, size_t num_weights) };
%apply (const int32_t* BUF, size_t LEN) { (const int32_t* lengths, size_t num_lengths) };
%apply (const int64_t* BUF, size_t LEN) { (const int64_t* values, size_t num_values),
                                          (const int64_t* feature_batch_sizes,
                                           size_t num_feature_batch_sizes),
                                          (const int64_t* inverse_indices,
                                           size_t num_inverse_indices) };

/* Dense collectives: any direct buffer; the element count and dtype are separate arguments. */
%typemap(jni) const void* send, void* recv, void* buf "jobject"
%typemap(jtype) const void* send, void* recv, void* buf "java.nio.Buffer"
%typemap(jstype) const void* send, void* recv, void* buf "java.nio.Buffer"
%typemap(javain) const void* send, void* recv, void* buf "$javainput"
%typemap(in) const void* send, void* recv, void* buf %{
  $1 = NULL;
  if ($input != NULL) {
    $1 = ($1_ltype)(*jenv)->GetDirectBufferAddress(jenv, $input);
    if ($1 == NULL) { sr_java_throw_einval(jenv, "buffer must be a direct NIO buffer"); return $null; }
  }
%}

/* Host calls: the stream argument is always NULL from Java. */
%typemap(in, numinputs=0) void* stream %{ $1 = NULL; %}

/* ---- small config arrays as Java arrays (copied by the callee) ---- */
%define SR_JAVA_ARRAY(CTYPE, JNITYPE, JARR, JELEM, GET, REL)
%typemap(jni) (const CTYPE* ARR, size_t ARRLEN) "JNITYPE"
%typemap(jtype) (const CTYPE* ARR, size_t ARRLEN) "JARR"
%typemap(jstype) (const CTYPE* ARR, size_t ARRLEN) "JARR"
%typemap(javain) (const CTYPE* ARR, size_t ARRLEN) "$javainput"
%typemap(in) (const CTYPE* ARR, size_t ARRLEN) %{
  $1 = NULL; $2 = 0;
  if ($input != NULL) {
    $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
    $1 = ($1_ltype)(*jenv)->GET(jenv, $input, NULL);
  }
%}
%typemap(freearg) (const CTYPE* ARR, size_t ARRLEN) %{
  if ($1 != NULL) (*jenv)->REL(jenv, $input, (JELEM*)$1, JNI_ABORT);
%}
%enddef
SR_JAVA_ARRAY(int32_t, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements)
SR_JAVA_ARRAY(int64_t, jlongArray, long[], jlong, GetLongArrayElements, ReleaseLongArrayElements)
SR_JAVA_ARRAY(float, jfloatArray, float[], jfloat, GetFloatArrayElements, ReleaseFloatArrayElements)
%apply (const int32_t* ARR, size_t ARRLEN) { (const int32_t* features, size_t num_features),
                                             (const int32_t* ranks, size_t num_ranks) };
%apply (const float* ARR, size_t ARRLEN) { (const float* pooling_factors, size_t num_pooling_factors) };
%apply (const int64_t* ARR, size_t ARRLEN) { (const int64_t* bytes, size_t num_bytes),
                                             (const int64_t* shape, size_t ndim) };

/* Strings in (names, paths, JSON): the String's standard UTF-8 bytes plus a terminating NUL, made
 * on the Java side by Native.utf8z. JNI's GetStringUTFChars would hand C "modified UTF-8", which
 * writes U+0000 as two bytes and a character beyond the BMP as two 3-byte surrogates, so a path
 * or table name would reach C as other bytes than the file system or a checkpoint holds; and a
 * NUL inside the String would cut it short in C, so utf8z refuses it
 * (ShardrecException EINVAL). */
%pragma(java) modulecode=%{
  static byte[] utf8z(String s) {
    if (s == null) return null;
    byte[] b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    for (int i = 0; i < b.length; ++i) {
      if (b[i] == 0) {
        throw new org.shardrec.ShardrecException(org.shardrec.ShardrecException.EINVAL,
            s.replace("\0", "\\0")
            + ": a NUL character at byte " + i + " would cut the string short in C");
      }
    }
    return java.util.Arrays.copyOf(b, b.length + 1);
  }
%}
%typemap(jni) const char* UTF8_IN "jbyteArray"
%typemap(jtype) const char* UTF8_IN "byte[]"
%typemap(jstype) const char* UTF8_IN "String"
%typemap(javain) const char* UTF8_IN "utf8z($javainput)"
%typemap(in) const char* UTF8_IN %{
  $1 = NULL;
  if ($input != NULL) {
    $1 = (char*)(*jenv)->GetByteArrayElements(jenv, $input, NULL);
    if ($1 == NULL) return $null;
  }
%}
%typemap(freearg) const char* UTF8_IN %{
  if ($1 != NULL) (*jenv)->ReleaseByteArrayElements(jenv, $input, (jbyte*)$1, JNI_ABORT);
%}
%apply const char* UTF8_IN { const char* table, const char* dir, const char* path,
                             const char* name, const char* state, const char* key,
                             const char* dense_names, const char* table_names };

%typemap(jni) (const char* text, size_t len) "jbyteArray"
%typemap(jtype) (const char* text, size_t len) "byte[]"
%typemap(jstype) (const char* text, size_t len) "String"
%typemap(javain) (const char* text, size_t len) "utf8z($javainput)"
%typemap(in) (const char* text, size_t len) %{
  $1 = NULL; $2 = 0;
  if ($input != NULL) {
    $1 = (char*)(*jenv)->GetByteArrayElements(jenv, $input, NULL);
    if ($1 == NULL) return $null;
    $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input) - 1;  /* without the terminating NUL */
  }
%}
%typemap(freearg) (const char* text, size_t len) %{
  if ($1 != NULL) (*jenv)->ReleaseByteArrayElements(jenv, $input, (jbyte*)$1, JNI_ABORT);
%}

/* Library-allocated text out: a String[1]; the C buffer is freed here. */
%typemap(jni) (char** text_out, size_t* len_out) "jobjectArray"
%typemap(jtype) (char** text_out, size_t* len_out) "String[]"
%typemap(jstype) (char** text_out, size_t* len_out) "String[]"
%typemap(javain) (char** text_out, size_t* len_out) "$javainput"
%typemap(in) (char** text_out, size_t* len_out) (char* text = NULL, size_t text_len = 0) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    sr_java_throw_einval(jenv, "text holder must be a String[1]");
    return $null;
  }
  $1 = &text; $2 = &text_len;
%}
%typemap(argout) (char** text_out, size_t* len_out) %{
  if (text$argnum != NULL) {
    jstring s = (*jenv)->NewStringUTF(jenv, text$argnum);
    shardrec_free(text$argnum);
    if (s == NULL) return $null;
    (*jenv)->SetObjectArrayElement(jenv, $input, 0, s);
  }
%}

/* Borrowed names out: String[1]. */
%typemap(jni) const char** name_out "jobjectArray"
%typemap(jtype) const char** name_out "String[]"
%typemap(jstype) const char** name_out "String[]"
%typemap(javain) const char** name_out "$javainput"
%typemap(in) const char** name_out (const char* name = NULL) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    sr_java_throw_einval(jenv, "name holder must be a String[1]");
    return $null;
  }
  $1 = ($1_ltype)&name;
%}
%typemap(argout) const char** name_out %{
  if (name$argnum != NULL) {
    jstring s = (*jenv)->NewStringUTF(jenv, name$argnum);
    if (s == NULL) return $null;
    (*jenv)->SetObjectArrayElement(jenv, $input, 0, s);
  }
%}

/* Scalar out-parameters: 1-element Java arrays. */
%define SR_JAVA_OUT(CTYPE, JNIARR, JARR, JELEM, SETREGION)
%typemap(jni) CTYPE* OUT "JNIARR"
%typemap(jtype) CTYPE* OUT "JARR"
%typemap(jstype) CTYPE* OUT "JARR"
%typemap(javain) CTYPE* OUT "$javainput"
%typemap(in) CTYPE* OUT (CTYPE tmp = 0) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    sr_java_throw_einval(jenv, "out holder must have one element");
    return $null;
  }
  $1 = &tmp;
%}
%typemap(argout) CTYPE* OUT %{
  { JELEM v = (JELEM)tmp$argnum; (*jenv)->SETREGION(jenv, $input, 0, 1, &v); }
%}
%enddef
SR_JAVA_OUT(int32_t, jintArray, int[], jint, SetIntArrayRegion)
SR_JAVA_OUT(int64_t, jlongArray, long[], jlong, SetLongArrayRegion)
SR_JAVA_OUT(uint64_t, jlongArray, long[], jlong, SetLongArrayRegion)
SR_JAVA_OUT(size_t, jlongArray, long[], jlong, SetLongArrayRegion)
SR_JAVA_OUT(double, jdoubleArray, double[], jdouble, SetDoubleArrayRegion)
SR_JAVA_OUT(uint32_t, jintArray, int[], jint, SetIntArrayRegion)
%apply int32_t* OUT { int32_t* out, int32_t* row_wise_out, int32_t* type_out,
                      int32_t* sharding_group, int32_t* shard_rank, int32_t* replica_group,
                      int32_t* replica_rank, int32_t* synced_out, int32_t* collectives_out };
%apply int64_t* OUT { int64_t* out, int64_t* syncs_out };
%apply uint64_t* OUT { uint64_t* out, uint64_t* bytes_out };
%apply size_t* OUT { size_t* out, size_t* index_out, size_t* num_shards_out };
%apply double* OUT { double* comm_seconds_out, double* total_seconds_out };
%apply double* OUT { double* bandwidth_out };
/* shardrec_topology_calibrate_disk's figures. */
%apply double* OUT { double* iops_out };
%apply int32_t* OUT { int32_t* direct_out };
/* Output keys and offsets (shardrec_embedding_output_info). */
%apply const char** name_out { const char** feature_out, const char** table_out };
%apply int64_t* OUT { int64_t* offset_out, int64_t* width_out };
/* uint64 fields (seed, memory) and uint32 masks as Java long. */
%apply int64_t { uint64_t };

/* Struct proxies get a _t suffix so they never clash with parameter names (shard). */
%rename(shard_t) shardrec_shard;

/* ---- the dense side (../swig/dense.i) ---- */
SR_JAVA_HANDLE(shardrec_mlp_t)
SR_JAVA_HANDLE(shardrec_dcn_t)
SR_JAVA_HANDLE(shardrec_dense_optimizer_t)
SR_JAVA_HANDLE(shardrec_ddp_t)
SR_JAVA_HANDLE(shardrec_fsdp_t)
SR_JAVA_HANDLE(shardrec_bind_param_list_t)
/* Raw float buffers of the dense calls: a direct FloatBuffer (the Java layer checked its size
   and passes a slice at the caller's position); null is NULL (optional outputs). */
%typemap(jni) float* RAWF, const float* RAWF "jobject"
%typemap(jtype) float* RAWF, const float* RAWF "java.nio.FloatBuffer"
%typemap(jstype) float* RAWF, const float* RAWF "java.nio.FloatBuffer"
%typemap(javain) float* RAWF, const float* RAWF "$javainput"
%typemap(in) float* RAWF, const float* RAWF %{
  $1 = NULL;
  if ($input != NULL) {
    $1 = ($1_ltype)(*jenv)->GetDirectBufferAddress(jenv, $input);
    if ($1 == NULL) { sr_java_throw_einval(jenv, "buffer must be a direct NIO buffer"); return $null; }
  }
%}
%apply (const int64_t* ARR, size_t ARRLEN) { (const int64_t* widths, size_t num_widths),
                                             (const int64_t* counts, size_t num_counts),
                                             (const int64_t* unit_counts, size_t num_units) };
%apply (const int32_t* ARR, size_t ARRLEN) { (const int32_t* activations, size_t num_activations) };

/* ---- serving (../swig/inference.i) ---- */
SR_JAVA_HANDLE(shardrec_inference_t)
SR_JAVA_HANDLE(shardrec_inference_version_t)
%apply (const int32_t* ARR, size_t ARRLEN) { (const int32_t* storages, size_t num_storages) };
%apply (const int64_t* ARR, size_t ARRLEN) { (const int64_t* cache_bytes, size_t num_tiers) };
/* A borrowed read-only address out (a snapshot's dense tensor): a long[1]; the Java layer wraps
   it in a direct buffer (shardrec_bind_java_direct_floats). */
%typemap(jni) const float** ADDR "jlongArray"
%typemap(jtype) const float** ADDR "long[]"
%typemap(jstype) const float** ADDR "long[]"
%typemap(javain) const float** ADDR "$javainput"
%typemap(in) const float** ADDR (const float* addr = NULL) %{
  if ($input == NULL || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    sr_java_throw_einval(jenv, "address holder must be a long[1]");
    return $null;
  }
  $1 = &addr;
%}
%typemap(argout) const float** ADDR %{
  { jlong v = (jlong)(intptr_t)addr$argnum; (*jenv)->SetLongArrayRegion(jenv, $input, 0, 1, &v); }
%}

/* ---- dynamic tables' delta export: direct buffers as raw out-arrays (the Java layer sized
   them from the counts the first call returned: ids and tombstones by count, rows by count x
   dim); the counts come back in long[1] holders ---- */
%typemap(jni) int64_t* RAWI64 "jobject"
%typemap(jtype) int64_t* RAWI64 "java.nio.LongBuffer"
%typemap(jstype) int64_t* RAWI64 "java.nio.LongBuffer"
%typemap(javain) int64_t* RAWI64 "$javainput"
%typemap(in) int64_t* RAWI64 %{
  $1 = NULL;
  if ($input != NULL) {
    $1 = ($1_ltype)(*jenv)->GetDirectBufferAddress(jenv, $input);
    if ($1 == NULL) { sr_java_throw_einval(jenv, "buffer must be a direct NIO buffer"); return $null; }
  }
%}
%apply int64_t* RAWI64 { int64_t* ids, int64_t* tombstones };
%apply float* RAWF { float* rows };
/* A quantized serving table's row scales and biases (shardrec_inference_row_scales): direct
   FloatBuffers of n floats, sized by the Java layer (biases may be null). */
%apply float* RAWF { float* scales, float* biases };
%apply size_t* OUT { size_t* num_rows, size_t* num_tombstones };
/* The delta's flags (shardrec_embedding_dynamic_delta_ext) in an int[1]: SHARDREC_DELTA_FULL. */
%apply uint32_t* OUT { uint32_t* flags };
/* ... and its replay into a serving handle (shardrec_inference_apply_delta and _ext, whose flags
   come in as a long): the same shapes in. */
%apply int64_t* RAWI64 { const int64_t* ids };
%apply float* RAWF { const float* rows };
%apply (const int64_t* BUF, size_t LEN) { (const int64_t* tombstones, size_t num_tombstones) };

/* Evaluation mode and SCORE eviction: the mode out, the caller's scores in (a direct
   DoubleBuffer; the Java layer checked that it holds one score per id, n), the count set out. */
%typemap(jni) const double* RAWF64 "jobject"
%typemap(jtype) const double* RAWF64 "java.nio.DoubleBuffer"
%typemap(jstype) const double* RAWF64 "java.nio.DoubleBuffer"
%typemap(javain) const double* RAWF64 "$javainput"
%typemap(in) const double* RAWF64 %{
  $1 = NULL;
  if ($input != NULL) {
    $1 = ($1_ltype)(*jenv)->GetDirectBufferAddress(jenv, $input);
    if ($1 == NULL) { sr_java_throw_einval(jenv, "buffer must be a direct NIO buffer"); return $null; }
  }
%}
%apply const double* RAWF64 { const double* scores };
%apply int32_t* OUT { int32_t* training };
%apply size_t* OUT { size_t* num_set };

%include "../swig/shardrec.i"

/* ---- custom rendezvous stores: an org.shardrec.Store called back through JNI ---- */
%include "store_callbacks.i"

/* ---- mesh sync hooks: an org.shardrec.Mesh.SyncHook called back through JNI ---- */
%{
/* The hook object and what calling it needs, resolved on the installing (Java) thread. Freed
   by shardrec_bind_java_sync_hook_free once the mesh no longer uses it (after a reinstall or
   the mesh's destruction). */
typedef struct sr_java_hook {
  JavaVM* vm;
  jobject hook;      /* global ref; void sync(ByteBuffer data, long count, int dtype) */
  jmethodID sync;
  jclass ex_class;   /* global ref to ShardrecException */
  jmethodID ex_code;
} sr_java_hook_t;

static int32_t sr_java_sync_hook(void* data, size_t count, int32_t dtype, void* payload) {
  const sr_java_hook_t* h = (const sr_java_hook_t*)payload;
  JNIEnv* env = NULL;
  int attached = 0;
  int32_t rc = SHARDREC_OK;
  jobject buf;
  if ((*h->vm)->GetEnv(h->vm, (void**)&env, JNI_VERSION_1_6) == JNI_EDETACHED) {
    if ((*h->vm)->AttachCurrentThread(h->vm, (void**)&env, NULL) != JNI_OK) return SHARDREC_ERROR;
    attached = 1;
  }
  buf = (*env)->NewDirectByteBuffer(env, data, (jlong)(count * shardrec_dtype_size(dtype)));
  if (buf == NULL) {
    rc = sr_java_exception_status(env, h->ex_class, h->ex_code);
  } else {
    (*env)->CallVoidMethod(env, h->hook, h->sync, buf, (jlong)count, (jint)dtype);
    if ((*env)->ExceptionCheck(env)) rc = sr_java_exception_status(env, h->ex_class, h->ex_code);
    (*env)->DeleteLocalRef(env, buf);
  }
  if (attached) (*h->vm)->DetachCurrentThread(h->vm);
  return rc;
}

/* Installs @p hook (NULL removes the hook); *payload_out is what to free with
   shardrec_bind_java_sync_hook_free once the mesh stops using it (0 for none). */
shardrec_status_t shardrec_bind_mesh_set_java_sync_hook(shardrec_mesh_t* mesh, JNIEnv* jni_env,
                                                        jobject hook, int64_t* payload_out) {
  sr_java_hook_t* h;
  jclass cls, ex;
  shardrec_status_t rc;
  *payload_out = 0;
  if (hook == NULL) return shardrec_mesh_set_sync_hook(mesh, NULL, NULL);
  h = (sr_java_hook_t*)calloc(1, sizeof(*h));
  if (h == NULL) return SHARDREC_ENOMEM;
  cls = (*jni_env)->GetObjectClass(jni_env, hook);
  ex = (*jni_env)->FindClass(jni_env, "org/shardrec/ShardrecException");
  if ((*jni_env)->GetJavaVM(jni_env, &h->vm) != JNI_OK || cls == NULL || ex == NULL) {
    (*jni_env)->ExceptionClear(jni_env);
    free(h);
    return SHARDREC_ERROR;
  }
  h->sync = (*jni_env)->GetMethodID(jni_env, cls, "sync", "(Ljava/nio/ByteBuffer;JI)V");
  h->ex_code = (*jni_env)->GetMethodID(jni_env, ex, "code", "()I");
  if (h->sync == NULL || h->ex_code == NULL) {
    (*jni_env)->ExceptionClear(jni_env);
    free(h);
    return SHARDREC_ERROR;
  }
  h->hook = (*jni_env)->NewGlobalRef(jni_env, hook);
  h->ex_class = (jclass)(*jni_env)->NewGlobalRef(jni_env, ex);
  rc = shardrec_mesh_set_sync_hook(mesh, sr_java_sync_hook, h);
  if (rc != SHARDREC_OK) {
    (*jni_env)->DeleteGlobalRef(jni_env, h->hook);
    (*jni_env)->DeleteGlobalRef(jni_env, h->ex_class);
    free(h);
    return rc;
  }
  *payload_out = (int64_t)(intptr_t)h;
  return SHARDREC_OK;
}

void shardrec_bind_java_sync_hook_free(JNIEnv* jni_env, int64_t payload) {
  sr_java_hook_t* h = (sr_java_hook_t*)(intptr_t)payload;
  if (h == NULL) return;
  (*jni_env)->DeleteGlobalRef(jni_env, h->hook);
  (*jni_env)->DeleteGlobalRef(jni_env, h->ex_class);
  free(h);
}
%}

%typemap(jni) jobject hook "jobject"
%typemap(jtype) jobject hook "Object"
%typemap(jstype) jobject hook "Object"
%typemap(javain) jobject hook "$javainput"
%typemap(in) jobject hook %{ $1 = $input; %}
%apply int64_t* OUT { int64_t* payload_out };
shardrec_status_t shardrec_bind_mesh_set_java_sync_hook(shardrec_mesh_t* mesh, JNIEnv* jni_env,
                                                        jobject hook, int64_t* payload_out);
void shardrec_bind_java_sync_hook_free(JNIEnv* jni_env, int64_t payload);

/* ---- serving into Java arrays, and snapshot memory as direct buffers ---- */
%{
/* A lookup on the handle @p inf, or on the snapshot @p ver when it is not NULL, into the Java
   float[] @p out_array without a copy: the array is pinned (GetPrimitiveArrayCritical) for the
   C call only, and no JNI call runs while it is pinned. */
shardrec_status_t shardrec_bind_inference_lookup_array(
    const shardrec_inference_t* inf, const shardrec_inference_version_t* ver, JNIEnv* jni_env,
    int64_t batch_size, size_t num_features, const int32_t* lengths, size_t num_lengths,
    const int64_t* values, size_t num_values, const float* weights, size_t num_weights,
    jobject out_array, uint64_t* version_out) {
  shardrec_kjt_view_t kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values,
                                        num_values, weights, num_weights);
  size_t n = 0;
  float* out = NULL;
  shardrec_status_t rc;
  if (out_array != NULL) {
    n = (size_t)(*jni_env)->GetArrayLength(jni_env, (jarray)out_array);
    out = (float*)(*jni_env)->GetPrimitiveArrayCritical(jni_env, (jarray)out_array, NULL);
    if (out == NULL) {
      (*jni_env)->ExceptionClear(jni_env);
      return SHARDREC_ENOMEM;
    }
  }
  rc = ver != NULL ? shardrec_inference_snapshot_lookup(ver, &kjt, out, n)
                   : shardrec_inference_lookup(inf, &kjt, out, n, version_out);
  if (out != NULL) (*jni_env)->ReleasePrimitiveArrayCritical(jni_env, (jarray)out_array, out, 0);
  return rc;
}

/* A direct ByteBuffer over @p count floats at @p address (memory the caller keeps alive). */
jobject shardrec_bind_java_direct_floats(JNIEnv* jni_env, int64_t address, int64_t count) {
  return (*jni_env)->NewDirectByteBuffer(jni_env, (void*)(intptr_t)address,
                                         (jlong)count * (jlong)sizeof(float));
}
%}

%typemap(jni) jobject out_array "jfloatArray"
%typemap(jtype) jobject out_array "float[]"
%typemap(jstype) jobject out_array "float[]"
%typemap(javain) jobject out_array "$javainput"
%typemap(in) jobject out_array %{ $1 = $input; %}
%apply uint64_t* OUT { uint64_t* version_out };
shardrec_status_t shardrec_bind_inference_lookup_array(
    const shardrec_inference_t* inf, const shardrec_inference_version_t* ver, JNIEnv* jni_env,
    int64_t batch_size, size_t num_features, const int32_t* lengths, size_t num_lengths,
    const int64_t* values, size_t num_values, const float* weights, size_t num_weights,
    jobject out_array, uint64_t* version_out);
%clear uint64_t* version_out;
%typemap(jni) jobject "jobject"
%typemap(jtype) jobject "java.nio.ByteBuffer"
%typemap(jstype) jobject "java.nio.ByteBuffer"
%typemap(out) jobject %{ $result = $1; %}
%typemap(javaout) jobject { return $jnicall; }
jobject shardrec_bind_java_direct_floats(JNIEnv* jni_env, int64_t address, int64_t count);
