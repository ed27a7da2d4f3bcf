/* Part of the Java SWIG module (%included by shardrec_java.i after the C API): custom
   rendezvous stores, an org.shardrec.Store called back through JNI. */

%{
/* Everything a callback needs, resolved on the creating (Java) thread: store callbacks may run
   on library threads, where FindClass would not see the application's class loader. Never
   freed: a C communicator (and its splits) may use the store for the life of the process. */
typedef struct sr_java_store {
  JavaVM* vm;
  jobject store;     /* global ref */
  jmethodID set;     /* void set(String, byte[]) */
  jmethodID get;     /* byte[] get(String, long) */
  jclass ex_class;   /* global ref to ShardrecException */
  jmethodID ex_code; /* int code() */
} sr_java_store_t;

static JNIEnv* sr_java_store_env(const sr_java_store_t* s, int* attached) {
  JNIEnv* env = NULL;
  *attached = 0;
  if ((*s->vm)->GetEnv(s->vm, (void**)&env, JNI_VERSION_1_6) == JNI_EDETACHED) {
    if ((*s->vm)->AttachCurrentThread(s->vm, (void**)&env, NULL) != JNI_OK) return NULL;
    *attached = 1;
  }
  return env;
}

/* The status of the pending Java exception, cleared: a ShardrecException's code, else
   SHARDREC_ERROR. */
static int32_t sr_java_exception_status(JNIEnv* env, jclass ex_class, jmethodID ex_code) {
  jthrowable ex = (*env)->ExceptionOccurred(env);
  int32_t code = SHARDREC_ERROR;
  (*env)->ExceptionClear(env);
  if (ex != NULL && (*env)->IsInstanceOf(env, ex, ex_class)) {
    code = (int32_t)(*env)->CallIntMethod(env, ex, ex_code);
    (*env)->ExceptionClear(env);
    if (code >= 0) code = SHARDREC_ERROR;
  }
  if (ex != NULL) (*env)->DeleteLocalRef(env, ex);
  return code;
}

static int32_t sr_java_store_status(JNIEnv* env, const sr_java_store_t* s) {
  return sr_java_exception_status(env, s->ex_class, s->ex_code);
}

static int32_t sr_java_store_set(void* payload, const char* key, const void* value,
                                 size_t value_len) {
  const sr_java_store_t* s = (const sr_java_store_t*)payload;
  int attached;
  int32_t rc = SHARDREC_OK;
  jstring jkey;
  jbyteArray jvalue;
  JNIEnv* env = sr_java_store_env(s, &attached);
  if (env == NULL) return SHARDREC_ERROR;
  jkey = (*env)->NewStringUTF(env, key);
  jvalue = (*env)->NewByteArray(env, (jsize)value_len);
  if (jkey == NULL || jvalue == NULL) {
    rc = sr_java_store_status(env, s);
  } else {
    if (value_len > 0) {
      (*env)->SetByteArrayRegion(env, jvalue, 0, (jsize)value_len, (const jbyte*)value);
    }
    (*env)->CallVoidMethod(env, s->store, s->set, jkey, jvalue);
    if ((*env)->ExceptionCheck(env)) rc = sr_java_store_status(env, s);
  }
  if (jkey != NULL) (*env)->DeleteLocalRef(env, jkey);
  if (jvalue != NULL) (*env)->DeleteLocalRef(env, jvalue);
  if (attached) (*s->vm)->DetachCurrentThread(s->vm);
  return rc;
}

static int32_t sr_java_store_get(void* payload, const char* key, int64_t timeout_ms, void* buf,
                                 size_t buf_len, size_t* value_len) {
  const sr_java_store_t* s = (const sr_java_store_t*)payload;
  int attached;
  int32_t rc = SHARDREC_OK;
  jstring jkey;
  jbyteArray jvalue = NULL;
  JNIEnv* env = sr_java_store_env(s, &attached);
  if (env == NULL) return SHARDREC_ERROR;
  jkey = (*env)->NewStringUTF(env, key);
  if (jkey == NULL) {
    rc = sr_java_store_status(env, s);
  } else {
    jvalue = (jbyteArray)(*env)->CallObjectMethod(env, s->store, s->get, jkey, (jlong)timeout_ms);
    if ((*env)->ExceptionCheck(env)) {
      rc = sr_java_store_status(env, s);
    } else if (jvalue == NULL) {
      rc = SHARDREC_ETIMEOUT; /* null: the key did not appear in time (Comm's CheckedStore throws
                                 for a null returned before the timeout) */
    } else {
      size_t n = (size_t)(*env)->GetArrayLength(env, jvalue);
      *value_len = n;
      if (buf != NULL && buf_len >= n && n > 0) {
        (*env)->GetByteArrayRegion(env, jvalue, 0, (jsize)n, (jbyte*)buf);
      }
    }
  }
  if (jkey != NULL) (*env)->DeleteLocalRef(env, jkey);
  if (jvalue != NULL) (*env)->DeleteLocalRef(env, jvalue);
  if (attached) (*s->vm)->DetachCurrentThread(s->vm);
  return rc;
}

shardrec_status_t shardrec_bind_comm_create_with_java_store(
    shardrec_comm_t** out, JNIEnv* jni_env, jobject store, int32_t world_size, int32_t rank,
    const shardrec_comm_options_t* options) {
  shardrec_store_callbacks_t cb;
  sr_java_store_t* s;
  jclass cls, ex;
  if (store == NULL) return shardrec_comm_create_with_store(out, NULL, world_size, rank, options);
  s = (sr_java_store_t*)calloc(1, sizeof(*s));
  if (s == NULL) return SHARDREC_ENOMEM;
  cls = (*jni_env)->GetObjectClass(jni_env, store);
  ex = (*jni_env)->FindClass(jni_env, "org/shardrec/ShardrecException");
  if ((*jni_env)->GetJavaVM(jni_env, &s->vm) != JNI_OK || cls == NULL || ex == NULL) {
    (*jni_env)->ExceptionClear(jni_env);
    free(s);
    return SHARDREC_ERROR;
  }
  s->set = (*jni_env)->GetMethodID(jni_env, cls, "set", "(Ljava/lang/String;[B)V");
  s->get = (*jni_env)->GetMethodID(jni_env, cls, "get", "(Ljava/lang/String;J)[B");
  s->ex_code = (*jni_env)->GetMethodID(jni_env, ex, "code", "()I");
  if (s->set == NULL || s->get == NULL || s->ex_code == NULL) {
    (*jni_env)->ExceptionClear(jni_env);
    free(s);
    return SHARDREC_ERROR;
  }
  s->store = (*jni_env)->NewGlobalRef(jni_env, store);
  s->ex_class = (jclass)(*jni_env)->NewGlobalRef(jni_env, ex);
  shardrec_store_callbacks_init(&cb, SHARDREC_STORE_CALLBACKS_VERSION);
  cb.set = sr_java_store_set;
  cb.get = sr_java_store_get;
  cb.payload = s;
  return shardrec_comm_create_with_store(out, &cb, world_size, rank, options);
}
%}

%typemap(in, numinputs=0) JNIEnv* jni_env %{ $1 = jenv; %}
%typemap(jni) jobject store "jobject"
%typemap(jtype) jobject store "org.shardrec.Store"
%typemap(jstype) jobject store "org.shardrec.Store"
%typemap(javain) jobject store "$javainput"
%typemap(in) jobject store %{ $1 = $input; %}
shardrec_status_t shardrec_bind_comm_create_with_java_store(
    shardrec_comm_t** out, JNIEnv* jni_env, jobject store, int32_t world_size, int32_t rank,
    const shardrec_comm_options_t* options);
