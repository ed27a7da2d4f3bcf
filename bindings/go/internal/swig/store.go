// Callbacks into Go: custom rendezvous stores (shardrec_comm_create_with_store) and mesh sync
// hooks (shardrec_mesh_set_sync_hook); the C trampolines are in store_callbacks.c.
// Hand-written, not generated.
package swig

/*
#include <stdint.h>
#include <stdlib.h>
#include "shardrec/comm.h"
int32_t sr_go_comm_create_with_store(shardrec_comm_t** out, uintptr_t handle, int32_t world_size,
                                     int32_t rank, const shardrec_comm_options_t* options,
                                     char** message);
int32_t sr_go_mesh_set_sync_hook(shardrec_mesh_t* mesh, uintptr_t handle, char** message);
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// Store is the Go form of shardrec_store_callbacks_t; the public package documents it.
type Store interface {
	Set(key string, value []byte) error
	Get(key string, timeoutMs int64) ([]byte, error)
}

// storeStatus is the status a store error reports: a libshardrec error's code (also wrapped),
// else SHARDREC_ERROR.
func storeStatus(err error) C.int32_t {
	if code, ok := ErrorCode(err); ok && code < 0 {
		return C.int32_t(code)
	}
	return -1
}

//export srGoStoreSet
func srGoStoreSet(h C.uintptr_t, key *C.char, value unsafe.Pointer, n C.size_t) (rc C.int32_t) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	s := cgo.Handle(h).Value().(Store)
	var v []byte
	if n > 0 {
		v = C.GoBytes(value, C.int(n))
	} else {
		v = []byte{}
	}
	if err := s.Set(C.GoString(key), v); err != nil {
		return storeStatus(err)
	}
	return 0
}

//export srGoStoreGet
func srGoStoreGet(h C.uintptr_t, key *C.char, timeoutMs C.int64_t, buf unsafe.Pointer,
	bufLen C.size_t, valueLen *C.size_t) (rc C.int32_t) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	s := cgo.Handle(h).Value().(Store)
	v, err := s.Get(C.GoString(key), int64(timeoutMs))
	if err != nil {
		return storeStatus(err)
	}
	*valueLen = C.size_t(len(v))
	if buf != nil && len(v) > 0 && int(bufLen) >= len(v) {
		copy(unsafe.Slice((*byte)(buf), len(v)), v)
	}
	return 0
}

// CommCreateWithStore creates a communicator whose rendezvous calls store. The store is kept
// for the rest of the process: a C communicator (and its splits) may call it after every Go
// handle is gone (collections and meshes keep theirs).
func CommCreateWithStore(out []uintptr, store Store, worldSize, rank int, options Comm_options) error {
	h := cgo.NewHandle(store)
	var opts *C.shardrec_comm_options_t
	if options != nil {
		opts = (*C.shardrec_comm_options_t)(unsafe.Pointer(options.Swigcptr()))
	}
	var raw *C.shardrec_comm_t
	var msg *C.char
	rc := C.sr_go_comm_create_with_store(&raw, C.uintptr_t(h), C.int32_t(worldSize),
		C.int32_t(rank), opts, &msg)
	if rc < 0 {
		m := ""
		if msg != nil {
			m = C.GoString(msg)
			C.free(unsafe.Pointer(msg))
		}
		return NewError(int(rc), m)
	}
	out[0] = uintptr(unsafe.Pointer(raw))
	return nil
}

// SyncHook is the Go form of shardrec_sync_hook_fn; the public package documents it.
type SyncHook func(data unsafe.Pointer, count int, dtype int) error

//export srGoSyncHook
func srGoSyncHook(h C.uintptr_t, data unsafe.Pointer, count C.size_t, dtype C.int32_t) (rc C.int32_t) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	hook := cgo.Handle(h).Value().(SyncHook)
	if err := hook(data, int(count), int(dtype)); err != nil {
		return storeStatus(err)
	}
	return 0
}

// MeshSetSyncHook installs hook on mesh (nil removes it). It returns the cgo handle the mesh
// now calls (0 for none): delete it with DeleteHandle once the mesh no longer uses it.
func MeshSetSyncHook(mesh uintptr, hook SyncHook) (uintptr, error) {
	var h cgo.Handle
	if hook != nil {
		h = cgo.NewHandle(hook)
	}
	var msg *C.char
	rc := C.sr_go_mesh_set_sync_hook((*C.shardrec_mesh_t)(unsafe.Pointer(mesh)), C.uintptr_t(h), &msg)
	if rc < 0 {
		if h != 0 {
			h.Delete()
		}
		m := ""
		if msg != nil {
			m = C.GoString(msg)
			C.free(unsafe.Pointer(msg))
		}
		return 0, NewError(int(rc), m)
	}
	return uintptr(h), nil
}

// DeleteHandle releases a handle from MeshSetSyncHook (0 is a no-op).
func DeleteHandle(h uintptr) {
	if h != 0 {
		cgo.Handle(h).Delete()
	}
}
