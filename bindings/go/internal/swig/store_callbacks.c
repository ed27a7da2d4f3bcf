/* C side of the Go callbacks (store.go): rendezvous stores and mesh sync hooks forward to the
 * exported Go functions with a cgo handle as payload; the install calls copy the thread's
 * message in the same C call (goroutines move between OS threads). Hand-written. */
#include <stdint.h>
#include <stdlib.h>

#include "_cgo_export.h"
#include "shardrec/comm.h"
#include "shardrec/replica.h"

static int32_t sr_go_store_set(void* payload, const char* key, const void* value,
                               size_t value_len) {
  return srGoStoreSet((uintptr_t)payload, (char*)key, (void*)value, value_len);
}

static int32_t sr_go_store_get(void* payload, const char* key, int64_t timeout_ms, void* buf,
                               size_t buf_len, size_t* value_len) {
  return srGoStoreGet((uintptr_t)payload, (char*)key, timeout_ms, buf, buf_len, value_len);
}

int32_t sr_go_comm_create_with_store(shardrec_comm_t** out, uintptr_t handle, int32_t world_size,
                                     int32_t rank, const shardrec_comm_options_t* options,
                                     char** message) {
  shardrec_store_callbacks_t cb;
  int32_t rc = shardrec_store_callbacks_init(&cb, SHARDREC_STORE_CALLBACKS_VERSION);
  *message = NULL;
  if (rc == SHARDREC_OK) {
    cb.set = sr_go_store_set;
    cb.get = sr_go_store_get;
    cb.payload = (void*)handle;
    rc = shardrec_comm_create_with_store(out, &cb, world_size, rank, options);
  }
  if (rc < 0) {
    size_t n = shardrec_last_error_copy(NULL, 0);
    *message = (char*)malloc(n + 1);
    if (*message != NULL) shardrec_last_error_copy(*message, n + 1);
  }
  return rc;
}

static int32_t sr_go_sync_hook(void* data, size_t count, int32_t dtype, void* payload) {
  return srGoSyncHook((uintptr_t)payload, data, count, dtype);
}

/* Installs the Go hook behind @p handle (0 removes the hook). */
int32_t sr_go_mesh_set_sync_hook(shardrec_mesh_t* mesh, uintptr_t handle, char** message) {
  int32_t rc = handle != 0 ? shardrec_mesh_set_sync_hook(mesh, sr_go_sync_hook, (void*)handle)
                           : shardrec_mesh_set_sync_hook(mesh, NULL, NULL);
  *message = NULL;
  if (rc < 0) {
    size_t n = shardrec_last_error_copy(NULL, 0);
    *message = (char*)malloc(n + 1);
    if (*message != NULL) shardrec_last_error_copy(*message, n + 1);
  }
  return rc;
}
